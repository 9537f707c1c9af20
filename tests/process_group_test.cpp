// ProcessGroup over Gloo: ranks as threads in this process, a rank in a forked child that gets
// killed, and rendezvous failures (training/process_group.h).
#include "training/process_group.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "tests/errors.h"
#include "tests/wait.h"
#include "training/cluster_env.h"
#include "training/shm_allreduce.h"
#include "training/tcp_store.h"

namespace hg::training {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// The rendezvous and collective timeout of groups that are expected to work: it bounds every
// wait of theirs (normally milliseconds), generously for ASan on a loaded machine.
constexpr std::chrono::milliseconds kGroupTimeout = hg::test::kWaitLimit;

ProcessGroupOptions options(int rank, int world, std::chrono::milliseconds timeout, int port = 0) {
  ProcessGroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  o.master_port = port;
  return o;
}

// Runs fn(rank, group) on `world` threads over one store; rethrows nothing, records failures.
void run_ranks(int world, const std::shared_ptr<TcpStore>& server, std::chrono::milliseconds timeout,
               const std::function<void(ProcessGroup&)>& fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      try {
        auto store = r == 0 ? server : std::make_shared<TcpStore>("127.0.0.1", server->port(), false, timeout);
        ProcessGroup pg(options(r, world, timeout), store);
        fn(pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
}

std::shared_ptr<TcpStore> local_store(std::chrono::milliseconds timeout = kGroupTimeout) {
  return std::make_shared<TcpStore>("127.0.0.1", 0, true, timeout);
}

TEST(ProcessGroupTest, AllreduceSumMeanMaxMin) {
  run_ranks(3, local_store(), kGroupTimeout, [](ProcessGroup& pg) {
    float r = static_cast<float>(pg.rank());
    std::vector<float> v{r, 10 * r, -r, 1.5f};
    pg.allreduce(v.data(), v.size());
    EXPECT_THAT(v, ElementsAre(3.f, 30.f, -3.f, 4.5f));
    v = {r, 2 * r + 1};
    pg.allreduce(v.data(), v.size(), ReduceOp::Mean);
    EXPECT_THAT(v, ElementsAre(1.f, 3.f));
    v = {r, -r};
    pg.allreduce(v.data(), v.size(), ReduceOp::Max);
    EXPECT_THAT(v, ElementsAre(2.f, 0.f));
    v = {r, -r};
    pg.allreduce(v.data(), v.size(), ReduceOp::Min);
    EXPECT_THAT(v, ElementsAre(0.f, -2.f));
    // larger than Gloo's 1 MB segment: 600k floats, element i on rank r = i + r
    std::vector<float> big(600000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) + r;
    pg.allreduce(big.data(), big.size(), ReduceOp::Sum, /*tag=*/1000);
    for (size_t i = 0; i < big.size(); i += 9973) ASSERT_EQ(big[i], 3.f * (i % 1000) + 3.f) << i;
    EXPECT_DOUBLE_EQ(pg.allreduce_scalar(0.25 * pg.rank(), ReduceOp::Sum), 0.75);
    EXPECT_DOUBLE_EQ(pg.allreduce_scalar(0.25 * pg.rank(), ReduceOp::Mean), 0.25);
    EXPECT_DOUBLE_EQ(pg.allreduce_scalar(pg.rank(), ReduceOp::Max), 2.0);
  });
}

TEST(ProcessGroupTest, BroadcastFloatsAndLargeStringsAllGatherBarrier) {
  run_ranks(3, local_store(), kGroupTimeout, [](ProcessGroup& pg) {
    std::vector<float> w{1, 2, 3};
    if (pg.rank() != 1) w = {0, 0, 0};
    pg.broadcast(w.data(), w.size(), /*root=*/1);
    EXPECT_THAT(w, ElementsAre(1.f, 2.f, 3.f));
    std::string big;
    if (pg.rank() == 0) {
      big.resize(3 << 20);
      for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
    } else {
      big = "stale";
    }
    pg.broadcast(big, 0);
    ASSERT_EQ(big.size(), size_t(3 << 20));
    for (size_t i = 0; i < big.size(); i += 4099) ASSERT_EQ(big[i], static_cast<char>(i * 7 + 3)) << i;
    std::string empty = pg.rank() == 2 ? "" : "x";
    pg.broadcast(empty, 2);
    EXPECT_EQ(empty, "");
    auto all = pg.all_gather(std::string(pg.rank(), 'a' + pg.rank()));
    EXPECT_THAT(all, ElementsAre("", "b", "cc"));
    EXPECT_THAT(pg.all_gather(""), ElementsAre("", "", ""));
    pg.barrier("end");
  });
}

TEST(ProcessGroupTest, ConsecutiveGroupsOnOneStoreHaveTheirOwnKeys) {
  auto server = local_store();
  std::vector<std::string> runs(3);
  for (int round = 0; round < 2; ++round) {
    run_ranks(3, server, kGroupTimeout, [&](ProcessGroup& pg) {
      runs[pg.rank()] = pg.run_id();
      float v = 1.f + round;
      pg.allreduce(&v, 1);
      EXPECT_EQ(v, 3.f * (1 + round));
    });
    EXPECT_THAT(runs, ElementsAre("gen" + std::to_string(round), "gen" + std::to_string(round),
                                  "gen" + std::to_string(round)));
  }
  EXPECT_TRUE(server->check({"hg/pg/gen0/joined/2", "hg/pg/gen1/joined/2"}));
}

TEST(ProcessGroupTest, OwnStoreOnMasterPortPortInUseAndWorldOfOne) {
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        ProcessGroup pg(options(r, 2, kGroupTimeout, port));
        EXPECT_DOUBLE_EQ(pg.allreduce_scalar(r + 1, ReduceOp::Sum), 3.0);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  TcpStore holder("127.0.0.1", 0, true, 1s);
  EXPECT_THAT(hg::test::error_of<DistError>([&] { ProcessGroup pg(options(0, 2, 1s, holder.port())); }),
              HasSubstr("MASTER_PORT " + std::to_string(holder.port()) + " on 127.0.0.1 is already in use"));
  ProcessGroup one(options(0, 1, 1s));
  float v = 4;
  one.allreduce(&v, 1, ReduceOp::Mean);
  EXPECT_EQ(v, 4.f);
  EXPECT_EQ(one.all_gather("z"), std::vector<std::string>{"z"});
}

// The DDP reducer's communication thread allreduces with tags >= 1000 while the main thread runs
// its own collectives on tag 0: both finish with the right values.
TEST(ProcessGroupTest, ConcurrentCollectivesOnDistinctTags) {
  run_ranks(3, local_store(), kGroupTimeout, [](ProcessGroup& pg) {
    std::vector<float> grads(300000, 1.f + pg.rank());
    std::thread comm([&] {
      for (uint32_t step = 0; step < 5; ++step) pg.allreduce(grads.data(), grads.size(), ReduceOp::Mean, 1000 + step);
    });
    double s = 0;
    for (int i = 0; i < 20; ++i) s += pg.allreduce_scalar(pg.rank(), ReduceOp::Sum);
    pg.barrier("main");
    comm.join();
    EXPECT_DOUBLE_EQ(s, 60.0);
    EXPECT_EQ(grads.front(), 2.f);  // mean of 1, 2, 3 is a fixed point of further means
    EXPECT_EQ(grads.back(), 2.f);
  });
}

// Ranks on one host: the DDP buckets' all-reduces (tags >= kShmTags) go through shared memory,
// with the bits Gloo gives for two ranks (a + b == b + a), in chunks, and the segment's name is
// gone from /dev/shm once the group is set up.
TEST(ProcessGroupTest, SharedMemoryAllreduceMatchesGlooBitwise) {
  run_ranks(2, local_store(), kGroupTimeout, [](ProcessGroup& pg) {
    EXPECT_TRUE(pg.shares_memory());
    auto values = [](int rank) {  // more than two chunks of arbitrary floats
      std::vector<float> out(ShmAllReduce::kChunkFloats * 2 + 123);
      uint32_t x = 12345u + 977u * static_cast<uint32_t>(rank);
      for (float& v : out) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) * 1e-5f - 80.f;
      return out;
    };
    const std::vector<float> a = values(0), b = values(1);
    std::vector<float> gloo = values(pg.rank()), shm = gloo, most = gloo;
    pg.allreduce(gloo.data(), gloo.size(), ReduceOp::Sum, /*tag=*/0);
    pg.allreduce(shm.data(), shm.size(), ReduceOp::Sum, ProcessGroup::kShmTags);
    EXPECT_EQ(shm, gloo);
    pg.allreduce(most.data(), most.size(), ReduceOp::Max, ProcessGroup::kShmTags + 1);
    for (size_t i = 0; i < a.size(); i += 997) {
      ASSERT_EQ(shm[i], a[i] + b[i]) << i;
      ASSERT_EQ(most[i], std::max(a[i], b[i])) << i;
    }
    float one = 1.f + pg.rank();
    pg.allreduce(&one, 1, ReduceOp::Mean, ProcessGroup::kShmTags);
    EXPECT_EQ(one, 1.5f);
  });
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind("hgraph-ddp-" + std::to_string(::getpid()) + "-", 0), 0u) << e.path();
}

// One rank without it (ProcessGroupOptions::shared_memory, or HG_DDP_SHM=0) turns it off for all.
TEST(ProcessGroupTest, SharedMemoryOffOnOneRankIsGlooForAll) {
  auto server = local_store();
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        auto o = options(r, 2, kGroupTimeout);
        o.shared_memory = r == 0;
        ProcessGroup pg(o, r == 0 ? server : std::make_shared<TcpStore>("127.0.0.1", server->port(), false, kGroupTimeout));
        EXPECT_FALSE(pg.shares_memory());
        float v = 1.f + r;
        pg.allreduce(&v, 1, ReduceOp::Sum, ProcessGroup::kShmTags);
        EXPECT_EQ(v, 3.f);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : ts) t.join();
}

