// Predict under data parallelism (internal to the Trainer): each rank predicts every
// world_size-th example of the loader's order, without padding (Lightning's
// UnrepeatedDistributedSampler), and rank 0 gets every rank's rows back in the loader's order,
// cut into the loader's batch size, so the result equals a single process's.
//
//   DataLoader mine = strided_loader(loader, world, rank);
//   std::vector<Tensor> outs = ...;                            // predict_step on each batch
//   std::vector<Tensor> all = gather_predictions(outs, *pg, loader.options().batch_size);  // rank 0
#pragma once
#include <vector>

#include "training/dataloader.h"
#include "training/process_group.h"

namespace hg::training {

// The loader over positions rank, rank + world, ... of its epoch-0 order.
DataLoader strided_loader(const DataLoader& loader, int world, int rank);

// A collective. Every output must have one row per example (dim 0) and the same dtype and row
// shape on every rank (hg::InvalidArgument naming the rank otherwise). Rank 0 returns host
// tensors of batch_size rows (the last one shorter); the other ranks return nothing.
std::vector<Tensor> gather_predictions(const std::vector<Tensor>& outputs, ProcessGroup& pg, int64_t batch_size);

}  // namespace hg::training
