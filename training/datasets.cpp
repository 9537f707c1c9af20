// Datasets: collation by stacking, TensorDataset, Subset, the digits and random_split.
#include <cstring>
#include <string>

#include "engine/error.h"
#include "models/safetensors.h"
#include "training/dataloader.h"

namespace hg::training {

namespace {

Shape without_dim0(const Shape& s) { return Shape(s.begin() + 1, s.end()); }

Tensor host_contiguous(const Tensor& t) {
  const Tensor h = t.device().kind == DeviceKind::CPU && !t.is_lazy() ? t : t.to(Device::cpu());
  return h.is_contiguous() ? h : h.contiguous();
}

void check_index(const char* what, int64_t index, int64_t size) {
  if (index < 0 || index >= size)
    throw InvalidArgument(std::string(what) + ": index " + std::to_string(index) + " out of range for size " +
                          std::to_string(size));
}

// Row `row` of a contiguous host tensor, copied into dst.
void copy_row(const Tensor& src, int64_t row, void* dst) {
  const size_t bytes = static_cast<size_t>(src.numel() / src.dim(0)) * dtype_size(src.dtype());
  std::memcpy(dst, static_cast<const char*>(src.raw_data()) + static_cast<size_t>(row) * bytes, bytes);
}

}  // namespace

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) throw InvalidArgument("Dataset::get_batch: no indices");
  Batch out;
  for (size_t k = 0; k < indices.size(); ++k) {
    auto example = get(indices[k]);
    if (k == 0) {
      for (const auto& t : example) {
        Shape s{static_cast<int64_t>(indices.size())};
        s.insert(s.end(), t.shape().begin(), t.shape().end());
        out.push_back(Tensor::empty(s, t.dtype()));
      }
    } else if (example.size() != out.size()) {
      throw InvalidArgument("Dataset::get_batch: example " + std::to_string(indices[k]) + " has " +
                            std::to_string(example.size()) + " tensors, example " + std::to_string(indices[0]) +
                            " has " + std::to_string(out.size()));
    }
    for (size_t j = 0; j < example.size(); ++j) {
      const Tensor t = host_contiguous(example[j]);
      if (t.shape() != without_dim0(out[j].shape()) || t.dtype() != out[j].dtype())
        throw InvalidArgument("Dataset::get_batch: tensor " + std::to_string(j) + " of example " +
                              std::to_string(indices[k]) + " is " + dtype_name(t.dtype()) + " " +
                              shape_str(t.shape()) + ", example " + std::to_string(indices[0]) + "'s is " +
                              dtype_name(out[j].dtype()) + " " + shape_str(without_dim0(out[j].shape())));
      std::memcpy(static_cast<char*>(out[j].raw_data()) + k * t.meta().bytes(), t.raw_data(), t.meta().bytes());
    }
  }
  return out;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) {
  if (tensors.empty()) throw InvalidArgument("TensorDataset: no tensors");
  for (size_t j = 0; j < tensors.size(); ++j) {
    const Tensor& t = tensors[j];
    if (!t.defined() || t.ndim() == 0)
      throw InvalidArgument("TensorDataset: tensor " + std::to_string(j) + " has no dim 0");
    if (t.dim(0) != tensors[0].dim(0))
      throw InvalidArgument("TensorDataset: tensor " + std::to_string(j) + " has " + std::to_string(t.dim(0)) +
                            " rows, tensor 0 has " + std::to_string(tensors[0].dim(0)));
    tensors_.push_back(host_contiguous(t.detach()));
  }
}

int64_t TensorDataset::size() const { return tensors_[0].dim(0); }

std::vector<Tensor> TensorDataset::get(int64_t index) const {
  check_index("TensorDataset::get", index, size());
  std::vector<Tensor> out;
  for (const auto& t : tensors_) {
    out.push_back(Tensor::empty(without_dim0(t.shape()), t.dtype()));
    copy_row(t, index, out.back().raw_data());
  }
  return out;
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) throw InvalidArgument("TensorDataset::get_batch: no indices");
  for (int64_t i : indices) check_index("TensorDataset::get_batch", i, size());
  Batch out;
  for (const auto& t : tensors_) {
    Shape s = t.shape();
    s[0] = static_cast<int64_t>(indices.size());
    Tensor b = Tensor::empty(s, t.dtype());
    const size_t row_bytes = static_cast<size_t>(t.numel() / t.dim(0)) * dtype_size(t.dtype());
    auto* dst = static_cast<char*>(b.raw_data());
    for (size_t k = 0; k < indices.size(); ++k) copy_row(t, indices[k], dst + k * row_bytes);
    out.push_back(std::move(b));
  }
  return out;
}

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  if (!base_) throw InvalidArgument("Subset: no base dataset");
  for (int64_t i : indices_) check_index("Subset", i, base_->size());
}

