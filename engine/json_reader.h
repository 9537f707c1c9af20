// The one reader for JSON that comes from outside the process: request bodies, load
// parameters, config.json files, package, checkpoint and safetensors metadata. It reads the
// same documents and values as nlohmann::json::parse (RFC 8259, UTF-8 checked, integers as
// int64/uint64 when they fit), several times faster on number-heavy bodies (std::from_chars),
// and enforces three limits before the work they bound: a byte cap (checked first), a nesting
// cap (checked while descending, so a hostile text cannot exhaust the stack) and a budget of
// values (arrays, objects and scalars: a bound on the memory the parsed document takes).
//
//   nlohmann::json j = hg::read_json(body, {.max_depth = 32, .max_values = 4096, .max_bytes = 1 << 20},
//                                    "the request body");
//   // malformed: hg::InvalidArgument "malformed JSON in the request body: expected ',' or ']'
//   //            at byte offset 17"
//   nlohmann::json c = hg::read_json_file(dir / "config.json", {});    // errors: hg::FormatError
//   throw hg::InvalidArgument("bad value " + hg::json_excerpt(c["x"]));  // bounded, never a full dump
#pragma once
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace hg {

struct JsonLimits {
  size_t max_depth = 64;                  // nesting of arrays and objects
  size_t max_values = size_t{1} << 20;    // values of every kind, containers included
  size_t max_bytes = size_t{16} << 20;    // length of the text
};

// `what` names the text in errors (InvalidArgument, with the byte offset for malformed text).
nlohmann::json read_json(std::string_view text, const JsonLimits& limits, std::string_view what);
// The same into an ordered_json: objects keep their members in document order. Keys must be
// unique in every object (in read_json a repeated key's last value wins, as in nlohmann).
nlohmann::ordered_json read_ordered_json(std::string_view text, const JsonLimits& limits, std::string_view what);
// Reads a file through read_json after checking its size; errors (FormatError, IoError) name the
// file.
nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits);

// At most about max_chars of v's compact text ("..." marks a cut; containers nested deeper than
// 16 show as "[...]"): for quoting an untrusted value in an error or a log line. The time
// taken is bounded by max_chars, not by the size of v.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 80);
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_chars = 80);

// Length (2..4) of the valid UTF-8 sequence of a non-ASCII byte at s[i]; 0 if there is none
// (stray or overlong bytes, surrogates, truncated sequences, code points above U+10FFFF).
size_t utf8_sequence(std::string_view s, size_t i);

}  // namespace hg
