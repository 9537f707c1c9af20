// DDP over real processes: 2 ranks on 127.0.0.1 train to the weights of 1 process with the
// same global batch (a hand-written loop over DDPStrategy, and the Trainer with devices=2), two
// "nodes" in two network namespaces joined by a veth pair, and a killed rank making the other
// exit with a clear message.
//
// These tests re-execute this binary. The launcher's child (LOCAL_RANK=1) runs the same test and
// takes rank 1's part, told apart by HG_DDP_TEST (the test's name, set by the parent) so that
// other tests a broad filter selects skip in it; processes the tests start themselves
// (namespaces, kill) get HG_DDP_TEST and HG_DDP_ROLE.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/error.h"
#include "tests/ddp_test_util.h"
#include "tests/test_env.h"
#include "tests/wait.h"
#include "training/ddp_strategy.h"
#include "training/sgd.h"
#include "training/trainer.h"

namespace hg::training {
namespace {

using ::testing::HasSubstr;
using namespace ddp_test;
using namespace std::chrono_literals;

constexpr const char* kRoleVar = "HG_DDP_ROLE";  // its part, for processes the tests start

std::string role() {
  const char* r = std::getenv(kRoleVar);
  return r ? r : "";
}

// Rank 0 is this process; the launcher re-executes the binary for rank 1, which runs this
// test's body with LOCAL_RANK=1. Rank 1's failures make its gtest run exit 1, which rank 0's
// shutdown_process_group turns into a failed run ("hgraph DDP rank 0: local rank 1 ... exited
// with code 1"). Each test ends the group: the next test launches its own rank 1.
TEST(DDPMultiProcess, TwoRanksMatchOneProcessWithTheGlobalBatch) {
  if (launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const bool launched = std::getenv("LOCAL_RANK") != nullptr;
  const auto env = rank_zero_env();
  LazyMode lazy;
  DDPStrategy s;
  s.setup_environment({.device = Device::hpu(0), .devices = 2, .timeout = 120s});
  ASSERT_EQ(s.world_size(), 2);
  EXPECT_EQ(s.global_rank(), launched ? 1 : 0);
  EXPECT_EQ(s.reduce(s.global_rank() + 1.0, ReduceOp::Sum), 3.0);
  train_and_compare(s, {{"sgd", 1}, {"sgd", 2}, {"adamw", 1}, {"adamw", 2}});
  graphs::enable_lazy_mode(false);  // eager hpu: gradients computed on the device queue
  train_and_compare(s, {{"sgd", 2}});
  s.teardown();
  DDPStrategy::shutdown_process_group();  // rank 0: waits for rank 1 to finish the test
}

// broadcast_buffers: before each forward (before_forward, at the start of the step, while the
// buffers are concrete) rank 0's buffers replace every rank's; each rank's forward then updates
// its BatchNorm statistics from its own shard, and backward leaves them alone (no host read in
// the middle of the lazy step).
TEST(DDPMultiProcess, BuffersFollowRankZero) {
  if (launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const auto env = rank_zero_env();
  LazyMode lazy;
  DDPStrategy s;
  s.setup_environment({.device = Device::hpu(0), .devices = 2, .timeout = 120s});
  const Device d = Device::hpu(0);
  models::Sequential net;
  net.add(std::make_shared<models::BatchNorm2d>(2));
  net.add(std::make_shared<models::Flatten>());
  net.add(std::make_shared<models::Linear>(8, 4, 3));
  net.to(d);
  SGD opt(net.named_parameters(), SGDOptions{.lr = 0.1});
  s.setup_module(net);
  const auto buffers = net.named_buffers();
  ASSERT_EQ(buffers[0].first, "0.running_mean");
  ASSERT_EQ(buffers[2].first, "0.num_batches_tracked");
  // A checksum of this rank's statistics: equal on every rank only when broadcast.
  auto checksum = [&] {
    const std::vector<float> v = buffers[0].second->to_vector();
    return 1000.0 * v[0] + v[1];
  };
  auto same_everywhere = [&](double v) { return s.reduce(v, ReduceOp::Max) == s.reduce(v, ReduceOp::Min); };
  for (int64_t step = 0; step < 3; ++step) {
    const double before = checksum();  // after the previous step: this rank's own statistics
    s.before_forward(net);
    const double synced = checksum();
    EXPECT_TRUE(same_everywhere(synced)) << "step " << step;
    if (s.global_rank() == 0) {
      EXPECT_EQ(synced, before);
    }
    if (step > 0) {
      EXPECT_FALSE(same_everywhere(before)) << "step " << step;
    }
    auto [x, y] = rows(step, s.global_rank() * 8, 8, d);
    Tensor loss = ops::cross_entropy(net.forward(x.reshape({8, 2, 2, 2})), y);
    s.backward(loss, true);
    s.finish_gradient_sync();
    opt.step();
    opt.zero_grad();
    graphs::mark_step(d);
    EXPECT_FALSE(same_everywhere(checksum())) << "step " << step << ": backward must not touch the buffers";
    // num_batches_tracked (I64) travels too: rank 0's count + this forward.
    EXPECT_EQ(buffers[2].second->to(DType::F32).to_vector()[0], static_cast<float>(step + 1));
  }
  s.teardown();
  DDPStrategy::shutdown_process_group();
}

// Through the Trainer: devices=2, strategy "hpu_ddp", 2 examples per rank and 2 accumulated
// micro-batches, clipping by norm, against one process with batches of 8. With the loaders
// unshuffled, rank r's DistributedSampler takes examples r, r+2, ...: the 8 examples of the two
// ranks' 2 x 2 micro-batches are the one process's batch.
class Blobs : public LightningModule {
 public:
  models::Module& module() override { return *net; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = ops::cross_entropy(net->forward(b[0]), b[1]);
    log("train_loss", loss, {.sync_dist = true});
    return loss;
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {{.optimizer = std::make_shared<SGD>(net->named_parameters(), SGDOptions{.lr = 0.2, .momentum = 0.9})}};
  }
  std::unique_ptr<models::Sequential> net = models::zoo::mlp({8, 16, 3}, 2);
};

// replayed: fit with replay_steps and return its statistics there.
std::vector<float> fit_blobs(int devices, int64_t batch_size, int accumulate, const std::filesystem::path& dir,
                             graphs::StepReplayStats* replayed = nullptr) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < 32; ++i) {
    y.push_back(i % 3);
    for (int64_t j = 0; j < 8; ++j) x.push_back((j % 3 == i % 3 ? 1.0f : 0.0f) + 0.3f * std::sin(1.7f * static_cast<float>(i * 8 + j)));
  }
  auto data = std::make_shared<TensorDataset>(
      std::vector<Tensor>{Tensor::from_vector(x, {32, 8}), Tensor::from_indices(y, {32})});
  TrainerOptions o;
  o.accelerator = "hpu";
  o.devices = devices;
  o.strategy = devices > 1 ? "hpu_ddp" : "auto";
  o.max_epochs = 2;
  o.accumulate_grad_batches = accumulate;
  o.gradient_clip_val = 1.0;
  o.logger = std::vector<std::shared_ptr<Logger>>{};
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.default_root_dir = dir;
  o.dist_timeout = 120s;
  o.replay_steps = replayed != nullptr;
  std::ostringstream sink;
  o.out = &sink;
  Blobs m;
  {
    Trainer t(o);
    t.fit(m, DataLoader(data, {.batch_size = batch_size}));
    EXPECT_EQ(t.global_step(), 2 * (32 / devices / batch_size / accumulate));
    if (replayed) *replayed = t.step_replay_stats();
  }
  std::vector<float> out;
  for (auto& [name, p] : m.net->named_parameters())
    for (float v : p->to_vector()) out.push_back(v);
  return out;
}

TEST(DDPMultiProcess, TrainerWithTwoDevicesMatchesOneProcess) {
  if (launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const auto env = rank_zero_env();
  const auto dir = test::temp_dir("DDPTrainer");
  const std::vector<float> want = fit_blobs(1, 8, 1, dir / "one");
  expect_close(fit_blobs(2, 2, 2, dir / "ddp"), want, "Trainer devices=2 vs 1");
  // A second DDP Trainer in the same program reuses the process group and the launched rank
  // (the first Trainer's end neither waits for rank 1 to exit nor kills it).
  expect_close(fit_blobs(2, 2, 2, dir / "ddp2"), want, "a second Trainer with devices=2");
  DDPStrategy::shutdown_process_group();  // rank 0: waits for rank 1 to finish the test
  std::filesystem::remove_all(dir);
}

// replay_steps under DDP: the gradient buckets are reduced by ops inside the step's graph, so
// each rank replays its step; the weights are bitwise those of tracing every step.
TEST(DDPMultiProcess, TrainerReplaysDDPStepsAsTracingThem) {
  if (launched_for_another_test()) GTEST_SKIP() << "a launched child of another test";
  const auto env = rank_zero_env();
  const auto dir = test::temp_dir("DDPReplay");
  LazyMode lazy;
  const std::vector<float> traced = fit_blobs(2, 2, 1, dir / "traced");
  graphs::StepReplayStats stats;
  const std::vector<float> replayed = fit_blobs(2, 2, 1, dir / "replayed", &stats);
  // 8 steps per epoch; each epoch traces again: steps 1-3 of the first (the momentum buffers
  // appear in step 2's update), steps 1-2 of the second.
  EXPECT_EQ(stats.replayed, 11u) << stats.last_fallback;
  EXPECT_EQ(replayed, traced);
  EXPECT_EQ(max_diff(replayed, traced), 0.0f);  // and finite
  DDPStrategy::shutdown_process_group();  // rank 0: waits for rank 1 to finish the test
  std::filesystem::remove_all(dir);
}

// A process the test starts: argv[0] an absolute path, variables set or removed, stdout and
// stderr to `log`. Killed (with what it started: PR_SET_PDEATHSIG) if still running at the end.
class Worker {
 public:
  Worker(const std::vector<std::string>& argv, const std::map<std::string, std::optional<std::string>>& vars,
         std::filesystem::path log)
      : log_(std::move(log)) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : vars) v ? void(env[k] = *v) : void(env.erase(k));
    std::vector<std::string> envs;
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : envs) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr), e.push_back(nullptr);
    const std::string log_path = log_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
  }
  ~Worker() {
    if (pid_ > 0 && ::kill(pid_, SIGKILL) == 0) ::waitpid(pid_, nullptr, 0);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // The wait status, or nullopt when it ran past `limit` (the caller reports it with the
  // output; the destructor kills it).
  std::optional<int> wait(std::chrono::seconds limit) {
    const std::optional<int> st = hg::test::exit_status_within(pid_, limit);
    if (st) pid_ = -1;
    return st;
  }
  std::string output() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
};

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// An error on rank 0 (here from training_step) reaches the user as itself: the Trainer's
// teardown, reached by the unwinding exception, kills the launched rank instead of waiting for it
// to fail in its next collective and reporting "local rank 1 exited with code 1".
class ThrowsOnRankZero : public Blobs {
 public:
  Tensor training_step(const Batch& b, int64_t idx) override {
    if (idx == 2 && trainer()->strategy().global_rank() == 0)
      throw InvalidArgument("training_step failed on rank 0 at batch 2");
    return Blobs::training_step(b, idx);
  }
};

