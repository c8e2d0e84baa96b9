// NotifyReady/NotifyStopping/NotifyStatus against a datagram socket standing
// in for systemd's NOTIFY_SOCKET.
#include "server/base/systemd_notify.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

// A bound AF_UNIX datagram socket at a fresh path; NOTIFY_SOCKET points at
// it for the fixture's lifetime.
class SystemdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/starling-notify.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/notify.sock";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un address = {};
    address.sun_family = AF_UNIX;
    ASSERT_LT(path_.size(), sizeof(address.sun_path));
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
              0)
        << std::strerror(errno);
    setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }

  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }

  // The next datagram, or "" after 5 s.
  std::string Receive() {
    pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return "";
    char buffer[1024];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, n) : "";
  }

  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_F(SystemdNotifyTest, ReadySendsReadyAndStatus) {
  EXPECT_THAT(NotifyReady("rank 0 of 4"), IsOk());
  EXPECT_EQ(Receive(), "READY=1\nSTATUS=rank 0 of 4");
}

TEST_F(SystemdNotifyTest, ReadyWithoutStatusSendsReadyAlone) {
  EXPECT_THAT(NotifyReady(""), IsOk());
  EXPECT_EQ(Receive(), "READY=1");
}

TEST_F(SystemdNotifyTest, StoppingAndStatus) {
  EXPECT_THAT(NotifyStatus("joining job demo"), IsOk());
  EXPECT_EQ(Receive(), "STATUS=joining job demo");
  EXPECT_THAT(NotifyStopping(), IsOk());
  EXPECT_EQ(Receive(), "STOPPING=1");
}

TEST_F(SystemdNotifyTest, NewlinesInStatusCannotAddAssignments) {
  EXPECT_THAT(NotifyStatus("a\nREADY=1"), IsOk());
  EXPECT_EQ(Receive(), "STATUS=a READY=1");
}

TEST_F(SystemdNotifyTest, CallsAgainAfterTheFirst) {
  // The environment is left in place (unset_environment = 0).
  EXPECT_THAT(NotifyReady("x"), IsOk());
  EXPECT_THAT(NotifyStopping(), IsOk());
  EXPECT_EQ(Receive(), "READY=1\nSTATUS=x");
  EXPECT_EQ(Receive(), "STOPPING=1");
}

TEST(SystemdNotify, NoOpWithoutNotifySocket) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_THAT(NotifyReady("ready"), IsOk());
  EXPECT_THAT(NotifyStatus("status"), IsOk());
  EXPECT_THAT(NotifyStopping(), IsOk());
}

TEST(SystemdNotify, NobodyListeningIsUnavailable) {
  const std::string path =
      absl::StrCat("/tmp/starling-notify-absent-", getpid(), ".sock");
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  absl::Status status = NotifyReady("x");
  unsetenv("NOTIFY_SOCKET");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(path));
}

TEST(SystemdNotify, RelativeSocketPathIsInvalidArgument) {
  setenv("NOTIFY_SOCKET", "relative/notify.sock", 1);
  absl::Status status = NotifyStopping();
  unsetenv("NOTIFY_SOCKET");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace starling
