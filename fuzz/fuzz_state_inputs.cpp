// The fuzz targets for state hgraph wrote earlier and reads back, which a damaged disk or
// another build can make anything: trainer checkpoints and disk graph-cache entries. Both
// formats promise a round trip, so an accepted input is written again and must read back the same.
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"
#include "fuzz/fuzz_inputs.h"
#include "fuzz/fuzz_targets.h"
#include "graphs/graph_serialize.h"
#include "training/checkpoint.h"

namespace hg::fuzz {

// Written again, an accepted checkpoint reads back to the same bytes when written once more.
void load_checkpoint(std::string_view input) {
  const training::Checkpoint c =
      training::parse_checkpoint(std::span(reinterpret_cast<const uint8_t*>(input.data()), input.size()), "fuzz-input");
  const std::vector<uint8_t> written = training::serialize_checkpoint(c);
  std::vector<uint8_t> again;
  try {
    again = training::serialize_checkpoint(training::parse_checkpoint(written, "serialize_checkpoint()"));
  } catch (const Error& e) {
    round_trip_differs(std::string("the written checkpoint is rejected: ") + e.what());
  }
  if (again != written) round_trip_differs("the written checkpoint reads back differently");
}

// The input with its checksum appended, read for the fuzz header; an accepted entry written
// again for that header must be exactly those bytes (the format has one encoding per graph).
void load_graph_cache(std::string_view input) {
  std::vector<uint8_t> entry(input.begin(), input.end());
  const uint64_t checksum = hash64(entry);
  entry.resize(entry.size() + sizeof checksum);
  std::memcpy(entry.data() + input.size(), &checksum, sizeof checksum);
  const graphs::EntryHeader header{std::string(kCacheEngine), std::string(kCacheIsa), std::string(kCacheKey)};
  const graphs::Graph g = graphs::read_entry(entry, header, "fuzz-input");
  if (graphs::write_entry(header, g) != entry) round_trip_differs("the graph read from the entry writes different bytes");
}

}  // namespace hg::fuzz