TEST(DDPMultiProcess, AnErrorOnRankZeroIsWhatTheUserSees) {
  if (working_for_this_test()) {  // rank 0 (a Worker) and the rank it launches
    TrainerOptions o;
    o.accelerator = "hpu";
    o.devices = 2;
    o.strategy = "hpu_ddp";
    o.max_epochs = 2;
    o.logger = std::vector<std::shared_ptr<Logger>>{};
    o.enable_checkpointing = false;
    o.enable_progress_bar = false;
    o.default_root_dir = std::getenv("HG_DDP_DIR");
    o.dist_timeout = 120s;
    ThrowsOnRankZero m;
    std::vector<float> x(32 * 8, 0.5f);
    std::vector<int64_t> y(32, 1);
    auto data = std::make_shared<TensorDataset>(
        std::vector<Tensor>{Tensor::from_vector(x, {32, 8}), Tensor::from_indices(y, {32})});
    try {
      Trainer t(o);
      t.fit(m, DataLoader(data, {.batch_size = 4}));
    } catch (const std::exception& e) {  // what a program's main does
      std::fprintf(stderr, "error: %s\n", e.what());
      std::exit(3);
    }
    std::exit(0);
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  const auto dir = test::temp_dir("DDPRank0Error");
  auto vars = clean_dist_env();
  vars[kTestVar] = current_test();
  vars["HG_DDP_DIR"] = dir.string();
  Worker rank0({self_exe(), "--gtest_filter=" + current_test()}, vars, dir / "rank0.log");
  const auto st = rank0.wait(120s);
  ASSERT_TRUE(st.has_value()) << "rank 0 still running after 120 s:\n" << rank0.output();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 3) << rank0.output();
  EXPECT_THAT(rank0.output(), HasSubstr("error: training_step failed on rank 0 at batch 2"));
  EXPECT_THAT(rank0.output(), ::testing::Not(HasSubstr("exited with code")));
  EXPECT_THAT(rank0.output(), ::testing::Not(HasSubstr("hgraph DDP rank")));
  std::filesystem::remove_all(dir);
}

