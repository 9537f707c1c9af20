// Collectives between training processes over Gloo (libgloo-dev), with rendezvous through the
// TCP key-value store that rank 0 hosts at master_addr:master_port (training/tcp_store.h).
// Every call is blocking and must be made in the same order on every rank. A peer that dies
// or stops answering makes the call throw hg::DistError naming the operation, this rank and
// the peer (or the timeout) — never a hang beyond `timeout`.
//
//   hg::training::ProcessGroup pg({.master_addr = "127.0.0.1", .master_port = 29500,
//                                  .rank = rank, .world_size = 2, .timeout = std::chrono::seconds(60)});
//   std::vector<float> g(n);  pg.allreduce(g.data(), g.size());          // sum, in place
//   pg.broadcast(w.data(), w.size(), /*root=*/0);
//   double m = pg.allreduce_scalar(loss, hg::training::ReduceOp::Mean);  // metrics (sync_dist)
//   pg.barrier("checkpoint");
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hg::training {

// A collective or rendezvous failed: peer gone, timeout, port in use, bad address.
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { Sum, Mean, Max, Min };

struct ProcessGroupOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // rendezvous and every collective
  // Keys of this run live under this prefix in the store, so a restarted run on the same
  // store never reads a previous run's keys. Empty: one is agreed through the store.
  std::string run_id;
  // The address this rank's Gloo device binds: empty = the local address that routes to
  // master_addr (127.0.0.1 when master_addr is loopback).
  std::string local_addr;
  // When every rank is on this host (training/shm_allreduce.h), the float all-reduces with tags
  // >= ProcessGroup::kShmTags go through a shared-memory segment instead of Gloo's sockets.
  // false (or HG_DDP_SHM=0 in the environment) on any rank turns it off for the whole group.
  bool shared_memory = true;
};

class TcpStore;

class ProcessGroup {
 public:
  // Rank 0 starts the store first (a port in use is a DistError saying so), then every rank
  // connects to it (retrying until timeout) and the full mesh is built.
  explicit ProcessGroup(const ProcessGroupOptions& opt);
  // Over a store that outlives the group (several groups in turn on one store; master_addr and
  // master_port are then unused). Each group's keys live under its own run id.
  ProcessGroup(const ProcessGroupOptions& opt, std::shared_ptr<TcpStore> store);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  // The key prefix of this run in the store: opt.run_id, or "gen<N>" agreed through the store.
  const std::string& run_id() const;
  // The tags of the DDP reducer's buckets. With shares_memory(), these all-reduces go through
  // shared memory and must come from one thread at a time (in the same order on every rank).
  static constexpr uint32_t kShmTags = 1000;
  // Every rank is on this host and the float all-reduces of tags >= kShmTags use shared memory.
  bool shares_memory() const;
  // In place over n floats. Thread-safe against the other calls only by `tag`: the DDP
  // reducer's communication thread uses tags >= 1000, everything else tag 0 from the main thread.
  void allreduce(float* data, size_t n, ReduceOp op = ReduceOp::Sum, uint32_t tag = 0);
  double allreduce_scalar(double value, ReduceOp op);
  void broadcast(float* data, size_t n, int root = 0, uint32_t tag = 0);
  void broadcast(std::string& bytes, int root = 0);  // any length; non-roots are resized
  std::vector<std::string> all_gather(const std::string& bytes);
  void barrier(const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hg::training