// A segment left by a rank 0 killed while setting its group up (its pid in the name is gone) is
// removed by the next group on the host; one whose creator lives is left alone.
TEST(ProcessGroupTest, StaleSharedMemorySegmentsAreRemoved) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_TRUE(hg::test::waitpid_within(dead, hg::test::kWaitLimit, "a child that exits at once").has_value());
  const std::string stale = "/hgraph-ddp-" + std::to_string(dead) + "-5ta1e", alive = "/hgraph-ddp-" + std::to_string(::getpid()) + "-a11ve";
  for (const std::string& n : {stale, alive}) {
    const int fd = ::shm_open(n.c_str(), O_RDWR | O_CREAT, 0600);
    ASSERT_GE(fd, 0) << n;
    ASSERT_EQ(::write(fd, "junk", 4), 4);  // not a segment: never mapped, only removed
    ::close(fd);
  }
  run_ranks(2, local_store(), kGroupTimeout, [](ProcessGroup& pg) { EXPECT_TRUE(pg.shares_memory()); });
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + stale));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + alive));
  ::shm_unlink(alive.c_str());
}

// Over shared memory too, a peer that leaves the group or does not take part fails the others:
// at once when it left, after the group's timeout when it is there but absent.
TEST(ProcessGroupTest, SharedMemoryPeerThatLeavesOrStaysAwayFailsTheCollective) {
  for (const bool leave : {true, false}) {
    auto server = local_store();
    hg::test::Event left, done;
    auto absent = std::async(std::launch::async, [&] {
      try {
        ProcessGroup pg(options(1, 2, 1s), std::make_shared<TcpStore>("127.0.0.1", server->port(), false, kGroupTimeout));
        if (!leave) (void)done.wait(hg::test::kWaitLimit, "rank 0's allreduce to time out");
      } catch (const std::exception& ex) {
        ADD_FAILURE() << ex.what();
      }
      left.set();
    });
    hg::test::SetOnExit release_absent(done);
    std::string e;
    {
      ProcessGroup pg(options(0, 2, 3s), server);
      ASSERT_TRUE(pg.shares_memory());
      if (leave) {
        ASSERT_TRUE(left.wait(hg::test::kWaitLimit, "rank 1 to leave the group"));
      }
      std::vector<float> v(10, 1.f);
      const auto t0 = std::chrono::steady_clock::now();
      e = hg::test::error_of<DistError>([&] { pg.allreduce(v.data(), v.size(), ReduceOp::Sum, ProcessGroup::kShmTags); });
      if (leave) {
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms) << "a peer that left fails the wait before the timeout";
      }
      // the channel is broken from then on
      EXPECT_THAT(hg::test::error_of<DistError>([&] { pg.allreduce(v.data(), v.size(), ReduceOp::Sum, ProcessGroup::kShmTags); }),
                  HasSubstr("broke earlier"));
      done.set();
      hg::test::get_within(absent, hg::test::kWaitLimit, "the absent rank's thread to leave the group");
    }
    EXPECT_THAT(e, HasSubstr("allreduce of 10 floats (tag 1000) failed on rank 0 of 2"));
    EXPECT_THAT(e, HasSubstr(leave ? "peer rank 1 (pid " : "timed out after 3000 ms"));
    if (leave) {
      EXPECT_THAT(e, HasSubstr("left the group"));
    }
  }
}

