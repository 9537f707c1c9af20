// KServe v2 datatypes and tensors as they travel: every datatype of the protocol, raw
// little-endian row-major bytes (BYTES: per element a 4-byte LE length, then the bytes), and
// the conversions between JSON `data` and those bytes.
//
//   using namespace hg::server;
//   WireType t = wire_type_from_name("FP16").value();          // nullopt for an unknown name
//   WireTensor x{"input", WireType::FP32, {2, 2}, {}, {}};
//   x.data = json_to_bytes(nlohmann::json::parse("[[1,2],[3,4]]"), x, limits);  // 16 bytes
//   std::string text; append_json_data(text, x);              // "[1,2,3,4]" (flat, row-major)
//   std::vector<std::string> s = bytes_elements(b);           // the elements of a BYTES tensor
//
// Errors are hg::InvalidArgument with a message that names the tensor, the element index or
// the byte offset, and what was expected.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.h"

namespace hg::server {

enum class WireType : uint8_t { BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES };
inline constexpr WireType kAllWireTypes[] = {
    WireType::BOOL,  WireType::UINT8, WireType::UINT16, WireType::UINT32, WireType::UINT64,
    WireType::INT8,  WireType::INT16, WireType::INT32,  WireType::INT64,  WireType::FP16,
    WireType::FP32,  WireType::FP64,  WireType::BF16,   WireType::BYTES};

// "FP32" -> FP32; nullopt for anything else (names are case-sensitive).
std::optional<WireType> wire_type_from_name(std::string_view name);
const char* wire_type_name(WireType t);  // "FP32"
// Bytes of one element; 0 for BYTES (variable).
size_t wire_type_size(WireType t);
// The engine dtype a model tensor of this wire type holds; nullopt when the engine has none
// (UINT16, UINT32, UINT64, INT8, INT16, BYTES).
std::optional<DType> engine_dtype(WireType t);

// Limits applied while decoding untrusted input.
struct WireLimits {
  size_t max_json_depth = 100;              // nesting of `data` arrays (Triton's cap)
  uint64_t max_elements = uint64_t{1} << 26;  // elements of one tensor
  size_t max_json_values = size_t{1} << 25;   // JSON values in one request (the parsed document's memory)
  // Entries of a request's "inputs" and "outputs": the server sets them to what the model
  // declares, so a request naming more is refused before any per-entry work.
  size_t max_inputs = SIZE_MAX, max_outputs = SIZE_MAX;
};

struct WireTensor {
  std::string name;
  WireType datatype = WireType::FP32;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes, as above
  nlohmann::json parameters = nlohmann::json::object();
  bool binary = false;  // sent as binary data (binary tensor extension), not as JSON `data`
};

// Product of the dims; saturates at UINT64_MAX instead of overflowing.
uint64_t element_count(const std::vector<int64_t>& shape);
// "[1,3,224,224]"
std::string shape_text(const std::vector<int64_t>& shape);

// `role` names the kind of tensor in error messages: "input 'x': ..." or "output 'y': ...".

// JSON `data` (flat or nested, row-major) of tensor t (name, datatype, shape) -> raw bytes.
// Checks every element against the datatype (range, integer-ness, bool, string) and the count
// against the shape. FP16/BF16 in JSON are accepted as numbers (rounded to nearest even);
// for FP16/FP32/FP64/BF16 `null` reads as NaN (what append_json_data writes for NaN/inf).
std::string json_to_bytes(const nlohmann::json& data, const WireTensor& t, const WireLimits& limits,
                          std::string_view role = "input");
// Appends t.data as a flat JSON array: shortest round-trip decimals for floats ("null" for
// NaN/inf), true/false for BOOL, JSON strings for BYTES (invalid UTF-8 replaced).
void append_json_data(std::string& out, const WireTensor& t);
// Checks that `bytes` is a valid binary form of tensor t: the exact size for fixed-size types;
// for BYTES, length prefixes that stay inside the buffer and add up to exactly its size, with
// element_count(t.shape) elements. Errors name the tensor (role + t.name) and the byte offset.
void check_binary(std::string_view bytes, const WireTensor& t, std::string_view role = "input");
// The elements of a BYTES tensor's data (check_binary first).
std::vector<std::string> bytes_elements(std::string_view data);
// Length-prefixed encoding of strings (the inverse of bytes_elements).
std::string bytes_encode(const std::vector<std::string>& elements);

// Shortest decimal that reads back as the same value ("null" for NaN/inf): the one float
// printer of the server.
void append_number(std::string& out, float v);
void append_number(std::string& out, double v);
// `s` as a quoted JSON string literal; invalid UTF-8 becomes U+FFFD.
void append_json_string(std::string& out, std::string_view s);

}  // namespace hg::server
