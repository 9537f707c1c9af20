#include "training/shm_allreduce.h"

#include <dirent.h>
#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include "training/tcp_store.h"

namespace hg::training {
namespace {

constexpr uint64_t kMagic = 0x6867646470736d31ull;  // "hgddpsm1"
constexpr uint32_t kVersion = 1;
constexpr const char* kPrefix = "hgraph-ddp-";  // /dev/shm/hgraph-ddp-<creator pid>-<random>
// A waiting rank polls this long before it sleeps: the peer of a lock-step training loop
// usually arrives within microseconds, and a futex wake-up costs tens of them on a busy VM.
// The first part spins on the core; the rest yields it between polls, so that a peer (or this
// rank's other threads) sharing the core can run.
constexpr auto kPauseSpin = std::chrono::microseconds(5);
constexpr auto kYieldSpin = std::chrono::microseconds(60);
// While asleep a waiter wakes at least this often to check that its peers are alive.
constexpr auto kSleepSlice = std::chrono::milliseconds(5);

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

struct alignas(64) RankState {
  std::atomic<uint64_t> arrived;  // the last round this rank has arrived at (its slot is filled)
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> gone;     // 1: left the group, 2: failed a collective (the channel is broken)
};

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// Exited (a zombie counts: its parent has not reaped it yet) or never existed here.
bool process_gone(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// What ranks must share to use one segment: the machine (host name and boot), the /dev/shm they
// see (mount namespace), pids that mean the same process (pid namespace) and, so that two
// "nodes" in network namespaces of one machine keep talking over their network, the network
// namespace. "off" when HG_DDP_SHM=0.
std::string host_identity(bool enabled) {
  if (const char* v = std::getenv("HG_DDP_SHM"); !enabled || (v && std::string(v) == "0")) return "off";
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string id = std::string(host) + "|" + read_line("/proc/sys/kernel/random/boot_id");
  for (const char* ns : {"mnt", "pid", "net"}) {
    std::error_code ec;
    id += "|" + std::filesystem::read_symlink(std::string("/proc/self/ns/") + ns, ec).string();
  }
  return id;
}

// Segments whose creator (the pid in the name) is gone: a rank 0 killed while its group was being
// set up. Only this user's, only ours by name.
void remove_stale_segments() {
  DIR* d = ::opendir("/dev/shm");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), &end, 10);
    struct stat st {};
    if (pid <= 0 || !end || *end != '-' || ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != ::geteuid() || !process_gone(static_cast<pid_t>(pid)))
      continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) spdlog::info("DDP: removed the stale shared-memory segment {}", name);
  }
  ::closedir(d);
}

size_t header_bytes(int world) { return 128 + 64 * static_cast<size_t>(world); }
size_t segment_bytes(int world) {
  return header_bytes(world) + static_cast<size_t>(world) * 2 * ShmAllReduce::kChunkFloats * sizeof(float);
}

}  // namespace

struct ShmAllReduce::Segment {
  uint64_t magic;
  uint32_t version, world;
  uint64_t nonce, chunk;
  alignas(64) std::atomic<uint32_t> futex;  // bumped by every arrival and departure
  std::atomic<uint32_t> sleepers;           // waiters in FUTEX_WAIT (arrivals wake them)

  RankState& rank(int r) {
    return reinterpret_cast<RankState*>(reinterpret_cast<char*>(this) + 128)[r];
  }
  float* slot(int r, uint64_t round) {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(this) + header_bytes(static_cast<int>(world))) +
           (static_cast<size_t>(r) * 2 + (round & 1)) * ShmAllReduce::kChunkFloats;
  }
  void wake_all() {
    futex.fetch_add(1);
    if (sleepers.load()) hg::training::futex(&futex, FUTEX_WAKE, INT_MAX, nullptr);
  }
};
static_assert(sizeof(RankState) == 64);