// A rank that never enters the collective: the others fail after the timeout, not hang.
TEST(ProcessGroupTest, CollectiveTimesOutWhenAPeerDoesNotTakePart) {
  auto server = local_store();
  std::string e;
  hg::test::Event done;
  // Rank 1 joins the group and then waits (bounded) for rank 0's verdict without taking part.
  auto absent = std::async(std::launch::async, [&] {
    try {
      ProcessGroup pg(options(1, 2, 1s), std::make_shared<TcpStore>("127.0.0.1", server->port(), false, kGroupTimeout));
      (void)done.wait(hg::test::kWaitLimit, "rank 0's allreduce to time out");
    } catch (const std::exception& ex) {
      ADD_FAILURE() << ex.what();
    }
  });
  hg::test::SetOnExit release_absent(done);  // also when the rendezvous below throws
  {
    ProcessGroup pg(options(0, 2, 1s), server);
    std::vector<float> v(10, 1.f);
    e = hg::test::error_of<DistError>([&] { pg.allreduce(v.data(), v.size()); });
    done.set();
    hg::test::get_within(absent, hg::test::kWaitLimit, "the absent rank's thread to leave the group");
  }
  EXPECT_THAT(e, HasSubstr("allreduce of 10 floats (tag 0) failed on rank 0 of 2"));
  EXPECT_THAT(e, HasSubstr("timed out after 1000 ms"));
}

