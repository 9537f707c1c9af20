#include "training/predict_gather.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_reader.h"

namespace hg::training {

namespace {

class StridedSampler : public Sampler {
 public:
  StridedSampler(const std::vector<int64_t>& order, int world, int rank) {
    for (size_t i = static_cast<size_t>(rank); i < order.size(); i += static_cast<size_t>(world)) idx_.push_back(order[i]);
  }
  std::vector<int64_t> indices(int64_t) const override { return idx_; }
  int64_t size() const override { return static_cast<int64_t>(idx_.size()); }

 private:
  std::vector<int64_t> idx_;
};

// One rank's rows: a JSON header {"dtype", "row_shape", "rows"}, a NUL, then the row bytes.
std::string pack(const std::vector<Tensor>& outputs, int rank) {
  nlohmann::json h = {{"rows", 0}};
  std::string bytes;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor t = outputs[i].to(Device::cpu()).contiguous();
    if (t.ndim() == 0) throw InvalidArgument("predict on rank " + std::to_string(rank) + ": output " + std::to_string(i) +
                                             " is a scalar; gathering needs one row per example");
    const Shape row(t.shape().begin() + 1, t.shape().end());
    if (h.contains("dtype") && (h["dtype"] != dtype_name(t.dtype()) || h["row_shape"] != row))
      throw InvalidArgument("predict on rank " + std::to_string(rank) + ": output " + std::to_string(i) +
                            " differs in dtype or row shape from the first one");
    h["dtype"] = dtype_name(t.dtype());
    h["row_shape"] = row;
    h["rows"] = h["rows"].get<int64_t>() + t.dim(0);
    bytes.append(static_cast<const char*>(t.raw_data()), t.meta().bytes());
  }
  return h.dump() + '\0' + bytes;
}

}  // namespace

DataLoader strided_loader(const DataLoader& loader, int world, int rank) {
  return loader.with_sampler(std::make_shared<StridedSampler>(loader.sampler()->indices(0), world, rank));
}

std::vector<Tensor> gather_predictions(const std::vector<Tensor>& outputs, ProcessGroup& pg, int64_t batch_size) {
  const std::vector<std::string> parts = pg.all_gather(pack(outputs, pg.rank()));
  if (pg.rank() != 0) return {};
  const int world = static_cast<int>(parts.size());
  std::vector<nlohmann::json> heads;
  std::vector<const char*> data;
  nlohmann::json first;
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    const size_t nul = parts[r].find('\0');
    if (nul == std::string::npos) throw FormatError("predict: rank " + std::to_string(r) + "'s outputs have no header");
    heads.push_back(read_json(std::string_view(parts[r]).substr(0, nul), {.max_depth = 8},
                              "rank " + std::to_string(r) + "'s predict outputs header"));
    data.push_back(parts[r].data() + nul + 1);
    if (!heads[r].contains("dtype")) continue;
    if (first.is_null()) first = heads[r];
    if (heads[r]["dtype"] != first["dtype"] || heads[r]["row_shape"] != first["row_shape"])
      throw InvalidArgument("predict: rank " + std::to_string(r) + "'s outputs differ in dtype or row shape from rank 0's");
    total += heads[r]["rows"].get<int64_t>();
  }
  if (first.is_null()) return {};
  const DType dtype = dtype_from_name(first["dtype"].get<std::string>());
  const Shape row = first["row_shape"].get<Shape>();
  const size_t row_bytes = static_cast<size_t>(numel(row)) * dtype_size(dtype);
  // Position p of the loader's order was predicted by rank p % world as its (p / world)-th row.
  std::vector<int64_t> taken(static_cast<size_t>(world), 0);
  std::vector<Tensor> out;
  for (int64_t p = 0, done = 0; done < total; ++p) {
    const int r = static_cast<int>(p % world);
    if (taken[r] >= heads[r].value("rows", int64_t{0})) continue;
    if (done % batch_size == 0) {
      Shape s = row;
      s.insert(s.begin(), std::min(batch_size, total - done));
      out.push_back(Tensor::empty(s, dtype, Device::cpu()));
    }
    char* dst = static_cast<char*>(out.back().raw_data()) + static_cast<size_t>(done % batch_size) * row_bytes;
    std::memcpy(dst, data[r] + static_cast<size_t>(taken[r]) * row_bytes, row_bytes);
    ++taken[r];
    ++done;
  }
  return out;
}

}  // namespace hg::training