std::unique_ptr<ShmAllReduce> ShmAllReduce::join(TcpStore& store, const std::string& ns, int rank, int world,
                                                 std::chrono::milliseconds timeout, std::vector<std::string> who,
                                                 bool enabled) {
  static_assert(sizeof(Segment) <= 128);
  const std::string id = host_identity(enabled);
  store.set(ns + "shm/host/" + std::to_string(rank), id);
  bool same = id != "off";
  for (int r = 0; r < world; ++r) same = same && store.get(ns + "shm/host/" + std::to_string(r), timeout) == id;
  if (!same) return nullptr;  // every rank read the same identities: every rank decides alike

  const size_t bytes = segment_bytes(world);
  std::string name, problem;
  uint64_t nonce = 0;
  if (rank == 0) {
    remove_stale_segments();
    std::random_device rd;
    nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    std::ostringstream n;
    n << "/" << kPrefix << ::getpid() << "-" << std::hex << nonce;
    name = n.str();
  }
  // Rank 0's segment goes from the file system once every rank answered, whatever happened.
  struct Unlink {
    std::string name;
    ~Unlink() {
      if (!name.empty()) ::shm_unlink(name.c_str());
    }
  } unlink;
  int fd = -1;
  if (rank == 0) {
    fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) problem = "shm_open(" + name + "): " + std::strerror(errno);
    else unlink.name = name;
    // Pages reserved now: a full /dev/shm is a fallback here, not a SIGBUS in the middle of a step.
    if (fd >= 0 && (errno = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0)
      problem = "reserving " + std::to_string(bytes) + " bytes in /dev/shm: " + std::strerror(errno);
  } else {
    std::istringstream v(store.get(ns + "shm/segment", timeout));
    v >> name >> std::hex >> nonce;
    if (name.rfind(std::string("/") + kPrefix, 0) != 0) {
      problem = "rank 0 has no segment";
    } else if ((fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0)) < 0) {
      problem = "shm_open(" + name + "): " + std::strerror(errno);
    } else {
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes || st.st_uid != ::geteuid())
        problem = name + " is not the segment rank 0 made (size or owner)";
    }
  }
  void* map = MAP_FAILED;
  if (problem.empty()) {
    map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) problem = std::string("mmap: ") + std::strerror(errno);
  }
  if (fd >= 0) ::close(fd);
  auto* seg = static_cast<Segment*>(map);
  if (problem.empty() && rank == 0) {
    seg->magic = kMagic;
    seg->version = kVersion;
    seg->world = static_cast<uint32_t>(world);
    seg->nonce = nonce;
    seg->chunk = kChunkFloats;
    for (int r = 0; r < world; ++r) new (&seg->rank(r)) RankState{};
  }
  if (rank == 0) {  // the name goes out once the header is written (the store's round trips order it)
    std::ostringstream v;
    if (problem.empty()) v << name << " " << std::hex << nonce;
    store.set(ns + "shm/segment", v.str());
  }
  if (problem.empty() && (seg->magic != kMagic || seg->version != kVersion || seg->world != static_cast<uint32_t>(world) ||
                          seg->nonce != nonce || seg->chunk != kChunkFloats))
    problem = name + " does not hold this group's header";
  if (problem.empty()) seg->rank(rank).pid.store(static_cast<int32_t>(::getpid()));
  store.set(ns + "shm/ok/" + std::to_string(rank), problem.empty() ? "ok" : problem);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(ns + "shm/ok/" + std::to_string(r));
  std::string why;
  try {
    store.wait(keys, timeout);
    for (int r = 0; r < world; ++r)
      if (const std::string v = store.get(keys[r], timeout); v != "ok" && why.empty())
        why = "rank " + std::to_string(r) + ": " + v;
  } catch (...) {
    if (map != MAP_FAILED) ::munmap(map, bytes);
    throw;
  }
  if (!why.empty()) {
    if (map != MAP_FAILED) ::munmap(map, bytes);
    spdlog::warn("DDP: gradients go over Gloo instead of shared memory ({})", why);
    return nullptr;
  }
  std::unique_ptr<ShmAllReduce> out(new ShmAllReduce());
  out->seg_ = seg;
  out->bytes_ = bytes;
  out->rank_ = rank;
  out->world_ = world;
  out->timeout_ = timeout;
  out->who_ = std::move(who);
  return out;
}

