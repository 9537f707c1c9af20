// The fuzz target for training data files (training/data_files.h): IDX (raw or gzip), CSV,
// .npy, .npz and text, each read the way hgraph-train reads them.
#include <string>

#include "fuzz/fuzz_inputs.h"
#include "fuzz/fuzz_targets.h"
#include "training/data_files.h"

namespace hg::fuzz {

void load_data_file(std::string_view input) {
  const size_t eol = input.find('\n');
  if (eol == std::string_view::npos) return;  // no format line: nothing to run
  const std::string_view ext = input.substr(0, eol);
  if (ext != ".idx" && ext != ".csv" && ext != ".npy" && ext != ".npz" && ext != ".txt") return;
  const auto file = scratch_dir() / ("data" + std::string(ext));
  write_bytes(file, input.substr(eol + 1));
  // Limits small enough that a bomb stops quickly, as a server-side data path would set them.
  constexpr size_t kLimit = size_t{64} << 20;
  if (ext == ".idx") training::read_idx(file, kLimit);
  else if (ext == ".txt") training::read_text_corpus(file, kLimit);
  else training::read_table(file, {.max_bytes = kLimit, .max_columns = 4096});
}

}  // namespace hg::fuzz
