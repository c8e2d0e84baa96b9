// FrameSender: how frames leave for the channel, and when writes complete.
#include "server/transport/frame_sender.h"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/completion.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {
namespace {

using ::testing::HasSubstr;

// Takes at most `budget` bytes per call (everything while it is SIZE_MAX)
// and records each call's bytes.
class RecordingChannel : public ByteChannel {
 public:
  absl::StatusOr<size_t> WriteSome(const struct iovec* iov,
                                   int count) override {
    size_t taken = 0;
    for (int i = 0; i < count && taken < budget; ++i) {
      const size_t n = std::min(iov[i].iov_len, budget - taken);
      const auto* p = static_cast<const std::byte*>(iov[i].iov_base);
      bytes.insert(bytes.end(), p, p + n);
      taken += n;
    }
    ++calls;
    return taken;
  }
  void WantWritable(bool want) override { wants_writable = want; }
  void Shutdown(bool) override {}

  size_t budget = SIZE_MAX;
  int calls = 0;
  bool wants_writable = false;
  std::vector<std::byte> bytes;
};

FrameHeader WriteHeader(size_t bytes) {
  return WriteFrameHeader(/*region=*/77, /*offset=*/8, bytes, /*imm=*/3,
                          /*seq=*/5);
}

// Decodes the frame starting at `at` in `bytes`, returning its header and
// moving `at` past its payload.
FrameHeader NextFrame(const std::vector<std::byte>& bytes, size_t* at) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + *at;
  absl::StatusOr<FrameHeader> header =
      DecodeFrameHeader(absl::MakeConstSpan(p, kFrameHeaderBytes));
  EXPECT_OK(header.status());
  if (!header.ok()) return FrameHeader();
  *at += kFrameHeaderBytes + header->length;
  return *header;
}

// A sender over a RecordingChannel.
class FrameSenderTest : public ::testing::Test {
 protected:
  // Posts control message `message` on tag 9, then a write of `data`,
  // counted in `done`.
  absl::Status PostControlThenWrite(const std::vector<std::byte>& message,
                                    const std::vector<std::byte>& data,
                                    Completion* done) {
    done->Add(1);
    return sender.PostFrameThenWrite(ControlFrameHeader(9, message.size()),
                                     message, WriteHeader(data.size()),
                                     data.data(), done);
  }

  RecordingChannel channel;
  WriteTracker tracker;
  FrameSender sender{&channel, &tracker};
};

TEST_F(FrameSenderTest, ControlThenSmallWriteLeaveInOneCallInThatOrder) {
  const std::vector<std::byte> message(40, std::byte{1});
  const std::vector<std::byte> data(4000, std::byte{2});
  Completion done;
  ASSERT_OK(PostControlThenWrite(message, data, &done));
  EXPECT_EQ(channel.calls, 1);
  EXPECT_TRUE(sender.Idle());
  EXPECT_EQ(done.pending(), 0);
  EXPECT_OK(done.Wait(absl::Now()));
  ASSERT_EQ(channel.bytes.size(),
            2 * kFrameHeaderBytes + message.size() + data.size());
  size_t at = 0;
  const FrameHeader first = NextFrame(channel.bytes, &at);
  EXPECT_EQ(first.type, FrameType::kControl);
  EXPECT_EQ(first.imm, 9u);
  const FrameHeader second = NextFrame(channel.bytes, &at);
  EXPECT_EQ(second.type, FrameType::kWrite);
  EXPECT_EQ(second.region, 77u);
  EXPECT_EQ(second.length, data.size());
  EXPECT_EQ(channel.bytes.back(), std::byte{2});
}

TEST_F(FrameSenderTest,
       WriteAfterControlCompletesOnlyOnceTheChannelTookAllOfIt) {
  channel.budget = kFrameHeaderBytes + 10;  // the control frame, not more
  const std::vector<std::byte> message(10, std::byte{1});
  const std::vector<std::byte> data(1000, std::byte{2});
  Completion done;
  ASSERT_OK(PostControlThenWrite(message, data, &done));
  EXPECT_EQ(done.pending(), 1);
  EXPECT_TRUE(channel.wants_writable);
  EXPECT_FALSE(sender.Idle());

  channel.budget = SIZE_MAX;
  ASSERT_OK(sender.Flush());
  EXPECT_EQ(done.pending(), 0);
  EXPECT_OK(done.Wait(absl::Now()));
  EXPECT_FALSE(channel.wants_writable);
  EXPECT_EQ(channel.bytes.size(),
            2 * kFrameHeaderBytes + message.size() + data.size());
}

TEST_F(FrameSenderTest, QueuedBehindEarlierFramesBothWaitTheirTurn) {
  channel.budget = 0;  // full
  const std::vector<std::byte> first(100, std::byte{7});
  Completion first_done;
  first_done.Add(1);
  ASSERT_OK(
      sender.PostWrite(WriteHeader(first.size()), first.data(), &first_done));
  Completion done;
  const std::vector<std::byte> data(8, std::byte{2});
  ASSERT_OK(PostControlThenWrite({}, data, &done));
  const int calls = channel.calls;  // the post found frames queued: no call
  EXPECT_EQ(calls, 1);
  channel.budget = SIZE_MAX;
  ASSERT_OK(sender.Flush());
  EXPECT_EQ(first_done.pending(), 0);
  EXPECT_EQ(done.pending(), 0);
  size_t at = 0;
  EXPECT_EQ(NextFrame(channel.bytes, &at).length, first.size());
  EXPECT_EQ(NextFrame(channel.bytes, &at).type, FrameType::kControl);
  EXPECT_EQ(NextFrame(channel.bytes, &at).length, data.size());
}

TEST_F(FrameSenderTest, FailedSenderFinishesTheWriteWithItsStickyError) {
  sender.Fail(absl::UnavailableError("rank 2 (h:1) lost"));
  const std::vector<std::byte> data(8, std::byte{2});
  Completion done;
  const absl::Status status = PostControlThenWrite({}, data, &done);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(done.pending(), 0);
  const absl::Status written = done.Wait(absl::Now());
  EXPECT_THAT(written, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(written.message()), HasSubstr("rank 2 (h:1) lost"));
}

}  // namespace
}  // namespace transport
}  // namespace starling