ShmAllReduce::~ShmAllReduce() {
  if (!seg_) return;
  uint32_t none = 0;
  seg_->rank(rank_).gone.compare_exchange_strong(none, 1);
  seg_->wake_all();
  ::munmap(seg_, bytes_);
}

void ShmAllReduce::fail(const std::string& why) {
  broken_ = why;
  seg_->rank(rank_).gone.store(2);
  seg_->wake_all();
  throw DistError(why);
}

void ShmAllReduce::arrive_and_wait(uint64_t seq) {
  Segment& s = *seg_;
  s.rank(rank_).arrived.store(seq);
  s.wake_all();
  auto all_here = [&] {
    for (int r = 0; r < world_; ++r)
      if (s.rank(r).arrived.load(std::memory_order_acquire) < seq) return false;
    return true;
  };
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (uint32_t i = 1;; ++i) {
    if (all_here()) return;
    if (i % 64 == 0) {
      const auto spent = Clock::now() - t0;
      if (spent > kYieldSpin) break;
      if (spent > kPauseSpin) std::this_thread::yield();
    }
    _mm_pause();
  }
  const auto deadline = t0 + timeout_;
  for (;;) {
    for (int r = 0; r < world_; ++r) {
      if (r == rank_ || s.rank(r).arrived.load(std::memory_order_acquire) >= seq) continue;
      const std::string peer = "peer rank " + std::to_string(r) + (r < static_cast<int>(who_.size()) ? " (" + who_[r] + ")" : "");
      if (const uint32_t g = s.rank(r).gone.load()) fail(peer + (g == 1 ? " left the group" : " failed a collective"));
      if (process_gone(s.rank(r).pid.load())) fail(peer + " is gone (it exited or was killed)");
    }
    const auto now = Clock::now();
    if (now >= deadline)
      fail("timed out after " + std::to_string(timeout_.count()) + " ms (a peer is gone, stuck or not in this collective)");
    const auto nap = std::min<Clock::duration>(kSleepSlice, deadline - now);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(nap).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    s.sleepers.fetch_add(1);
    const uint32_t word = s.futex.load();
    if (!all_here()) futex(&s.futex, FUTEX_WAIT, word, &ts);
    s.sleepers.fetch_sub(1);
    if (all_here()) return;
  }
}

void ShmAllReduce::allreduce(float* data, size_t n, ReduceOp op) {
  if (!broken_.empty()) throw DistError("the shared-memory channel broke earlier: " + broken_);
  for (size_t off = 0; off < n; off += kChunkFloats) {
    const size_t m = std::min(kChunkFloats, n - off);
    const uint64_t round = ++seq_;
    std::memcpy(seg_->slot(rank_, round), data + off, m * sizeof(float));
    arrive_and_wait(round);
    // Every rank reduces the slots in rank order: the same bits everywhere.
    float* out = data + off;
    std::memcpy(out, seg_->slot(0, round), m * sizeof(float));
    for (int r = 1; r < world_; ++r) {
      const float* in = seg_->slot(r, round);
      switch (op) {
        case ReduceOp::Max:
          for (size_t i = 0; i < m; ++i) out[i] = std::max(out[i], in[i]);
          break;
        case ReduceOp::Min:
          for (size_t i = 0; i < m; ++i) out[i] = std::min(out[i], in[i]);
          break;
        default:  // Sum; Mean divides afterwards (ProcessGroup::allreduce)
          for (size_t i = 0; i < m; ++i) out[i] += in[i];
      }
    }
  }
}

}  // namespace hg::training
