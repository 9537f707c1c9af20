// The all-reduce of ranks that share one host's memory (training/process_group.h uses it for the
// DDP reducer's gradient buckets when every rank of the group is on this host): each rank copies
// its floats into its own slot of a POSIX shared-memory segment, says so in its arrival counter,
// waits until every rank has arrived (spinning briefly, then sleeping on a futex in the segment),
// and sums every rank's slot in rank order into its output. No socket, no thread hand-off; the
// slots are double-buffered, so one arrival per chunk is the only synchronisation. Rank order
// makes every rank's result bitwise equal (and equal to Gloo's for two ranks: a + b == b + a).
//
// The segment has a random name that exists only while the group is set up: rank 0 creates it
// (O_EXCL, mode 0600), every rank maps and checks it, and rank 0 unlinks it as soon as every rank
// has answered (or on any failure), so a crash later leaves nothing behind. Segments left by a
// rank 0 killed during that window are removed by the next group that starts on this host
// (their creator's pid is in the name). A rank that cannot map or check the segment makes every
// rank fall back to Gloo.
//
// Waits are bounded: a peer that exits (its pid is gone or a zombie), leaves the group or
// aborts makes the collective throw DistError naming it; one that is stuck makes it throw after
// the group's timeout. After an error the channel is broken: every later call throws.
//
//   auto shm = ShmAllReduce::join(store, "hg/pg/gen0/", rank, world, timeout, who);  // null: use Gloo
//   if (shm) shm->allreduce(grads.data(), grads.size(), ReduceOp::Sum);
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/process_group.h"

namespace hg::training {

class TcpStore;

class ShmAllReduce {
 public:
  // Collective over `store` (keys under `ns`): every rank of the group calls it. Null on every
  // rank when the ranks are not all on this host (hostname, boot id and the mount, pid and
  // network namespaces differ), when HG_DDP_SHM=0 on any rank, or when some rank could not map
  // the segment (the reason is logged). Throws DistError when a rank does not answer in time.
  // `who` names the ranks in errors ("pid N on host", per rank). A rank with `enabled` false
  // takes part and turns it off for every rank.
  static std::unique_ptr<ShmAllReduce> join(TcpStore& store, const std::string& ns, int rank, int world,
                                            std::chrono::milliseconds timeout, std::vector<std::string> who,
                                            bool enabled = true);
  ~ShmAllReduce();  // tells the peers this rank left the group
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // In place over n floats; every rank must call it with the same n and op, in the same order,
  // from one thread at a time. Throws DistError (the cause only: the caller names the call).
  void allreduce(float* data, size_t n, ReduceOp op);

  // Floats per slot: larger calls go in chunks of this many.
  static constexpr size_t kChunkFloats = size_t{1} << 18;

 private:
  struct Segment;
  ShmAllReduce() = default;
  void arrive_and_wait(uint64_t seq);
  [[noreturn]] void fail(const std::string& why);
  Segment* seg_ = nullptr;
  size_t bytes_ = 0;
  int rank_ = 0, world_ = 1;
  uint64_t seq_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::vector<std::string> who_;
  std::string broken_;  // the first error: later calls throw it
};

}  // namespace hg::training