TEST(ProcessGroupTest, MissingPeerFailsRendezvousWithinTheTimeout) {
  auto server = local_store(1500ms);
  std::string e = hg::test::error_of<DistError>([&] {
    ProcessGroup pg(options(0, 3, 1500ms), server);
  });
  EXPECT_THAT(e, HasSubstr("rank 0 of 3"));
  EXPECT_THAT(e, HasSubstr("rank(s) 1, 2 did not join within 1500 ms"));
}

TEST(ProcessGroupTest, BadOptionsAreInvalidArgument) {
  EXPECT_THAT(hg::test::error_of<InvalidArgument>([] { ProcessGroup pg(options(2, 2, 1s)); }),
              HasSubstr("rank 2 outside [0, 2)"));
  EXPECT_THAT(hg::test::error_of<InvalidArgument>([] { ProcessGroup pg(options(0, 0, 1s)); }),
              HasSubstr("world_size 0"));
}

// Rank 1 runs in a forked child (forked before this process starts any thread on its path) and
// is SIGKILLed after the first allreduce; rank 0's next allreduce must fail naming rank 1.
TEST(ProcessGroupTest, KilledPeerMakesAllreduceThrowNamingIt) {
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::alarm(3 * hg::test::kWaitLimit.count());  // bound even if the parent never kills it
    ::close(ready[0]);
    int code = 1;
    try {
      ProcessGroup pg(options(1, 2, kGroupTimeout, port));
      float v = 1;
      pg.allreduce(&v, 1);
      char c = v == 3.f ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      ::pause();  // until killed
    } catch (...) {
    }
    ::_exit(code);
  }
  ::close(ready[1]);
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  std::string e, shm_error;
  {
    ProcessGroup pg(options(0, 2, kGroupTimeout, port));
    float v = 2;
    pg.allreduce(&v, 1);
    EXPECT_EQ(v, 3.f);
    char c = 0;
    ASSERT_TRUE(hg::test::readable_within(ready[0], hg::test::kWaitLimit, "rank 1's result byte on the pipe"));
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    EXPECT_EQ(c, 'y');
    ::kill(child, SIGKILL);
    const std::optional<int> status = hg::test::waitpid_within(child, hg::test::kWaitLimit, "the SIGKILLed rank 1");
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFSIGNALED(*status));
    std::vector<float> g(1000, 1.f);
    e = hg::test::error_of<DistError>([&] { pg.allreduce(g.data(), g.size()); });
    ASSERT_TRUE(pg.shares_memory());  // the buckets' channel notices too: the pid is gone
    shm_error = hg::test::error_of<DistError>([&] { pg.allreduce(g.data(), g.size(), ReduceOp::Sum, ProcessGroup::kShmTags); });
  }
  ::close(ready[0]);
  EXPECT_THAT(shm_error, HasSubstr("allreduce of 1000 floats (tag 1000) failed on rank 0 of 2: peer rank 1 (pid " +
                                   std::to_string(child) + " on "));
  EXPECT_THAT(shm_error, HasSubstr("is gone"));
  EXPECT_THAT(e, HasSubstr("allreduce of 1000 floats"));
  EXPECT_THAT(e, HasSubstr("rank 0 of 2"));
  EXPECT_THAT(e, HasSubstr("peer rank 1 (pid " + std::to_string(child) + " on "));
}


