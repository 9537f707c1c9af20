// TcpStore: the rendezvous key-value store rank 0 hosts (training/tcp_store.h).
#include "training/tcp_store.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <random>
#include <thread>

#include "tests/errors.h"
#include "tests/wait.h"
#include "training/process_group.h"

namespace hg::training {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// The timeout of stores whose waits are expected to succeed (normally within milliseconds).
constexpr std::chrono::milliseconds kStoreTimeout = hg::test::kWaitLimit;

// Sends raw bytes to the server and closes the connection.
void send_raw(int port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  ::shutdown(fd, SHUT_WR);  // a truncated frame ends here
  char c;
  EXPECT_TRUE(hg::test::readable_within(fd, hg::test::kWaitLimit, "the store to close a connection that sent garbage"));
  EXPECT_EQ(::recv(fd, &c, 1, MSG_DONTWAIT), 0);  // the server closed the connection without answering
  ::close(fd);
}

TEST(TcpStoreTest, SetGetAddCheckWait) {
  TcpStore server("127.0.0.1", 0, true, kStoreTimeout);
  TcpStore client("127.0.0.1", server.port(), false, kStoreTimeout);
  server.set("a", "alpha");
  EXPECT_EQ(client.get("a"), "alpha");
  client.set("a", std::string("b\0c", 3));
  EXPECT_EQ(server.get("a"), std::string("b\0c", 3));
  EXPECT_TRUE(client.check({"a"}));
  EXPECT_FALSE(client.check({"a", "missing"}));
  EXPECT_EQ(client.add("n", 5), 5);
  EXPECT_EQ(server.add("n", -2), 3);
  EXPECT_EQ(client.get("n"), "3");
  client.wait({"a", "n"});
  EXPECT_THAT(hg::test::error_of<DistError>([&] { client.add("a", 1); }), HasSubstr("not an integer"));
}

TEST(TcpStoreTest, GetBlocksUntilAnotherClientSets) {
  TcpStore server("127.0.0.1", 0, true, kStoreTimeout);
  TcpStore client("127.0.0.1", server.port(), false, kStoreTimeout);
  auto waiter = std::async(std::launch::async, [&] { return client.get("late"); });
  auto waiter2 = std::async(std::launch::async, [&] {
    TcpStore c2("127.0.0.1", server.port(), false, kStoreTimeout);
    c2.wait({"late", "later"});
  });
  // Not synchronisation: the gets are likelier to be blocked in the server by then; either way
  // they must return what is set below.
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(server.check({"late"}));
  server.set("late", "here");
  EXPECT_EQ(hg::test::get_within(waiter, hg::test::kWaitLimit, "get('late') to return after set"), "here");
  server.set("later", "x");
  hg::test::get_within(waiter2, hg::test::kWaitLimit, "wait({'late', 'later'}) to return after both were set");
}

TEST(TcpStoreTest, GetTimesOutNamingTheKeyAndTheConnectionStaysUsable) {
  TcpStore server("127.0.0.1", 0, true, kStoreTimeout);
  TcpStore client("127.0.0.1", server.port(), false, 300ms);
  std::string e = hg::test::error_of<DistError>([&] { client.get("never"); });
  EXPECT_THAT(e, HasSubstr("'never'"));
  EXPECT_THAT(e, HasSubstr("timed out after 300 ms"));
  e = hg::test::error_of<DistError>([&] { client.wait({"k1", "k2"}, 200ms); });
  EXPECT_THAT(e, HasSubstr("'k1', 'k2'"));
  server.set("never", "now");
  EXPECT_EQ(client.get("never"), "now");  // reconnected: no stale reply from the timed-out get
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1s);
    port = probe.port();
  }
  auto early = std::async(std::launch::async, [&] {
    TcpStore client("127.0.0.1", port, false, kStoreTimeout);  // nobody listens yet: retried
    return client.get("hello");
  });
  std::this_thread::sleep_for(300ms);  // what is tested: the server starts after the client
  TcpStore server("127.0.0.1", port, true, kStoreTimeout);
  server.set("hello", "world");
  EXPECT_EQ(hg::test::get_within(early, hg::test::kWaitLimit, "the early client's get('hello')"), "world");
}

TEST(TcpStoreTest, PortInUseIsNamed) {
  TcpStore first("127.0.0.1", 0, true, kStoreTimeout);
  std::string e = hg::test::error_of<DistError>([&] { TcpStore second("127.0.0.1", first.port(), true, kStoreTimeout); });
  EXPECT_THAT(e, HasSubstr("MASTER_PORT " + std::to_string(first.port()) + " on 127.0.0.1 is already in use"));
}

TEST(TcpStoreTest, ClientWithoutServerTimesOut) {
  int port;
  {
    TcpStore gone("127.0.0.1", 0, true, 1s);
    port = gone.port();
  }
  std::string e = hg::test::error_of<DistError>([&] { TcpStore c("127.0.0.1", port, false, 300ms); });
  EXPECT_THAT(e, HasSubstr("cannot reach the store at 127.0.0.1:" + std::to_string(port)));
}

TEST(TcpStoreTest, ServerSurvivesGarbage) {
  TcpStore server("127.0.0.1", 0, true, kStoreTimeout);
  server.set("k", "v");
  send_raw(server.port(), "GARBAGE GARBAGE GARBAGE");          // length 0x42524147: too large
  send_raw(server.port(), std::string("\0\0\0\0", 4));           // empty frame
  send_raw(server.port(), std::string("\x03\0\0\0\x63xy", 7));  // unknown op 0x63
  send_raw(server.port(), std::string("\x05\0\0\0\x01\xff\xff\xff\x7f", 9));  // SET key longer than frame
  send_raw(server.port(), std::string("\x05\0\0\0\x03\xff\xff\xff\xff", 9));  // WAIT 4G keys
  send_raw(server.port(), std::string("\x10\0\0\0\x02", 5));     // truncated frame, then close
  TcpStore client("127.0.0.1", server.port(), false, kStoreTimeout);
  EXPECT_EQ(client.get("k"), "v");
}

// Frames with a plausible length and random bodies (fixed seed): each is answered or makes the
// server close that connection; the store keeps serving.
TEST(TcpStoreTest, ServerSurvivesRandomFrames) {
  TcpStore server("127.0.0.1", 0, true, kStoreTimeout);
  server.set("k", "v");
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string body(1 + rng() % 40, '\0');
    for (auto& c : body) c = static_cast<char>(rng());
    body[0] = static_cast<char>(1 + rng() % 6);  // mostly real ops (1-5), some unknown
    std::string frame;
    for (int b = 0; b < 4; ++b) frame.push_back(static_cast<char>((body.size() >> (8 * b)) & 0xff));
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    frame += body;
    ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
    ::close(fd);  // without waiting: a GET that blocks is dropped with its connection
  }
  TcpStore client("127.0.0.1", server.port(), false, kStoreTimeout);
  EXPECT_EQ(client.get("k"), "v");
  EXPECT_EQ(client.add("counter", 1), 1);
}

TEST(TcpStoreTest, ServerGoneIsAnErrorForClients) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, kStoreTimeout);
  TcpStore client("127.0.0.1", server->port(), false, kStoreTimeout);
  auto failed = std::async(std::launch::async, [&] { return hg::test::error_of<DistError>([&] { client.get("k"); }); });
  std::this_thread::sleep_for(100ms);  // likelier blocked in the server by then; the outcome is the same
  server.reset();
  EXPECT_THAT(hg::test::get_within(failed, hg::test::kWaitLimit, "get('k') to fail after the server went away"),
              HasSubstr("closed the connection"));
}

}  // namespace
}  // namespace hg::training
