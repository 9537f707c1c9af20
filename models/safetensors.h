// Reader and writer for the safetensors file format, independent of hg tensors.
//
//   hg::safetensors::File f = hg::safetensors::read("model.safetensors");
//   if (const auto* w = f.find("0.weight")) {
//     // w->dtype == "F32", w->shape == {32, 64}, w->data holds 32*64*4 little-endian bytes
//   }
//   f.metadata["source"] = "retrained";
//   hg::safetensors::write("model.safetensors", f);  // atomic replace
//
// Layout: an 8-byte little-endian u64 N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}} (possibly padded with trailing spaces), then the data
// section; offsets are relative to its start and must cover it exactly, without overlap.
// Every validation failure throws hg::FormatError naming the source, the tensor and
// field, and the byte offset in the file where that applies; I/O failures throw hg::IoError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace hg::safetensors {

struct Entry {
  std::string name;
  std::string dtype;  // "F32","F16","BF16","F64","I64","I32","I16","I8","U8","BOOL"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian bytes, product(shape) * dtype_size(dtype)
};

struct File {
  std::vector<Entry> entries;  // read: in header order; write: laid out in this order
  std::map<std::string, std::string> metadata;
  const Entry* find(const std::string& name) const;  // nullptr when absent
};

// Reads and validates a whole file. Throws hg::IoError / hg::FormatError.
File read(const std::filesystem::path& path);

// Parses and validates an in-memory file image; source_name is used in error messages.
File parse(std::span<const uint8_t> bytes, const std::string& source_name);

// Serialises `file` to the safetensors byte image (header padded so data starts at a
// multiple of 8). Throws hg::InvalidArgument / DTypeError / ShapeError for bad entries.
std::vector<uint8_t> serialize(const File& file);

// Writes atomically: a temporary file in the same directory, fsync, rename, fsync dir.
void write(const std::filesystem::path& path, const File& file);

// Bytes per element of a safetensors dtype name; throws hg::DTypeError if unknown.
size_t dtype_size(const std::string& dtype);

}  // namespace hg::safetensors
