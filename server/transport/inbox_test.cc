// Inbox driven directly, as a transport's I/O thread drives it: the cases a
// real connection reaches only by chance (parts in flight while a region is
// retired) or only from a broken peer (parts of one write that disagree).
#include "server/transport/inbox.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace {

using ::testing::HasSubstr;

Inbox::Options TestOptions(size_t max_early_bytes) {
  Inbox::Options options;
  options.rank = 0;
  options.size = 2;
  options.max_early_bytes = max_early_bytes;
  options.name = [](int rank) {
    return absl::StrCat("rank ", rank, " (test)");
  };
  return options;
}

FrameHeader Part(RegionId region, uint64_t offset, uint64_t length,
                 uint32_t seq, uint8_t parts = 1, uint32_t imm = 0) {
  FrameHeader header = WriteFrameHeader(region, offset, length, imm, seq);
  header.part_count = parts;
  return header;
}

// Receives one whole frame from rank 1, filling its payload with `fill`.
absl::Status Receive(Inbox& inbox, const FrameHeader& header,
                     std::byte fill = std::byte{1}) {
  Inbox::Landing landing;
  bool must_wait = false;
  absl::Status status = inbox.BeginWrite(1, header, &landing, &must_wait);
  if (!status.ok()) return status;
  if (must_wait) return absl::ResourceExhaustedError("must wait");
  if (landing.dst != nullptr)
    std::memset(landing.dst, static_cast<int>(fill), header.length);
  return inbox.EndWrite(1, &landing);
}

