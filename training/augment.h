// Seeded image augmentation for the DataLoader (torchvision's RandomCrop(size, padding) and
// RandomHorizontalFlip): a batch transform that moves each image by up to `crop_padding` pixels
// (the uncovered border is zero, as a crop of the zero-padded image) and mirrors it with
// probability 1/2.
//
//   hg::training::DataLoader train(data, {.batch_size = 128, .shuffle = true, .seed = 0,
//       .num_workers = 2, .transform = hg::training::ImageAugment{.crop_padding = 4, .hflip = true, .seed = 0}});
//
// Example `i` of epoch `e` draws its crop and flip from (seed, e, i) alone: the same images on
// every run, whatever the workers, the batch composition or the number of ranks.
#pragma once
#include <cstdint>
#include <vector>

#include "training/dataloader.h"

namespace hg::training {

struct ImageAugment {
  int64_t crop_padding = 0;  // 0: no crop
  bool hflip = false;
  uint64_t seed = 0;
  // batch[0]: F32 [N, C, H, W] or [N, H, W], host, contiguous; changed in place.
  void operator()(Batch& batch, const std::vector<int64_t>& indices, int64_t epoch) const;
};

}  // namespace hg::training
