// IDX arrays and the MNIST-layout data sets (training/data_files.h).
#include <cstring>
#include <string>

#include "engine/atomic_file.h"
#include "engine/error.h"
#include "models/deflate.h"
#include "training/data_files.h"

namespace hg::training {

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The element type of an IDX type code: {dtype, bytes per stored element}.
std::pair<DType, size_t> idx_type(uint8_t code, const std::string& src) {
  switch (code) {
    case 0x08: return {DType::U8, 1};
    case 0x09: return {DType::I32, 1};
    case 0x0B: return {DType::I32, 2};
    case 0x0C: return {DType::I32, 4};
    case 0x0D: return {DType::F32, 4};
    case 0x0E: return {DType::F64, 8};
    default: break;
  }
  throw FormatError(src + ": byte offset 2: unknown IDX element type 0x" +
                    std::string(1, "0123456789abcdef"[code >> 4]) + "0123456789abcdef"[code & 15] +
                    " (0x08 ubyte, 0x09 sbyte, 0x0B short, 0x0C int, 0x0D float, 0x0E double)");
}

std::string file_label(const std::filesystem::path& p) { return p.string(); }

}  // namespace

Tensor read_idx(const std::filesystem::path& file, size_t max_bytes) {
  const std::string src = file_label(file);
  const auto mapped = map_file(file);
  std::string_view raw(reinterpret_cast<const char*>(mapped->bytes().data()), mapped->bytes().size());
  std::string inflated;
  if (has_gzip_magic(raw)) {
    inflated = inflate(raw, Deflated::Gzip, max_bytes, src + " (gzip)");
    raw = inflated;
  } else if (raw.size() > max_bytes) {
    throw TooLargeError(src + ": " + std::to_string(raw.size()) + " bytes exceed the limit of " +
                        std::to_string(max_bytes));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  if (raw.size() < 4) throw FormatError(src + ": " + std::to_string(raw.size()) + " bytes, too short for an IDX header");
  if (p[0] != 0 || p[1] != 0)
    throw FormatError(src + ": byte offset 0: not an IDX file (the magic number starts with 0 0, found " +
                      std::to_string(p[0]) + " " + std::to_string(p[1]) + ")");
  const auto [dtype, elem] = idx_type(p[2], src);
  const int rank = p[3];
  if (rank < 1 || rank > 4) throw FormatError(src + ": byte offset 3: rank " + std::to_string(rank) + ", expected 1..4");
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (raw.size() < header)
    throw FormatError(src + ": " + std::to_string(raw.size()) + " bytes, too short for the " + std::to_string(rank) +
                      " dimensions of its header (" + std::to_string(header) + " bytes)");
  Shape shape;
  size_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const uint32_t n = be32(p + 4 + 4 * d);
    shape.push_back(n);
    // Every factor is < 2^32 and the running count is bounded by the file size: no overflow.
    count *= n;
    if (count > raw.size())
      throw FormatError(src + ": byte offset " + std::to_string(4 + 4 * d) + ": dimension " + std::to_string(d) + " (" +
                        std::to_string(n) + ") makes more elements than the file has bytes");
  }
  if (raw.size() - header != count * elem)
    throw FormatError(src + ": the header declares " + shape_str(shape) + " = " + std::to_string(count) +
                      " elements of " + std::to_string(elem) + " bytes (" + std::to_string(header + count * elem) +
                      " bytes with the header), the file has " + std::to_string(raw.size()) + " bytes");
  Tensor t = Tensor::empty(shape, dtype);
  const uint8_t* d = p + header;
  switch (p[2]) {
    case 0x08: std::memcpy(t.raw_data(), d, count); break;
    case 0x09: {
      auto* o = t.data<int32_t>();
      for (size_t i = 0; i < count; ++i) o[i] = static_cast<int8_t>(d[i]);
      break;
    }
    case 0x0B: {
      auto* o = t.data<int32_t>();
      for (size_t i = 0; i < count; ++i) o[i] = static_cast<int16_t>((d[2 * i] << 8) | d[2 * i + 1]);
      break;
    }
    case 0x0C:
    case 0x0D: {
      auto* o = static_cast<uint32_t*>(t.raw_data());
      for (size_t i = 0; i < count; ++i) o[i] = be32(d + 4 * i);
      break;
    }
    default: {  // 0x0E
      auto* o = static_cast<uint64_t*>(t.raw_data());
      for (size_t i = 0; i < count; ++i) o[i] = (uint64_t{be32(d + 8 * i)} << 32) | be32(d + 8 * i + 4);
      break;
    }
  }
  return t;
}