TEST(Inbox, PartsOfOneWriteThatDisagreeAreDataLoss) {
  // Found by tests/fuzz/frame_fuzzer: the first part went to another
  // (unregistered) region far past this one's end, and the write's notice
  // then claimed 8016 bytes of a 4096-byte region.
  Inbox inbox(TestOptions(1 << 20));
  std::vector<std::byte> region(4096);
  ASSERT_OK(inbox.RegisterRegion(1, absl::MakeSpan(region)));
  ASSERT_OK(Receive(inbox, Part(0x299, 8000, 16, 0, 2)));
  EXPECT_THAT(Receive(inbox, Part(1, 0, 16, 0, 2)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("rank 1 (test) sent parts of write 0 that "
                                 "disagree: region 0x299")));
  EXPECT_THAT(inbox.PeerStatus(1), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(inbox.WaitForWrite(WriteMatch{1, 1, {}}, absl::InfinitePast()),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(Inbox, ExtraOrLatePartsAreDataLoss) {
  Inbox inbox(TestOptions(1 << 20));
  std::vector<std::byte> region(64);
  ASSERT_OK(inbox.RegisterRegion(1, absl::MakeSpan(region)));
  ASSERT_OK(Receive(inbox, Part(1, 0, 8, 0)));
  EXPECT_THAT(Receive(inbox, Part(1, 8, 8, 0)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("after that write was complete")));
  Inbox other(TestOptions(1 << 20));
  ASSERT_OK(other.RegisterRegion(1, absl::MakeSpan(region)));
  ASSERT_OK(Receive(other, Part(1, 0, 8, 1, 2)));  // waits for seq 0
  ASSERT_OK(Receive(other, Part(1, 8, 8, 1, 2)));
  EXPECT_THAT(Receive(other, Part(1, 16, 8, 1, 2)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("more than 2 parts of write 1")));
}

TEST(Inbox, PieceInFlightWhenItsRegionRetiresIsDroppedAndCountedOnce) {
  Inbox inbox(TestOptions(1 << 20));
  // Part 0 of a two-part write is being received into an early piece...
  Inbox::Landing landing;
  bool must_wait = false;
  ASSERT_OK(inbox.BeginWrite(1, Part(9, 0, 100, 0, 2), &landing, &must_wait));
  ASSERT_FALSE(must_wait);
  ASSERT_NE(landing.dst, nullptr);
  EXPECT_EQ(inbox.early_bytes(), 100u);
  // ...when its region retires: the piece is kept while written into.
  inbox.RetireRegions(0, 10);
  EXPECT_EQ(inbox.early_bytes(), 100u);
  std::memset(landing.dst, 7, 100);
  ASSERT_OK(inbox.EndWrite(1, &landing));
  EXPECT_EQ(inbox.early_bytes(), 0u);
  EXPECT_EQ(inbox.stale_writes_dropped(), 0u);  // the write is not complete
  // Part 1 arrives after the retirement: dropped on arrival.
  ASSERT_OK(Receive(inbox, Part(9, 100, 100, 0, 2)));
  EXPECT_EQ(inbox.early_bytes(), 0u);
  EXPECT_EQ(inbox.stale_writes_dropped(), 1u);
  EXPECT_OK(inbox.PeerStatus(1));
}

TEST(Inbox, RetiringFreesRoomForAWaitingWrite) {
  Inbox inbox(TestOptions(100));
  ASSERT_OK(Receive(inbox, Part(20, 0, 100, 0)));
  Inbox::Landing landing;
  bool must_wait = false;
  ASSERT_OK(inbox.BeginWrite(1, Part(21, 0, 50, 1), &landing, &must_wait));
  EXPECT_TRUE(must_wait);
  int wakes = 0;
  Inbox::Options options = TestOptions(100);
  options.wake_io = [&wakes] { ++wakes; };
  Inbox woken(options);
  woken.RetireRegions(0, 1);
  EXPECT_EQ(wakes, 1);  // the I/O thread is told to retry
  inbox.RetireRegions(20, 21);
  EXPECT_EQ(inbox.stale_writes_dropped(), 1u);
  ASSERT_OK(inbox.BeginWrite(1, Part(21, 0, 50, 1), &landing, &must_wait));
  EXPECT_FALSE(must_wait);
  ASSERT_OK(inbox.EndWrite(1, &landing));
  EXPECT_EQ(inbox.early_bytes(), 50u);
}

TEST(Inbox, ARegistrationWakesTheIoThreadOnlyWhenAWriteWaitsForRoom) {
  // Every op registers two regions: waking the I/O thread for each would
  // cost a thread wake-up per registration (and per fabric or shared-memory
  // path) on every small all-reduce. Only a write held back for want of
  // room needs the I/O thread to retry it.
  int wakes = 0;
  Inbox::Options options = TestOptions(100);
  options.wake_io = [&wakes] { ++wakes; };
  Inbox inbox(options);
  std::vector<std::byte> memory(100);
  ASSERT_OK(inbox.RegisterRegion(1, absl::MakeSpan(memory)));
  ASSERT_OK(Receive(inbox, Part(2, 0, 60, 0)));  // early, fits
  ASSERT_OK(inbox.RegisterRegion(2, absl::MakeSpan(memory)));
  EXPECT_EQ(wakes, 0);

  ASSERT_OK(Receive(inbox, Part(3, 0, 100, 1)));  // early, fills the room
  Inbox::Landing landing;
  bool must_wait = false;
  ASSERT_OK(inbox.BeginWrite(1, Part(4, 0, 10, 2), &landing, &must_wait));
  ASSERT_TRUE(must_wait);
  ASSERT_OK(inbox.RegisterRegion(3, absl::MakeSpan(memory)));  // frees room
  EXPECT_EQ(wakes, 1);
  ASSERT_OK(inbox.BeginWrite(1, Part(4, 0, 10, 2), &landing, &must_wait));
  EXPECT_FALSE(must_wait);
  std::memset(landing.dst, 1, 10);
  ASSERT_OK(inbox.EndWrite(1, &landing));
  ASSERT_OK(inbox.RegisterRegion(4, absl::MakeSpan(memory)));
  EXPECT_EQ(wakes, 1);  // nothing waited since the last wake-up
  EXPECT_EQ(memory[0], std::byte{1});
}

}  // namespace
}  // namespace transport
}  // namespace starling
