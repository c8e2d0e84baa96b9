#include "server/node/sync/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/durable_file.h"
#include "server/base/status_matchers.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/telemetry/node_metrics.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;

// A fresh folder per test.
std::string Root(const std::string& name) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/checkpoints-", name);
  std::filesystem::remove_all(root);
  return root;
}

// Rank `rank` of `ranks` of a 10-element model with momentum (one slot):
// owns [rank * 10 / ranks, (rank + 1) * 10 / ranks), values that tell
// rank, version and element apart, -0.0 and a NaN among them.
ShardCheckpoint Shard(int64_t version, uint64_t epoch, int rank, int ranks) {
  ShardCheckpoint s;
  s.run_id = 7;
  s.version = version;
  s.group_epoch = epoch;
  s.rank = rank;
  s.ranks = ranks;
  s.elements = 10;
  s.optimizer = "momentum";
  s.state_slots = 1;
  const uint64_t begin = rank * 10 / ranks, end = (rank + 1) * 10 / ranks;
  s.ranges.emplace_back(begin, end);
  for (uint64_t e = begin; e < end; ++e) {
    s.master.push_back(static_cast<float>(version) + 0.001f * e + rank);
    s.state.push_back(-static_cast<float>(e) / 3.0f);
  }
  s.master[0] = -0.0f;
  s.state.back() = std::nanf("");
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, WrittenShardsReadBackBitForBit) {
  const CheckpointFolder folder(Root("roundtrip"), 7);
  for (int r = 0; r < 3; ++r) ASSERT_OK(folder.Write(Shard(40, 2, r, 3)));
  const std::vector<WholeVersion> whole = folder.WholeVersions();
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].version, 40);
  EXPECT_EQ(whole[0].epoch, 2u);
  EXPECT_EQ(whole[0].ranks, 3);
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<ShardCheckpoint> read = folder.Read(whole[0], r);
    ASSERT_OK(read.status());
    const ShardCheckpoint want = Shard(40, 2, r, 3);
    EXPECT_EQ(read->ranges, want.ranges);
    EXPECT_TRUE(SameBits(read->master, want.master)) << "rank " << r;
    EXPECT_TRUE(SameBits(read->state, want.state)) << "rank " << r;
    EXPECT_EQ(read->optimizer, "momentum");
    EXPECT_EQ(read->state_slots, 1);
  }
}

// A version is whole only when every rank of one group epoch wrote it: two
// histories' files are never mixed, and a missing rank leaves it out.
TEST(Checkpoint, AVersionIsWholeOnlyWithEveryRankOfOneEpoch) {
  const CheckpointFolder folder(Root("whole"), 7);
  ASSERT_OK(folder.Write(Shard(10, 1, 0, 2)));
  ASSERT_OK(folder.Write(Shard(10, 1, 1, 2)));
  ASSERT_OK(folder.Write(Shard(20, 1, 0, 2)));  // rank 1 never wrote 20
  ASSERT_OK(folder.Write(Shard(20, 2, 1, 2)));  // another history's rank 1
  ASSERT_OK(folder.Write(Shard(30, 3, 0, 1)));  // a group of one
  const std::vector<WholeVersion> whole = folder.WholeVersions();
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].version, 30);
  EXPECT_EQ(whole[0].ranks, 1);
  EXPECT_EQ(whole[1].version, 10);
  EXPECT_EQ(whole[1].epoch, 1u);
  EXPECT_TRUE(CheckpointFolder(Root("none"), 7).WholeVersions().empty());
}

// A file that does not check is never read as a shard: a flipped byte, a
// cut tail, a file under another name; a missing one is NotFound.
TEST(Checkpoint, ADamagedFileIsNamedNeverRead) {
  const CheckpointFolder folder(Root("damaged"), 7);
  ASSERT_OK(folder.Write(Shard(10, 1, 0, 2)));
  ASSERT_OK(folder.Write(Shard(10, 1, 1, 2)));
  const WholeVersion v{10, 1, 2};
  const std::string path = folder.PathOf(10, 1, 1, 2);
  absl::StatusOr<std::string> bytes = ReadWholeFile(path, "test");
  ASSERT_OK(bytes.status());

  std::string flipped = *bytes;
  flipped[flipped.size() - 40] ^= 0x01;  // a value
  ASSERT_OK(WriteFileDurably(path, flipped));
  absl::Status read = folder.Read(v, 1).status();
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(read.message(), absl::StrCat("the checkpoint ", path,
                                         " is not whole (its SHA-256 does "
                                         "not match)"));

  ASSERT_OK(WriteFileDurably(path, bytes->substr(0, bytes->size() / 2)));
  EXPECT_THAT(folder.Read(v, 1).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));

  // Rank 0's file under rank 1's name.
  absl::StatusOr<std::string> other =
      ReadWholeFile(folder.PathOf(10, 1, 0, 2), "test");
  ASSERT_OK(other.status());
  ASSERT_OK(WriteFileDurably(path, *other));
  EXPECT_THAT(folder.Read(v, 1).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("it holds run 7 version 10 of rank 0 of 2")));

  std::filesystem::remove(path);
  EXPECT_THAT(folder.Read(v, 1).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
}