// Sets (value) or unsets (nullptr) environment variables for a scope, then restores them.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto& [k, v] : vars) {
      const char* old = std::getenv(k);
      saved_.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
      if (v) ::setenv(k, v, 1);
      else ::unsetenv(k);
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ClusterEnvTest, DefaultsAndVariablesAsLightningEnvironment) {
  {
    ScopedEnv s{{"MASTER_ADDR", nullptr}, {"MASTER_PORT", nullptr}, {"NODE_RANK", nullptr},
                {"GROUP_RANK", nullptr}, {"LOCAL_RANK", nullptr}};
    ClusterEnv e = ClusterEnv::from_environment();
    EXPECT_EQ(e.master_addr, "127.0.0.1");
    EXPECT_EQ(e.master_port, 0);
    EXPECT_EQ(e.node_rank, 0);
    EXPECT_EQ(e.local_rank, 0);
    EXPECT_FALSE(e.creates_processes_externally);
  }
  {
    ScopedEnv s{{"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29501"}, {"NODE_RANK", nullptr},
                {"GROUP_RANK", "2"}, {"LOCAL_RANK", " 3 "}};
    ClusterEnv e = ClusterEnv::from_environment();
    EXPECT_EQ(e.master_addr, "10.0.0.5");
    EXPECT_EQ(e.master_port, 29501);
    EXPECT_EQ(e.node_rank, 2);  // GROUP_RANK when NODE_RANK is unset
    EXPECT_EQ(e.local_rank, 3);
    EXPECT_TRUE(e.creates_processes_externally);
    EXPECT_EQ(e.global_rank(4), 11);
  }
  ScopedEnv s{{"NODE_RANK", "1"}, {"GROUP_RANK", "2"}, {"LOCAL_RANK", "0"}};
  EXPECT_EQ(ClusterEnv::from_environment().node_rank, 1);  // NODE_RANK wins
  EXPECT_TRUE(ClusterEnv::from_environment().creates_processes_externally);
}

