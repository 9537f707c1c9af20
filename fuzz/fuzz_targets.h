// The loaders behind hg::fuzz::load, one function per target (internal to fuzz/): each takes
// the raw input and throws hg::Error for what it rejects.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace hg::fuzz {

// One scratch directory per process, for loaders that read files.
const std::filesystem::path& scratch_dir();
void write_bytes(const std::filesystem::path& p, std::string_view bytes);
// A round trip that did not give back what was read: not hg::Error, so it is a finding.
[[noreturn]] void round_trip_differs(const std::string& what);

// fuzz_server_inputs.cpp: what the HTTP server reads from a client.
void load_http(std::string_view input);      // raw bytes from a socket: Beast's parser, then the router
void load_generate(std::string_view input);  // a generate, completions or chat request body
void load_config(std::string_view input);    // a model's config.json

// fuzz_state_inputs.cpp: state hgraph wrote earlier and reads back.
void load_checkpoint(std::string_view input);   // a trainer checkpoint file
void load_graph_cache(std::string_view input);  // a disk graph-cache entry (see kCacheEngine)

// fuzz_data_inputs.cpp: training data files.
void load_data_file(std::string_view input);  // a format line, then an IDX, CSV, .npy, .npz or text file

}  // namespace hg::fuzz
