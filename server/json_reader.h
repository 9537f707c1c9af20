// A JSON parser for request and response bodies: the same documents and values as
// nlohmann::json::parse (RFC 8259, UTF-8 checked, integers as int64/uint64 when they fit),
// several times faster on number-heavy bodies (std::from_chars), and with a nesting cap
// checked while parsing, so a hostile body cannot exhaust the stack.
//
//   nlohmann::json j = hg::server::read_json(body, /*max_depth=*/108, "the request body");
//   // malformed: hg::InvalidArgument "malformed JSON in the request body: expected ',' or ']'
//   //            at byte offset 17"
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

namespace hg::server {

// `what` names the text in errors. Arrays and objects nested deeper than max_depth are an
// InvalidArgument ("... is nested deeper than N levels").
nlohmann::json read_json(std::string_view text, size_t max_depth, std::string_view what);

// Length (2..4) of the valid UTF-8 sequence of a non-ASCII byte at s[i]; 0 if there is none
// (stray or overlong bytes, surrogates, truncated sequences, code points above U+10FFFF).
size_t utf8_sequence(std::string_view s, size_t i);

}  // namespace hg::server