// The worker side of KilledRankMakesTheOtherExitWithAClearMessage: trains until rank `victim`
// kills itself at step 3; the other must not get past it.
[[noreturn]] void train_until_a_rank_dies(int devices, int num_nodes, int victim) {
  LazyMode lazy;
  DDPStrategy s;
  s.setup_environment({.device = Device::hpu(0), .devices = devices, .num_nodes = num_nodes, .timeout = 300s});
  const Device d = Device::hpu(0);
  auto net = models::zoo::mlp({8, 16, 4}, 5);
  net->to(d);
  SGD opt(net->named_parameters(), SGDOptions{.lr = 0.1});
  s.setup_module(*net);
  for (int64_t step = 0; step < 1000; ++step) {
    if (step == 3 && s.global_rank() == victim) ::raise(SIGKILL);
    auto [x, y] = rows(step % 8, s.global_rank() * 8, 8, d);
    s.backward(ops::cross_entropy(net->forward(x), y), true);
    s.finish_gradient_sync();
    opt.step();
    opt.zero_grad();
    graphs::mark_step(d);
  }
  std::fprintf(stderr, "rank %d trained past its peer's death\n", s.global_rank());
  std::_Exit(0);
}

TEST(DDPMultiProcess, KilledRankMakesTheOtherExitWithAClearMessage) {
  if (working_for_this_test()) {
    const bool launched = role() != "nodes";
    train_until_a_rank_dies(launched ? 2 : 1, launched ? 1 : 2, role() == "launched-root" ? 0 : 1);
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  const auto dir = test::temp_dir("DDPKill");
  const std::vector<std::string> argv{self_exe(), "--gtest_filter=" + current_test()};
  auto vars = clean_dist_env();
  vars[kTestVar] = current_test();
  // 1. Rank 1 is rank 0's launched child: rank 0's watchdog (or its next all-reduce) notices.
  {
    vars[kRoleVar] = "launched";
    Worker rank0(argv, vars, dir / "launched.log");
    const auto st = rank0.wait(120s);  // the group's timeout is 300 s: this is not it
    ASSERT_TRUE(st.has_value()) << "rank 0 still running 120 s after rank 1 died:\n" << rank0.output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << rank0.output();
    EXPECT_THAT(rank0.output(), HasSubstr("hgraph DDP rank 0: "));
    EXPECT_THAT(rank0.output(), ::testing::ContainsRegex("signal 9|peer rank 1"));
  }
  // 2. Rank 0 dies: its launched rank 1 says so (parent-death signal or a failed all-reduce).
  {
    vars[kRoleVar] = "launched-root";
    Worker rank0(argv, vars, dir / "launched-root.log");
    const auto st = rank0.wait(120s);
    ASSERT_TRUE(st.has_value()) << rank0.output();
    EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << rank0.output();
    std::string out;
    EXPECT_TRUE(hg::test::wait_until([&] { return (out = rank0.output()).find("hgraph DDP rank 1: ") != std::string::npos; },
                                     hg::test::kWaitLimit, "the orphaned rank 1 to report rank 0's death in the log"))
        << out;
    EXPECT_THAT(out, ::testing::ContainsRegex("hgraph DDP rank 1: (the process that launched this rank|.*peer rank 0)"));
  }
  // 3. Two independent processes (two nodes of one device): the survivor's all-reduce fails.
  {
    vars[kRoleVar] = "nodes";
    vars["MASTER_ADDR"] = "127.0.0.1";
    vars["MASTER_PORT"] = std::to_string(free_port());
    vars["NODE_RANK"] = "0";
    Worker rank0(argv, vars, dir / "node0.log");
    vars["NODE_RANK"] = "1";
    Worker rank1(argv, vars, dir / "node1.log");
    const auto st = rank0.wait(120s);
    ASSERT_TRUE(st.has_value()) << "rank 0 still running 120 s after rank 1 died:\n" << rank0.output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << rank0.output();
    EXPECT_THAT(rank0.output(), HasSubstr("hgraph DDP rank 0: "));
    EXPECT_THAT(rank0.output(), HasSubstr("failed"));
    const auto st1 = rank1.wait(hg::test::kWaitLimit);
    ASSERT_TRUE(st1.has_value()) << "rank 1 (the one that SIGKILLs itself) still running:\n" << rank1.output();
    EXPECT_TRUE(WIFSIGNALED(*st1) && WTERMSIG(*st1) == SIGKILL) << rank1.output();
  }
  std::filesystem::remove_all(dir);
}

// Two namespaces joined by a veth pair, 10.213.<pid % 250>.1 and .2; removed at the end.
class VethPair {
 public:
  VethPair() {
    const std::string id = std::to_string(::getpid());
    ns_ = {"hgddp" + id + "a", "hgddp" + id + "b"};
    const std::string va = "hgv" + id + "a", vb = "hgv" + id + "b", net = "10.213." + std::to_string(::getpid() % 250);
    addr_ = {net + ".1", net + ".2"};
    const std::vector<std::string> cmds{
        "ip netns add " + ns_[0], "ip netns add " + ns_[1],
        "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + ns_[0], "ip link set " + vb + " netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add " + addr_[0] + "/24 dev " + va,
        "ip -n " + ns_[1] + " addr add " + addr_[1] + "/24 dev " + vb,
        "ip -n " + ns_[0] + " link set " + va + " up", "ip -n " + ns_[1] + " link set " + vb + " up",
        "ip -n " + ns_[0] + " link set lo up", "ip -n " + ns_[1] + " link set lo up"};
    for (const auto& c : cmds)
      if (hg::test::run_command(c + " 2>/dev/null", 60s, "'" + c + "'").exit_code != 0) {
        error_ = "'" + c + "' failed";
        return;
      }
  }
  ~VethPair() {
    for (const auto& n : ns_)  // takes the veth along
      (void)hg::test::run_command("ip netns del " + n + " 2>/dev/null", 60s, "'ip netns del " + n + "'");
  }
  const std::string& error() const { return error_; }
  const std::string& ns(int i) const { return ns_[i]; }
  const std::string& addr(int i) const { return addr_[i]; }

 private:
  std::vector<std::string> ns_, addr_;
  std::string error_;
};

std::string ip_command() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

TEST(DDPMultiProcess, TwoNodesInNetworkNamespacesOverAVethPair) {
  if (working_for_this_test()) {  // a node: NODE_RANK, MASTER_ADDR, MASTER_PORT from the test
    LazyMode lazy;
    DDPStrategy s;
    s.setup_environment({.device = Device::hpu(0), .devices = 1, .num_nodes = 2, .timeout = 120s});
    EXPECT_EQ(s.world_size(), 2);
    EXPECT_EQ(s.global_rank(), std::atoi(std::getenv("NODE_RANK")));
    train_and_compare(s, {{"sgd", 1}, {"adamw", 2}});
    s.teardown();
    DDPStrategy::shutdown_process_group();
    return;
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  const std::string ip = ip_command();
  if (ip.empty()) GTEST_SKIP() << "no 'ip' command (iproute2): cannot create network namespaces";
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); running as uid " << ::geteuid();
  VethPair veth;
  if (!veth.error().empty()) GTEST_SKIP() << "cannot create network namespaces here: " << veth.error();
  const auto dir = test::temp_dir("DDPNetns");
  auto vars = clean_dist_env();
  vars[kTestVar] = current_test();
  vars["MASTER_ADDR"] = veth.addr(0);
  vars["MASTER_PORT"] = "29571";  // a fresh namespace: nothing else listens there
  std::vector<std::unique_ptr<Worker>> nodes;
  for (int n = 0; n < 2; ++n) {
    vars["NODE_RANK"] = std::to_string(n);
    nodes.push_back(std::make_unique<Worker>(
        std::vector<std::string>{ip, "netns", "exec", veth.ns(n), self_exe(), "--gtest_filter=" + current_test()}, vars,
        dir / ("node" + std::to_string(n) + ".log")));
  }
  for (int n = 0; n < 2; ++n) {
    const auto st = nodes[n]->wait(240s);
    ASSERT_TRUE(st.has_value()) << "node " << n << " still running after 240 s:\n" << nodes[n]->output();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "node " << n << ":\n" << nodes[n]->output();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hg::training