// Pruning keeps the newest whole versions and anything newer (still being
// written), and removes the rest.
TEST(Checkpoint, PruneKeepsTheNewestWholeVersions) {
  const CheckpointFolder folder(Root("prune"), 7);
  for (int64_t v : {10, 20, 30, 40}) {
    ASSERT_OK(folder.Write(Shard(v, 1, 0, 2)));
    ASSERT_OK(folder.Write(Shard(v, 1, 1, 2)));
  }
  ASSERT_OK(folder.Write(Shard(50, 1, 0, 2)));  // rank 1 still writing
  EXPECT_EQ(folder.Prune(2), 2);                // 10 and 20
  const std::vector<WholeVersion> whole = folder.WholeVersions();
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].version, 40);
  EXPECT_EQ(whole[1].version, 30);
  EXPECT_TRUE(std::filesystem::exists(folder.PathOf(50, 1, 0, 2)));
  EXPECT_FALSE(std::filesystem::exists(folder.run_folder() + "/version-10"));
  EXPECT_EQ(folder.Prune(2), 0);
}

TEST(CheckpointWriter, WritesInTheBackgroundAndCountsIt) {
  metrics::MetricsRegistry registry;
  absl::StatusOr<NodeMetrics> metrics = NodeMetrics::Register(&registry);
  ASSERT_OK(metrics.status());
  const std::string root = Root("writer");
  {
    CheckpointWriter writer(&*metrics, /*keep=*/2);
    EXPECT_EQ(writer.written_version(7), -1);
    for (int64_t v : {5, 10, 15}) {
      EXPECT_TRUE(writer.Submit(CheckpointFolder(root, 7), Shard(v, 1, 0, 1),
                                absl::Now() + absl::Seconds(30)));
    }
    ASSERT_TRUE(writer.Drain(absl::Now() + absl::Seconds(30)));
    EXPECT_EQ(writer.written_version(7), 15);
    EXPECT_EQ(writer.written_version(8), -1);
  }
  EXPECT_EQ(metrics->checkpoints_written->value(), 3);
  EXPECT_EQ(metrics->checkpoint_failures->value(), 0);
  EXPECT_EQ(metrics->checkpoint_version->value(), 15);
  EXPECT_EQ(metrics->checkpoint_bytes->value(), 3 * 20 * sizeof(float));
  const std::vector<WholeVersion> whole =
      CheckpointFolder(root, 7).WholeVersions();
  ASSERT_EQ(whole.size(), 2u);  // 5 pruned
  EXPECT_EQ(whole[0].version, 15);

  // A folder that cannot be made: counted and logged, nothing else.
  CheckpointWriter failing(&*metrics);
  EXPECT_TRUE(failing.Submit(CheckpointFolder("/proc/starling-no-such", 7),
                             Shard(5, 1, 0, 1),
                             absl::Now() + absl::Seconds(30)));
  ASSERT_TRUE(failing.Drain(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(metrics->checkpoint_failures->value(), 1);
  EXPECT_EQ(failing.written_version(7), -1);
}

// A file system that stops answering holds the writer: a step waits for
// room no longer than its deadline, and the checkpoint is dropped, counted.
TEST(CheckpointWriter, AStuckWriterDropsCheckpointsAtTheDeadline) {
  metrics::MetricsRegistry registry;
  absl::StatusOr<NodeMetrics> metrics = NodeMetrics::Register(&registry);
  ASSERT_OK(metrics.status());
  const CheckpointFolder folder(Root("stuck"), 7);
  // Version 5's temporary file is a FIFO nobody reads: opening it for
  // writing blocks, as a hung NFS mount would.
  const std::string path = folder.PathOf(5, 1, 0, 1);
  std::filesystem::create_directories(FolderOf(path));
  const std::string tmp = path + ".tmp";
  ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
  {
    CheckpointWriter writer(&*metrics);
    const absl::Time later = absl::Now() + absl::Seconds(30);
    ASSERT_TRUE(writer.Submit(folder, Shard(5, 1, 0, 1), later));  // stuck
    // At most kMaxQueued wait in the queue (one fewer while the writer has
    // not yet taken version 5 off it): the others find no room in time.
    int accepted = 0;
    for (int64_t v : {10, 15, 20}) {
      accepted += writer.Submit(folder, Shard(v, 1, 0, 1),
                                absl::Now() + absl::Milliseconds(200))
                      ? 1
                      : 0;
    }
    EXPECT_GE(accepted, CheckpointWriter::kMaxQueued - 1);
    EXPECT_LE(accepted, CheckpointWriter::kMaxQueued);
    EXPECT_EQ(metrics->checkpoint_failures->value(), 3 - accepted);
    EXPECT_GT(metrics->checkpoint_wait_seconds->value(), 0.15);
    // The file system answers again: the writer goes on.
    const int reader = ::open(tmp.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(reader, 0);
    ASSERT_TRUE(writer.Drain(absl::Now() + absl::Seconds(30)));
    ::close(reader);
  }
}

}  // namespace
}  // namespace node
}  // namespace starling
