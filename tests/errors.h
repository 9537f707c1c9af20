// The message of the error a call throws, for tests that check what an error names.
//
//   std::string e = hg::test::error_of<hg::ShapeError>([&] { hg::ops::conv2d(x, w); });
//   EXPECT_THAT(e, HasSubstr("op 'conv2d'"));        // a test failure if nothing was thrown
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "engine/error.h"

namespace hg::test {

template <class E = Error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

}  // namespace hg::test