TEST(ClusterEnvTest, MalformedValuesNameTheVariable) {
  auto err = [](const char* var, const char* value) {
    ScopedEnv s{{"MASTER_ADDR", nullptr}, {"MASTER_PORT", nullptr}, {"NODE_RANK", nullptr},
                {"GROUP_RANK", nullptr}, {"LOCAL_RANK", nullptr}, {var, value}};
    return hg::test::error_of<InvalidArgument>([] { ClusterEnv::from_environment(); });
  };
  EXPECT_THAT(err("MASTER_PORT", "abc"), HasSubstr("MASTER_PORT='abc' is not a TCP port (1-65535)"));
  EXPECT_THAT(err("MASTER_PORT", "70000"), HasSubstr("MASTER_PORT='70000'"));
  EXPECT_THAT(err("MASTER_PORT", "0"), HasSubstr("MASTER_PORT='0'"));
  EXPECT_THAT(err("NODE_RANK", "-1"), HasSubstr("NODE_RANK='-1' is not a node rank"));
  EXPECT_THAT(err("GROUP_RANK", "1x"), HasSubstr("GROUP_RANK='1x'"));
  EXPECT_THAT(err("LOCAL_RANK", ""), HasSubstr("LOCAL_RANK=''"));
  EXPECT_THAT(err("MASTER_ADDR", ""), HasSubstr("MASTER_ADDR is set but empty"));
}

