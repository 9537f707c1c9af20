// write_onnx (models/onnx_export.h) on graphs the importer made: PyTorch's exports
// (scripts/testdata_onnx.py) imported, written back as opset 17, accepted by Python's onnx
// checker and imported again give PyTorch's outputs; what opset 17 cannot hold is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "models/module.h"
#include "models/onnx_export.h"
#include "models/onnx_import.h"
#include "models/state_dict.h"
#include "tests/errors.h"
#include "tests/test_env.h"

#ifndef HG_TESTDATA_DIR
#error "HG_TESTDATA_DIR must be defined (tests/CMakeLists.txt)"
#endif

namespace hg::models {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path data_dir() { return fs::path(HG_TESTDATA_DIR) / "onnx"; }

class OnnxExportRoundTripTest : public testing::TestWithParam<const char*> {};

TEST_P(OnnxExportRoundTripTest, ImportedGraphWrittenAsOpset17MatchesPyTorch) {
  const std::string c = GetParam();
  const auto dir = test::temp_dir("OnnxExportRoundTrip_" + c);
  std::unique_ptr<Module> imported;
  const ModelPackage p = import_onnx(data_dir() / (c + ".onnx"), &imported);
  write_onnx(dir / "model.onnx", p.spec, imported->state_dict());
  if (std::system("timeout 60 /usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0) {
    const std::string cmd = "timeout 120 /usr/bin/python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1]); "
                            "onnx.checker.check_model(m, full_check=True); assert m.opset_import[0].version == 17\" " +
                            (dir / "model.onnx").string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "the onnx checker rejected " << c;
  }
  std::unique_ptr<Module> again;
  const ModelPackage q = import_onnx(dir / "model.onnx", &again);
  EXPECT_EQ(q.spec.inputs[0].shape, p.spec.inputs[0].shape);
  const auto ref = tensors_from(safetensors::read(data_dir() / (c + ".safetensors")), c);
  const auto got = again->forward_all({ref.at("input")})[0].to_vector();
  const auto want = ref.at("output").to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << c << " element " << i;
    ASSERT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i]) + 1e-5) << c << " element " << i;
  }
  fs::remove_all(dir);
}

// Gelu fused at import (bert: written back as its erf chain), shape arithmetic kept in the graph
// (bert_seq, class_token), Pad and Clip inputs, ConstantOfShape, Einsum, recurrent layers.
INSTANTIATE_TEST_SUITE_P(Imported, OnnxExportRoundTripTest,
                         testing::Values("mlp_op13", "lenet5_op14", "resnet18_op17", "bert_op13", "bert_op17",
                                         "bert_seq_op17", "class_token_op14", "act_pad_op13", "upsample_op17",
                                         "einsum_op17", "gru_l2_bi_op17", "window_mask_op13"),
                         [](const auto& info) { return std::string(info.param); });

TEST(OnnxExportTest, WhatOpset17CannotHoldIsNamed) {
  std::unique_ptr<Module> m;
  const ModelPackage p = import_onnx(data_dir() / "bert_op12.onnx", &m);  // Softmax before opset 13
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { onnx_model_bytes(p.spec, m->state_dict()); }),
              HasSubstr("(op Softmax): uses opset < 13 Softmax semantics"));
  PackageSpec seq = p.spec;
  seq.graph = {{"type", "sequential"}, {"layers", nlohmann::json::array()}};
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { onnx_model_bytes(seq, {}); }), HasSubstr("not of type \"ops\""));
}

}  // namespace
}  // namespace hg::models
