// The key-value store the ranks of a training job rendezvous through: rank 0 hosts a TCP server
// at master_addr:master_port, every rank (rank 0 included) talks to it as a client. Gloo at
// Debian's version has no TCP store of its own; GlooStore adapts this one to
// gloo::rendezvous::Store (whose connectFullMesh expects get() to block until the key exists).
//
//   hg::training::TcpStore store("127.0.0.1", 29500, /*host_server=*/rank == 0, std::chrono::seconds(60));
//   store.set("ready/" + std::to_string(rank), "1");
//   store.wait({"ready/0", "ready/1"});                 // DistError after the timeout
//   std::string v = store.get("config");                // blocks until some rank sets it
//   int64_t ticket = store.add("joined", 1);            // atomic counter, returns the new value
//
// Wire format (both directions): u32 body length (little endian, at most kMaxFrameBytes), then
// the body: a request is u8 op followed by u32-length-prefixed strings (and an i64 for ADD); a
// reply is u8 status (0 ok, 1 error) followed by the payload. The server checks every length
// and closes a connection that sends a malformed frame; it never trusts what it reads.
#pragma once
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hg::training {

class TcpStoreServer;

class TcpStore {
 public:
  static constexpr uint32_t kMaxFrameBytes = 256u << 20;

  // host_server: start the server first (port 0 = an ephemeral port, see port()); a port that is
  // taken is a DistError "MASTER_PORT <port> on <addr> is already in use". Then connects,
  // retrying until `timeout` (the server may not be up yet on other ranks).
  TcpStore(const std::string& addr, int port, bool host_server, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }
  const std::string& addr() const { return addr_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void set(const std::string& key, const std::string& value);
  // Blocks until the key exists; DistError naming the key after the timeout.
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds delta to the integer stored at key (absent = 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // True when every key exists (does not block).
  bool check(const std::vector<std::string>& keys);

 private:
  std::string request(const std::string& body, std::chrono::milliseconds timeout, const std::string& what);
  void connect_locked();

  std::string addr_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mu_;  // one request at a time on the connection
  int fd_ = -1;
};

// gloo::rendezvous::Store over a TcpStore; get() blocks until the key exists (up to the store's
// timeout). Wrap it in gloo::rendezvous::PrefixStore so each run has its own keys.
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  TcpStore& store_;
};

}  // namespace hg::training
