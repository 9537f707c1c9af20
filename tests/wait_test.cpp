// tests/wait.h's bounded waits time out with a test failure naming what they waited for, and
// kill what they started (a child process, a command).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <optional>

#include "tests/wait.h"

namespace hg::test {
namespace {

using namespace std::chrono_literals;

TEST(WaitHelpers, GetWithinReturnsTheValueOrThrowsNamingWhatItWaitedFor) {
  std::promise<int> p;
  std::future<int> f = p.get_future();
  p.set_value(7);
  EXPECT_EQ(get_within(f, 1s, "a value that is there"), 7);
  std::promise<int> never;
  std::future<int> nf = never.get_future();
  try {
    get_within(nf, 20ms, "a promise nobody keeps");
    ADD_FAILURE() << "no WaitTimeout";
  } catch (const WaitTimeout& e) {
    EXPECT_STREQ(e.what(), "timed out after 20 ms waiting for a promise nobody keeps");
  }
}

TEST(WaitHelpers, BoolWaitsFailNamingWhatTheyWaitedFor) {
  EXPECT_NONFATAL_FAILURE((void)wait_until([] { return false; }, 20ms, "a condition that never holds"),
                          "timed out after 20 ms waiting for a condition that never holds");
  EXPECT_TRUE(wait_until([] { return true; }, 20ms, "a condition that holds"));
  static std::promise<void> never;
  static std::shared_future<void> nf = never.get_future().share();
  EXPECT_NONFATAL_FAILURE((void)ready_within(nf, 20ms, "the unset future"), "waiting for the unset future");
  static Event event;
  EXPECT_NONFATAL_FAILURE((void)event.wait(20ms, "the unset event"), "waiting for the unset event");
  event.set();
  EXPECT_TRUE(event.wait(20ms, "the set event"));
  static int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_NONFATAL_FAILURE((void)readable_within(fds[0], 20ms, "a byte on the empty pipe"),
                          "waiting for a byte on the empty pipe");
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  EXPECT_TRUE(readable_within(fds[0], 1s, "the byte written"));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(WaitHelpers, WaitpidWithinKillsAChildThatDoesNotExit) {
  static pid_t child;
  child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // bounded even if the test never kills it
    for (;;) ::pause();
  }
  static std::optional<int> status;
  EXPECT_NONFATAL_FAILURE(status = waitpid_within(child, 50ms, "a child that sleeps"),
                          "waiting for a child that sleeps (pid");
  EXPECT_FALSE(status.has_value());
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), -1) << "the child was reaped";
  const pid_t quick = ::fork();
  ASSERT_GE(quick, 0);
  if (quick == 0) ::_exit(3);
  const std::optional<int> st = waitpid_within(quick, kWaitLimit, "a child that exits 3");
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 3);
}

TEST(WaitHelpers, RunCommandReturnsTheOutputAndBoundsTheCommand) {
  const CommandRun ok = run_command("echo 'it''s' here; exit 4", 60s, "echo");
  EXPECT_EQ(ok.exit_code, 4);
  EXPECT_FALSE(ok.timed_out);
  EXPECT_EQ(ok.output, "its here\n");
  static CommandRun slow;
  EXPECT_NONFATAL_FAILURE(slow = run_command("sleep 30", 1s, "sleep 30"), "timed out after 1 s waiting for sleep 30");
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(slow.exit_code, -1);
}

}  // namespace
}  // namespace hg::test