std::vector<Tensor> Subset::get(int64_t index) const {
  check_index("Subset::get", index, size());
  return base_->get(indices_[static_cast<size_t>(index)]);
}

Batch Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    check_index("Subset::get_batch", i, size());
    mapped.push_back(indices_[static_cast<size_t>(i)]);
  }
  return base_->get_batch(mapped);
}

std::shared_ptr<TensorDataset> load_digits(const std::filesystem::path& file, int64_t image_size) {
  const std::string src = file.string();
  if (image_size != 8 && image_size != 32)
    throw InvalidArgument("load_digits: image_size must be 8 or 32, got " + std::to_string(image_size));
  const auto f = safetensors::read(file);
  const auto* images = f.find("images");
  const auto* labels = f.find("labels");
  if (!images) throw FormatError(src + ": no tensor 'images'");
  if (!labels) throw FormatError(src + ": no tensor 'labels'");
  if (images->dtype != "U8") throw FormatError(src + ": tensor 'images' is " + images->dtype + ", expected U8");
  if (labels->dtype != "U8") throw FormatError(src + ": tensor 'labels' is " + labels->dtype + ", expected U8");
  if (images->shape.size() != 2 || images->shape[1] != 64)
    throw FormatError(src + ": tensor 'images' has shape " + shape_str(images->shape) + ", expected [N, 64]");
  if (labels->shape.size() != 1 || labels->shape[0] != images->shape[0])
    throw FormatError(src + ": tensor 'labels' has shape " + shape_str(labels->shape) + ", expected [" +
                      std::to_string(images->shape[0]) + "] (one label per image)");
  const int64_t n = images->shape[0];
  if (n == 0) throw FormatError(src + ": no images");
  const int64_t scale = image_size / 8;
  Shape xs = image_size == 8 ? Shape{n, 64} : Shape{n, 1, image_size, image_size};
  Tensor x = Tensor::empty(xs, DType::F32);
  float* xd = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < 64; ++p) {
      const uint8_t v = images->data[static_cast<size_t>(i * 64 + p)];
      if (v > 16)
        throw FormatError(src + ": tensor 'images' element [" + std::to_string(i) + ", " + std::to_string(p) +
                          "] is " + std::to_string(v) + ", expected 0..16");
      const float value = static_cast<float>(v) / 16.0f;
      const int64_t r = p / 8, c = p % 8;
      for (int64_t dr = 0; dr < scale; ++dr)
        for (int64_t dc = 0; dc < scale; ++dc)
          xd[i * image_size * image_size + (r * scale + dr) * image_size + c * scale + dc] = value;
    }
  }
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t v = labels->data[static_cast<size_t>(i)];
    if (v > 9)
      throw FormatError(src + ": tensor 'labels' element [" + std::to_string(i) + "] is " + std::to_string(v) +
                        ", expected a digit 0..9");
    y[static_cast<size_t>(i)] = v;
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{x, Tensor::from_indices(y, {n})});
}

std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> d,
                                                                       double holdout_fraction, uint64_t seed) {
  if (!d) throw InvalidArgument("random_split: no dataset");
  if (!(holdout_fraction >= 0 && holdout_fraction < 1))
    throw InvalidArgument("random_split: holdout_fraction must be in [0, 1), got " + std::to_string(holdout_fraction));
  const auto idx = RandomSampler(d->size(), seed).indices(0);
  const auto n_hold = static_cast<size_t>(static_cast<double>(d->size()) * holdout_fraction);
  std::vector<int64_t> hold(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n_hold));
  std::vector<int64_t> train(idx.begin() + static_cast<std::ptrdiff_t>(n_hold), idx.end());
  return {std::make_shared<Subset>(d, std::move(train)), std::make_shared<Subset>(d, std::move(hold))};
}

}  // namespace hg::training
