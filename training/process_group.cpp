#include "training/process_group.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/address.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "engine/error.h"
#include "training/shm_allreduce.h"
#include "training/tcp_store.h"

namespace hg::training {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::Min: return static_cast<ReduceFn>(&gloo::min<T>);
    default: return static_cast<ReduceFn>(&gloo::sum<T>);
  }
}

// The local address a packet to master_addr leaves from (UDP connect sends nothing).
std::string route_to(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(master_addr.c_str(), "9", &hints, &res);
  if (rc != 0) throw DistError("cannot resolve MASTER_ADDR '" + master_addr + "': " + ::gai_strerror(rc));
  std::string out;
  for (addrinfo* p = res; p && out.empty(); p = p->ai_next) {
    int fd = ::socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* a = local.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in&>(local).sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6&>(local).sin6_addr);
      if (::inet_ntop(local.ss_family, a, buf, sizeof(buf))) out = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (out.empty()) throw DistError("no local address routes to MASTER_ADDR '" + master_addr + "'");
  return out;
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that dies would kill this process with
// SIGPIPE instead of failing the collective. Like Python, ignore it (unless someone handles it).
void ignore_sigpipe() {
  struct sigaction cur {};
  if (::sigaction(SIGPIPE, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

struct ProcessGroup::Impl {
  ProcessGroupOptions opt;
  std::shared_ptr<TcpStore> store;
  std::string run_id;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::vector<std::string> peer_addr;  // per rank: the address its pair with us listens on
  std::vector<std::string> who_is;     // per rank: "pid <pid> on <host>", from the store
  std::unique_ptr<ShmAllReduce> shm;   // every rank on this host: the float all-reduces of tags >= kShmTags

  std::string who() const {
    return "rank " + std::to_string(opt.rank) + " of " + std::to_string(opt.world_size);
  }

  std::string peer(size_t i, const std::string& addr) const {
    return "peer rank " + std::to_string(i) + " (" + (i < who_is.size() ? who_is[i] + ", " : "") + addr +
           ") closed the connection or failed";
  }

  // Which peer a Gloo message is about. Gloo names a peer "[ip]:port"; the port is the one we
  // connected to, or the peer's ephemeral one when it connected to us, so a full match names the
  // rank and otherwise the IP narrows it to the ranks on that host.
  std::string peer_in(const std::string& msg) const {
    auto host = [](const std::string& a) { return a.substr(0, a.find(']') + 1); };
    size_t at = msg.rfind('[');
    size_t close = at == std::string::npos ? at : msg.find(']', at);
    if (close == std::string::npos || close + 1 >= msg.size() || msg[close + 1] != ':') return {};  // not "[ip]:port"
    std::string addr = msg.substr(at, msg.find_first_of(" \n", at) - at);
    std::vector<int> candidates;
    for (size_t i = 0; i < peer_addr.size(); ++i) {
      if (peer_addr[i].empty()) continue;
      if (peer_addr[i] == addr) return peer(i, addr);
      if (host(peer_addr[i]) == host(addr)) candidates.push_back(static_cast<int>(i));
    }
    if (candidates.size() == 1) return peer(candidates[0], addr);
    std::string ranks;
    for (int c : candidates) ranks += (ranks.empty() ? "" : " or ") + std::to_string(c);
    return "the peer at " + addr + (ranks.empty() ? "" : " (rank " + ranks + ")") + " closed the connection or failed";
  }

  // Runs one Gloo call; its exceptions become DistError naming the op, this rank and the peer.
  template <class F>
  void guarded(const std::string& op, F&& f) {
    std::string msg;
    try {
      f();
      return;
    } catch (const DistError& e) {  // from the store, during the rendezvous
      throw DistError(op + " failed on " + who() + ": " + e.what());
    } catch (const gloo::EnforceNotMet& e) {
      msg = e.what();
    } catch (const gloo::Exception& e) {
      msg = e.what();
    }
    std::string cause = peer_in(msg);
    if (cause.empty() && msg.find("imed out") != std::string::npos)
      cause = "timed out after " + std::to_string(opt.timeout.count()) + " ms (a peer is gone, stuck or not in this collective)";
    if (cause.empty()) cause = "a peer failed";
    throw DistError(op + " failed on " + who() + ": " + cause + " [gloo: " + msg + "]");
  }

  void rendezvous() {
    if (opt.run_id.empty()) {
      // Every group on this store takes one ticket per rank; groups follow each other, so the
      // tickets of group g are g*W+1 .. (g+1)*W and its ranks agree on g without a race.
      int64_t ticket = store->add("hg/pg/tickets/" + std::to_string(opt.world_size), 1);
      run_id = "gen" + std::to_string((ticket - 1) / opt.world_size);
    } else {
      run_id = opt.run_id;
    }
    std::string ns = "hg/pg/" + run_id + "/";
    // GLOO_SOCKET_IFNAME (as in PyTorch; the first of a comma list) picks the interface instead.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    std::string iface, local = opt.local_addr;
    if (local.empty() && ifname && *ifname) iface = std::string(ifname).substr(0, std::string(ifname).find(','));
    if (local.empty() && iface.empty()) local = route_to(store->addr());
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    store->set(ns + "joined/" + std::to_string(opt.rank), "pid " + std::to_string(::getpid()) + " on " + host);
    std::vector<std::string> joined;
    for (int i = 0; i < opt.world_size; ++i) joined.push_back(ns + "joined/" + std::to_string(i));
    try {
      store->wait(joined, opt.timeout);
    } catch (const DistError&) {
      std::string missing;
      for (int i = 0; i < opt.world_size; ++i)
        if (!store->check({joined[i]})) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
      if (missing.empty()) throw;
      throw DistError("rendezvous failed on " + who() + " (run '" + run_id + "', store " + store->addr() + ":" +
                      std::to_string(store->port()) + "): rank(s) " + missing + " did not join within " +
                      std::to_string(opt.timeout.count()) + " ms");
    }
    for (int i = 0; i < opt.world_size; ++i) who_is.push_back(store->get(joined[i]));
    gloo::transport::tcp::attr attr;
    attr.hostname = local;
    attr.iface = iface;
    guarded("creating the Gloo device on " + (iface.empty() ? local : "interface " + iface),
            [&] { device = gloo::transport::tcp::CreateDevice(attr); });
    GlooStore gloo_store(*store);
    gloo::rendezvous::PrefixStore prefixed(ns + "gloo", gloo_store);
    ctx = std::make_shared<gloo::rendezvous::Context>(opt.rank, opt.world_size);
    ctx->setTimeout(opt.timeout);
    guarded("rendezvous (connecting the full mesh)", [&] { ctx->connectFullMesh(prefixed, device); });
    guarded("setting up the shared-memory all-reduce", [&] {
      shm = ShmAllReduce::join(*store, ns, opt.rank, opt.world_size, opt.timeout, who_is, opt.shared_memory);
    });
    // Gloo names a failed peer by address: key "<i>" holds rank i's pair addresses for every
    // other rank (its own omitted), in rank order, all of one size.
    peer_addr.assign(opt.world_size, "");
    for (int i = 0; i < opt.world_size; ++i) {
      if (i == opt.rank) continue;
      std::vector<char> all = prefixed.get(std::to_string(i));
      size_t each = all.size() / (opt.world_size - 1), slot = opt.rank > i ? opt.rank - 1 : opt.rank;
      try {  // best effort: only error messages use it
        auto first = all.begin() + slot * each;
        peer_addr[i] = gloo::transport::tcp::Address(std::vector<char>(first, first + each)).str();
      } catch (const std::exception&) {
      }
    }
  }

  void start() {
    if (opt.world_size < 1) throw InvalidArgument("ProcessGroup: world_size " + std::to_string(opt.world_size) + " < 1");
    if (opt.rank < 0 || opt.rank >= opt.world_size)
      throw InvalidArgument("ProcessGroup: rank " + std::to_string(opt.rank) + " outside [0, " +
                            std::to_string(opt.world_size) + ")");
    if (opt.timeout.count() <= 0)
      throw InvalidArgument("ProcessGroup: timeout " + std::to_string(opt.timeout.count()) + " ms must be > 0");
    if (opt.world_size > 1) {
      ignore_sigpipe();
      rendezvous();
    }
    else run_id = opt.run_id.empty() ? "single" : opt.run_id;
  }
};

ProcessGroup::ProcessGroup(const ProcessGroupOptions& opt) : impl_(std::make_unique<Impl>()) {
  impl_->opt = opt;
  if (opt.world_size > 1 && opt.rank >= 0 && opt.rank < opt.world_size && opt.timeout.count() > 0)
    impl_->store = std::make_shared<TcpStore>(opt.master_addr, opt.master_port, opt.rank == 0, opt.timeout);
  impl_->start();
}

ProcessGroup::ProcessGroup(const ProcessGroupOptions& opt, std::shared_ptr<TcpStore> store)
    : impl_(std::make_unique<Impl>()) {
  if (!store) throw InvalidArgument("ProcessGroup: null store");
  impl_->opt = opt;
  impl_->store = std::move(store);
  impl_->start();
}

// The context (and its pairs) goes before the device, the store last: members in reverse order.
ProcessGroup::~ProcessGroup() {
  if (!impl_) return;
  impl_->shm.reset();
  impl_->ctx.reset();
}

int ProcessGroup::rank() const { return impl_->opt.rank; }
int ProcessGroup::size() const { return impl_->opt.world_size; }
const std::string& ProcessGroup::run_id() const { return impl_->run_id; }
bool ProcessGroup::shares_memory() const { return impl_->shm != nullptr; }

void ProcessGroup::allreduce(float* data, size_t n, ReduceOp op, uint32_t tag) {
  auto& m = *impl_;
  if (n == 0) return;
  if (m.opt.world_size > 1) {
    m.guarded("allreduce of " + std::to_string(n) + " floats (tag " + std::to_string(tag) + ")", [&] {
      if (m.shm && tag >= kShmTags) return m.shm->allreduce(data, n, op);
      gloo::AllreduceOptions o(m.ctx);
      o.setOutput(data, n);
      o.setReduceFunction(reduce_fn<float>(op));
      o.setTag(tag);
      o.setTimeout(m.opt.timeout);
      gloo::allreduce(o);
    });
  }
  if (op == ReduceOp::Mean)
    for (size_t i = 0; i < n; ++i) data[i] /= static_cast<float>(m.opt.world_size);
}

double ProcessGroup::allreduce_scalar(double value, ReduceOp op) {
  auto& m = *impl_;
  if (m.opt.world_size > 1) {
    m.guarded("allreduce_scalar", [&] {
      gloo::AllreduceOptions o(m.ctx);
      o.setOutput(&value, 1);
      o.setReduceFunction(reduce_fn<double>(op));
      o.setTimeout(m.opt.timeout);
      gloo::allreduce(o);
    });
  }
  return op == ReduceOp::Mean ? value / m.opt.world_size : value;
}

void ProcessGroup::broadcast(float* data, size_t n, int root, uint32_t tag) {
  auto& m = *impl_;
  if (root < 0 || root >= m.opt.world_size)
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " + std::to_string(m.opt.world_size) + ")");
  if (m.opt.world_size == 1 || n == 0) return;
  m.guarded("broadcast of " + std::to_string(n) + " floats from rank " + std::to_string(root), [&] {
    gloo::BroadcastOptions o(m.ctx);
    o.setOutput(data, n);
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(m.opt.timeout);
    gloo::broadcast(o);
  });
}

void ProcessGroup::broadcast(std::string& bytes, int root) {
  auto& m = *impl_;
  if (root < 0 || root >= m.opt.world_size)
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " + std::to_string(m.opt.world_size) + ")");
  if (m.opt.world_size == 1) return;
  uint64_t len = bytes.size();
  m.guarded("broadcast of a string from rank " + std::to_string(root), [&] {
    gloo::BroadcastOptions o(m.ctx);
    o.setOutput(&len, 1);
    o.setRoot(root);
    o.setTimeout(m.opt.timeout);
    gloo::broadcast(o);
    if (len == 0) return bytes.clear();
    bytes.resize(len);
    gloo::BroadcastOptions d(m.ctx);
    d.setOutput(bytes.data(), len);
    d.setRoot(root);
    d.setTimeout(m.opt.timeout);
    gloo::broadcast(d);
  });
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& bytes) {
  auto& m = *impl_;
  if (m.opt.world_size == 1) return {bytes};
  std::vector<uint64_t> lens(m.opt.world_size);
  std::string all;
  m.guarded("all_gather of strings", [&] {
    uint64_t mine = bytes.size();
    gloo::AllgatherOptions o(m.ctx);
    o.setInput(&mine, 1);
    o.setOutput(lens.data(), lens.size());
    o.setTimeout(m.opt.timeout);
    gloo::allgather(o);
    uint64_t total = std::accumulate(lens.begin(), lens.end(), uint64_t{0});
    if (total == 0) return;
    all.resize(total);
    std::vector<size_t> counts(lens.begin(), lens.end());
    std::string in = bytes;  // gloo wants a non-const input buffer
    gloo::AllgathervOptions v(m.ctx);
    v.setInput(in.data(), in.size());
    v.setOutput(all.data(), counts);
    v.setTimeout(m.opt.timeout);
    gloo::allgatherv(v);
  });
  std::vector<std::string> out;
  size_t off = 0;
  for (uint64_t l : lens) {
    out.push_back(all.substr(off, l));
    off += l;
  }
  return out;
}

void ProcessGroup::barrier(const std::string& name) {
  auto& m = *impl_;
  if (m.opt.world_size == 1) return;
  m.guarded("barrier '" + name + "'", [&] {
    gloo::BarrierOptions o(m.ctx);
    o.setTimeout(m.opt.timeout);
    gloo::barrier(o);
  });
}

}  // namespace hg::training
