// Predictor::check_precision and Predictor::calibrate_int8: fixed inputs (a samples file or
// generated ones) run through the captured graphs, compared with FP32 or measured for INT8 ranges.
#include <algorithm>
#include <functional>

#include "engine/hash.h"
#include "engine/int8_quant.h"
#include "models/predictor_impl.h"

namespace hg::models {

// The inputs of a precision check or a calibration, for the signature o.signature: o.inputs, or
// generated (models/precision.h); then runs them through the captured graphs in chunks of the
// largest bucket, `each(inputs of the chunk, n, first sample)`.
struct Predictor::Samples {
  std::shared_ptr<Variant> variant;
  int64_t samples = 0;
  std::vector<DType> types;
  std::vector<int64_t> elements;
  std::vector<std::vector<uint8_t>> generated;
  const std::vector<std::vector<uint8_t>>* given = nullptr;  // a samples file is not copied
  const std::vector<std::vector<uint8_t>>& inputs() const { return given ? *given : generated; }
};

Predictor::Samples Predictor::samples(const PrecisionCheckOptions& o) {
  const PackageSpec& spec = impl_->package.spec;
  Samples r;
  r.variant = impl_->variant(o.signature);
  Variant& v = *r.variant;
  std::vector<int64_t> rows;  // the embedding rows each input indexes, known once a bucket is captured
  {
    Bucket& first = *v.buckets.front();
    std::lock_guard lk(first.mu);
    if (!first.graph && !first.left_out) {
      impl_->capture(v, first);
      impl_->recost(v.in);
    }
    rows = first.index_rows;
  }
  r.samples = spec.batched ? o.samples : 1;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    r.types.push_back(input_dtype(i));
    r.elements.push_back(Impl::in_elements(v, i));
  }
  if (o.inputs.empty()) r.generated = precision_sample_inputs(r.types, r.elements, rows, r.samples, o.seed);
  if (!o.inputs.empty()) r.given = &o.inputs;
  bool sized = r.inputs().size() == r.types.size();  // given inputs: checked (run() checks token ids)
  for (size_t i = 0; sized && i < r.inputs().size(); ++i)
    sized = r.inputs()[i].size() == static_cast<size_t>(r.samples * r.elements[i]) * dtype_size(r.types[i]);
  if (!sized)
    throw InvalidArgument("the given inputs do not hold " + std::to_string(r.samples) + " samples of every model input");
  return r;
}

// In chunks of the largest captured bucket, so that every sample runs in a captured graph.
void Predictor::for_each_chunk(const Samples& s, const std::function<void(const std::vector<const void*>&, int64_t, int64_t)>& each) {
  const std::vector<int64_t> caught = impl_->package.spec.batched ? buckets() : std::vector<int64_t>{1};
  const int64_t chunk = caught.empty() ? 1 : caught.back();
  for (int64_t first = 0; first < s.samples; first += chunk) {
    const int64_t n = std::min(chunk, s.samples - first);
    std::vector<const void*> in;
    for (size_t i = 0; i < s.inputs().size(); ++i)
      in.push_back(s.inputs()[i].data() + first * s.elements[i] * dtype_size(s.types[i]));
    each(in, n, first);
  }
}

PrecisionReport Predictor::check_precision(const PrecisionCheckOptions& o) {
  PrecisionReport r;
  r.precision = impl_->opt.precision;
  if (r.precision == graphs::Precision::Fp32 || o.samples <= 0) return r;
  Samples in;
  try {
    in = samples(o);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("check_precision: ") + e.what());
  }
  Variant& v = *in.variant;
  const std::vector<Shape> out_shapes = impl_->learn_outputs(v);
  const int64_t samples = in.samples;
  std::vector<std::vector<uint8_t>> low(impl_->package.spec.outputs.size()), ref(low.size());
  for (size_t j = 0; j < low.size(); ++j) {
    low[j].resize(static_cast<size_t>(samples * numel(out_shapes[j])) * dtype_size(output_dtype(j)));
    ref[j].resize(low[j].size());
  }
  for_each_chunk(in, [&](const std::vector<const void*>& x, int64_t n, int64_t first) {
    std::vector<void*> a, b;
    for (size_t j = 0; j < low.size(); ++j) {
      const size_t at = static_cast<size_t>(first * numel(out_shapes[j])) * dtype_size(output_dtype(j));
      a.push_back(low[j].data() + at);
      b.push_back(ref[j].data() + at);
    }
    run(x, n, a, o.signature);
    impl_->run_unpadded(v, x, n, b, /*quiet=*/true);
  });
  r.samples = samples;
  for (size_t j = 0; j < low.size(); ++j)
    compare_precision_output(r, j, output_dtype(j), low[j].data(), ref[j].data(), samples * numel(out_shapes[j]),
                             out_shapes[j].empty() ? 1 : out_shapes[j].back());
  return r;
}

size_t Predictor::calibrate_int8(const PrecisionCheckOptions& o) {
  if (impl_->opt.precision != graphs::Precision::Int8 || o.samples <= 0) return 0;
  // The session's tag: the model folder's, so that models calibrating at once stay apart and a
  // restart compiles the same calibration graphs (the disk cache serves them).
  const int64_t tag = static_cast<int64_t>(hash64(impl_->dir.string()) & ((uint64_t{1} << 40) - 1)) | 1;
  release_all();
  impl_->calibration_tag = tag;
  kernels::Int8Calibration::start(tag);
  std::vector<std::pair<float, float>> ranges;
  try {
    Samples in = samples(o);
    const std::vector<Shape> out_shapes = impl_->learn_outputs(*in.variant);
    std::vector<std::vector<uint8_t>> sink(impl_->package.spec.outputs.size());
    for (size_t j = 0; j < sink.size(); ++j)
      sink[j].resize(static_cast<size_t>(in.samples * numel(out_shapes[j])) * dtype_size(output_dtype(j)));
    for_each_chunk(in, [&](const std::vector<const void*>& x, int64_t n, int64_t) {
      std::vector<void*> out;
      for (auto& b : sink) out.push_back(b.data());
      run(x, n, out, o.signature);
    });
  } catch (...) {
    kernels::Int8Calibration::stop(tag);
    impl_->calibration_tag = 0;
    release_all();
    throw;
  }
  ranges = kernels::Int8Calibration::stop(tag);
  impl_->calibration_tag = 0;
  release_all();  // the next captures use the ranges
  if (ranges.empty()) return 0;
  auto r = std::make_shared<graphs::Int8Ranges>();
  r->ranges = std::move(ranges);
  impl_->opt.int8_ranges = std::move(r);
  return impl_->opt.int8_ranges->ranges.size();
}

void Predictor::release_all() {
  std::vector<std::shared_ptr<Variant>> all;
  if (impl_->fixed) all.push_back(impl_->fixed);
  {
    std::lock_guard lk(impl_->variants_mu);
    for (const auto& key : impl_->variants.keys())
      if (auto* v = impl_->variants.get(key)) all.push_back(*v);
  }
  for (auto& v : all)
    for (auto& b : v->buckets) {
      std::lock_guard lk(b->mu);
      if (b->graph) impl_->release(*v, *b);
    }
}

}  // namespace hg::models
