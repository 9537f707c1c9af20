// Where this process sits in a training job, resolved from the environment as Lightning's
// LightningEnvironment does, and the launcher that starts the other local ranks.
//
//   auto env = hg::training::ClusterEnv::from_environment();   // MASTER_ADDR, MASTER_PORT, NODE_RANK, LOCAL_RANK
//   int rank = env.global_rank(/*devices=*/2);                 // node_rank * devices + local_rank
//   if (!env.creates_processes_externally)                     // LOCAL_RANK was not set
//     launcher = hg::training::launch_local_ranks(env, /*devices=*/2, /*num_nodes=*/1);  // re-executes argv for ranks 1..1
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace hg::training {

struct ClusterEnv {
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 0;                    // MASTER_PORT; 0 = not set (launch picks a free port)
  int node_rank = 0;                      // NODE_RANK, else GROUP_RANK, else 0
  int local_rank = 0;                     // LOCAL_RANK, else 0
  bool creates_processes_externally = false;  // LOCAL_RANK was set
  // Reads the variables; a malformed value (port out of range, negative rank, text) throws
  // hg::InvalidArgument naming the variable and its value.
  static ClusterEnv from_environment();
  int global_rank(int devices) const { return node_rank * devices + local_rank; }
};

// The processes a launch started; on destruction waits for them (bounded) and kills the rest.
// The methods may be called from several threads (e.g. a watchdog polling failure()).
class LocalLauncher {
 public:
  virtual ~LocalLauncher() = default;
  // Non-blocking: the first child that exited non-zero or by a signal, as "local rank 1 (pid
  // 1234) was killed by signal 9"; empty while all run or exited 0.
  virtual std::string failure() = 0;
  // Waits for every child up to the timeout; kills those still running after it. Returns the
  // failures (empty when all exited 0).
  virtual std::vector<std::string> wait_all(int timeout_ms) = 0;
  virtual void kill_all() = 0;
};

// Rank 0 of a node: picks a free MASTER_PORT when unset (node 0 only), exports MASTER_ADDR,
// MASTER_PORT, NODE_RANK, WORLD_SIZE = devices * num_nodes, sets LOCAL_RANK=0 for itself, and
// re-executes /proc/self/exe with the same argv for local ranks 1..devices-1 with LOCAL_RANK=i.
// Refuses (hg::InvalidArgument) when called with LOCAL_RANK already set.
std::unique_ptr<LocalLauncher> launch_local_ranks(ClusterEnv& env, int devices, int num_nodes);

}  // namespace hg::training