std::shared_ptr<TensorDataset> load_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                                        const IdxOptions& opt) {
  const Tensor im = read_idx(images), lb = read_idx(labels);
  if (im.dtype() != DType::U8 || im.ndim() != 3)
    throw FormatError(file_label(images) + ": expected ubyte images [N, H, W], found " + dtype_name(im.dtype()) + " " +
                      shape_str(im.shape()));
  if (lb.dtype() != DType::U8 || lb.ndim() != 1)
    throw FormatError(file_label(labels) + ": expected ubyte labels [N], found " + dtype_name(lb.dtype()) + " " +
                      shape_str(lb.shape()));
  const int64_t n = im.dim(0), h = im.dim(1), w = im.dim(2);
  if (lb.dim(0) != n)
    throw FormatError(file_label(labels) + ": " + std::to_string(lb.dim(0)) + " labels for the " + std::to_string(n) +
                      " images of " + file_label(images));
  if (n == 0 || h == 0 || w == 0) throw FormatError(file_label(images) + ": no images (" + shape_str(im.shape()) + ")");
  if (h != w && opt.image_size != 0)
    throw InvalidArgument("load_idx: image_size pads square images; " + file_label(images) + " holds " +
                          std::to_string(h) + "x" + std::to_string(w));
  const int64_t s = opt.image_size == 0 ? h : opt.image_size;
  if (opt.image_size != 0 && opt.image_size < h)
    throw InvalidArgument("load_idx: image_size " + std::to_string(opt.image_size) + " is smaller than the " +
                          std::to_string(h) + "x" + std::to_string(w) + " images of " + file_label(images));
  const int64_t oh = opt.image_size == 0 ? h : s, ow = opt.image_size == 0 ? w : s;
  const int64_t top = (oh - h) / 2, left = (ow - w) / 2;
  Tensor x = Tensor::zeros(opt.flatten ? Shape{n, oh * ow} : Shape{n, 1, oh, ow}, DType::F32);
  float* xd = x.data<float>();
  const uint8_t* id = im.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t c = 0; c < w; ++c)
        xd[(i * oh + r + top) * ow + c + left] = static_cast<float>(id[(i * h + r) * w + c]) * (1.0f / 255.0f);
  std::vector<int64_t> y(lb.data<uint8_t>(), lb.data<uint8_t>() + n);
  return std::make_shared<TensorDataset>(std::vector<Tensor>{x, Tensor::from_indices(y, {n})});
}

IdxSplits load_idx_dir(const std::filesystem::path& dir, const IdxOptions& opt) {
  const auto find = [&dir](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      const auto p = dir / (stem + ext);
      if (std::filesystem::is_regular_file(p)) return p;
    }
    throw NotFoundError(dir.string() + ": no " + stem + " or " + stem + ".gz (the MNIST layout: {train,t10k}-" +
                        "{images-idx3,labels-idx1}-ubyte[.gz])");
  };
  IdxSplits s;
  const auto train_images = find("train-images-idx3-ubyte"), train_labels = find("train-labels-idx1-ubyte");
  const auto test_images = find("t10k-images-idx3-ubyte"), test_labels = find("t10k-labels-idx1-ubyte");
  s.train = load_idx(train_images, train_labels, opt);
  s.test = load_idx(test_images, test_labels, opt);
  const Shape& a = s.train->tensors()[0].shape();
  const Shape& b = s.test->tensors()[0].shape();
  if (Shape(a.begin() + 1, a.end()) != Shape(b.begin() + 1, b.end()))
    throw FormatError(dir.string() + ": the train images are " + shape_str(a) + ", the t10k images " + shape_str(b));
  return s;
}

}  // namespace hg::training
