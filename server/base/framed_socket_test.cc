#include "server/base/framed_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace starling {
namespace {

class FramedSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
  }
  void TearDown() override {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  int fds_[2] = {-1, -1};
};

TEST_F(FramedSocketTest, FramesRoundTripInOrder) {
  ASSERT_TRUE(WriteFrame(fds_[0], "hello").ok());
  ASSERT_TRUE(WriteFrame(fds_[0], "").ok());
  absl::StatusOr<Frame> a = ReadFrame(fds_[1]);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->payload, "hello");
  EXPECT_FALSE(a->received_fd.valid());
  absl::StatusOr<Frame> b = ReadFrame(fds_[1]);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->payload, "");
}

TEST_F(FramedSocketTest, PassesADescriptor) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_TRUE(WriteFrame(fds_[0], "with fd", pipe_fds[1]).ok());
  absl::StatusOr<Frame> frame = ReadFrame(fds_[1]);
  ASSERT_TRUE(frame.ok()) << frame.status();
  ASSERT_TRUE(frame->received_fd.valid());
  ASSERT_EQ(::write(frame->received_fd.get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_F(FramedSocketTest, OversizedLengthIsDataLoss) {
  const unsigned char header[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::write(fds_[0], header, sizeof(header)), 4);
  EXPECT_EQ(ReadFrame(fds_[1]).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(FramedSocketTest, EndOfStreamInsideAFrameSaysSo) {
  const unsigned char header[4] = {10, 0, 0, 0};
  ASSERT_EQ(::write(fds_[0], header, sizeof(header)), 4);
  ASSERT_EQ(::write(fds_[0], "abc", 3), 3);
  ::close(fds_[0]);
  fds_[0] = -1;
  absl::Status status = ReadFrame(fds_[1]).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(status.message()).find("inside a frame"),
            std::string::npos)
      << status;
}

TEST_F(FramedSocketTest, EndOfStreamBetweenFramesIsUnavailable) {
  ::close(fds_[0]);
  fds_[0] = -1;
  EXPECT_EQ(ReadFrame(fds_[1]).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace starling
