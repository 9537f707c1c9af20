// Where compiled graphs are dumped: every Executable::compile appends its dump (graph, memory
// plan, pass report) under a header line naming the graph's signature hash.
//
//   hg::graphs::set_graph_dump("/tmp/graphs.txt");   // truncates the file; throws IoError if unwritable
//   hg::graphs::set_graph_dump("-");                 // stderr
//   hg::graphs::set_graph_dump("");                  // off
// Without a call, the environment variable HG_DUMP_GRAPH=PATH (or "-") turns it on (appending to
// PATH). The tools take `--dump-graph FILE`. Appends are serialised: threads may compile at once.
#pragma once
#include <cstdint>
#include <string>

namespace hg::graphs {

class Executable;

void set_graph_dump(const std::string& path);
std::string graph_dump_path();  // "" when off

// Appends `exe`'s dump to the dump file if one is set; a write failure is reported on stderr.
void append_graph_dump(const Executable& exe);

// `v` as 16 hex digits (the dump header's signature hash, the disk cache's file names).
std::string hex64(uint64_t v);

}  // namespace hg::graphs