TEST(LauncherTest, RefusesWhenLocalRankIsSetOrNodesNeedAPort) {
  {
    ScopedEnv s{{"LOCAL_RANK", "0"}};
    ClusterEnv e = ClusterEnv::from_environment();
    EXPECT_THAT(hg::test::error_of<InvalidArgument>([&] { launch_local_ranks(e, 2, 1); }),
                HasSubstr("LOCAL_RANK is already set"));
  }
  ScopedEnv s{{"LOCAL_RANK", nullptr}, {"MASTER_PORT", nullptr}, {"NODE_RANK", "1"}};
  ClusterEnv e = ClusterEnv::from_environment();
  EXPECT_THAT(hg::test::error_of<InvalidArgument>([&] { launch_local_ranks(e, 2, 2); }),
              HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(hg::test::error_of<InvalidArgument>([&] { launch_local_ranks(e, 2, 1); }),
              HasSubstr("NODE_RANK 1 is not below num_nodes 1"));
}

// The launcher re-executes this test binary with the same argv: the child process runs the same
// test with LOCAL_RANK=1 and takes the child's part, told apart by HG_LAUNCHER_TEST (set by the
// parent) so that other tests a broad filter selects in the child skip. GTEST_FILTER limits the
// child to this test when argv has no --gtest_filter (an argv filter takes precedence).
constexpr const char* kRoleVar = "HG_LAUNCHER_TEST";

bool launched_for(const char* test) {
  const char* role = std::getenv(kRoleVar);
  return std::getenv("LOCAL_RANK") && role && std::string(role) == test;
}

TEST(LauncherTest, ReexecutedChildJoinsTheGroupAsLocalRankOne) {
  const char* name = "LauncherTest.ReexecutedChildJoinsTheGroupAsLocalRankOne";
  if (launched_for(name)) {  // the child: rank 1 of 2, from the variables the parent exported
    ClusterEnv env = ClusterEnv::from_environment();
    ASSERT_EQ(env.local_rank, 1);
    ASSERT_STREQ(std::getenv("WORLD_SIZE"), "2");
    ProcessGroup pg(options(env.global_rank(2), 2, kGroupTimeout, env.master_port));
    EXPECT_DOUBLE_EQ(pg.allreduce_scalar(10.0 * pg.rank() + 1, ReduceOp::Sum), 12.0);
    EXPECT_THAT(pg.all_gather(std::to_string(::getpid())), ::testing::Contains(std::to_string(::getppid())));
    return;
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  ScopedEnv s{{"MASTER_ADDR", nullptr}, {"MASTER_PORT", nullptr}, {"NODE_RANK", nullptr}, {"GROUP_RANK", nullptr},
              {"LOCAL_RANK", nullptr}, {"WORLD_SIZE", nullptr}, {kRoleVar, name}, {"GTEST_FILTER", name}};
  ClusterEnv env = ClusterEnv::from_environment();
  auto launcher = launch_local_ranks(env, 2, 1);  // generous bounds: a broad filter runs other tests in the child first
  EXPECT_GT(env.master_port, 0);
  EXPECT_STREQ(std::getenv("LOCAL_RANK"), "0");
  EXPECT_STREQ(std::getenv("MASTER_PORT"), std::to_string(env.master_port).c_str());
  {
    ProcessGroup pg(options(env.global_rank(2), 2, kGroupTimeout, env.master_port));
    EXPECT_DOUBLE_EQ(pg.allreduce_scalar(10.0 * pg.rank() + 1, ReduceOp::Sum), 12.0);
    auto pids = pg.all_gather(std::to_string(::getpid()));
    ASSERT_EQ(pids.size(), 2u);
    EXPECT_EQ(pids[0], std::to_string(::getpid()));
    EXPECT_NE(pids[1], pids[0]);
  }
  EXPECT_THAT(launcher->wait_all(static_cast<int>(std::chrono::milliseconds(hg::test::kWaitLimit).count())), ::testing::IsEmpty());  // the child's gtest run passed
}

TEST(LauncherTest, FailingAndHangingChildrenAreReported) {
  const char* name = "LauncherTest.FailingAndHangingChildrenAreReported";
  if (launched_for(name)) {
    if (std::string(std::getenv("LOCAL_RANK")) == "1") std::_Exit(3);
    std::this_thread::sleep_for(60s);  // local rank 2 hangs until the parent kills it
    std::_Exit(0);
  }
  if (std::getenv("LOCAL_RANK")) GTEST_SKIP() << "a launched child of another test";
  ScopedEnv s{{"MASTER_ADDR", nullptr}, {"MASTER_PORT", nullptr}, {"NODE_RANK", nullptr}, {"GROUP_RANK", nullptr},
              {"LOCAL_RANK", nullptr}, {"WORLD_SIZE", nullptr}, {kRoleVar, name}, {"GTEST_FILTER", name}};
  ClusterEnv env = ClusterEnv::from_environment();
  auto launcher = launch_local_ranks(env, 3, 1);
  std::string f;
  // With a broad filter the child runs other tests first.
  EXPECT_TRUE(hg::test::wait_until([&] { return !(f = launcher->failure()).empty(); }, hg::test::kWaitLimit,
                                   "the launcher to report local rank 1's exit"));
  EXPECT_THAT(f, ::testing::MatchesRegex("local rank 1 \\(pid [0-9]+\\) exited with code 3"));
  auto all = launcher->wait_all(300);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], f);
  EXPECT_THAT(all[1], ::testing::MatchesRegex("local rank 2 \\(pid [0-9]+\\) did not exit within 300 ms and was killed"));
}

}  // namespace
}  // namespace hg::training
