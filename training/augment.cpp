// Seeded random crops and flips (training/augment.h).
#include "training/augment.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "engine/generator.h"

namespace hg::training {

void ImageAugment::operator()(Batch& batch, const std::vector<int64_t>& indices, int64_t epoch) const {
  if (crop_padding < 0) throw InvalidArgument("ImageAugment: crop_padding must be >= 0, got " + std::to_string(crop_padding));
  if (crop_padding == 0 && !hflip) return;
  Tensor& x = batch.at(0);
  if (x.dtype() != DType::F32 || (x.ndim() != 3 && x.ndim() != 4) || !x.is_contiguous() ||
      x.dim(0) != static_cast<int64_t>(indices.size()))
    throw InvalidArgument("ImageAugment: expected contiguous F32 images [N, C, H, W] or [N, H, W] for " +
                          std::to_string(indices.size()) + " examples, got " + dtype_name(x.dtype()) + " " +
                          shape_str(x.shape()));
  const int64_t h = x.dim(x.ndim() - 2), w = x.dim(x.ndim() - 1), planes = x.numel() / x.dim(0) / (h * w);
  std::vector<float> plane(static_cast<size_t>(h * w));
  float* d = x.data<float>();
  for (size_t n = 0; n < indices.size(); ++n) {
    // One stream per (seed, epoch, example): value 0 the shift, value 1 the flip.
    const uint64_t key = mix64(mix64(seed ^ kGoldenGamma) + static_cast<uint64_t>(epoch) * kGoldenGamma) +
                         static_cast<uint64_t>(indices[n]);
    const uint64_t r0 = mix64(key + kGoldenGamma), r1 = mix64(key + 2 * kGoldenGamma);
    const int64_t span = 2 * crop_padding + 1;
    const int64_t dy = static_cast<int64_t>(r0 % static_cast<uint64_t>(span)) - crop_padding;
    const int64_t dx = static_cast<int64_t>((r0 >> 32) % static_cast<uint64_t>(span)) - crop_padding;
    const bool flip = hflip && (r1 & 1);
    for (int64_t p = 0; p < planes; ++p) {
      float* img = d + (static_cast<int64_t>(n) * planes + p) * h * w;
      std::copy(img, img + h * w, plane.begin());
      for (int64_t r = 0; r < h; ++r)
        for (int64_t c = 0; c < w; ++c) {
          // Output (r, c) shows input (r + dy, c' + dx), c' the column before the flip.
          const int64_t sr = r + dy, sc = (flip ? w - 1 - c : c) + dx;
          img[r * w + c] = sr >= 0 && sr < h && sc >= 0 && sc < w ? plane[static_cast<size_t>(sr * w + sc)] : 0.0f;
        }
    }
  }
}

}  // namespace hg::training
