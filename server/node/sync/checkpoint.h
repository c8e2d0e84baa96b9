// Durable checkpoints of a synchronous run (DESIGN.md "Failure"): every K
// committed steps each daemon writes its master shard and optimizer state
// to a folder every daemon reaches (a shared file system), so that a run
// whose lost shard has no replica left goes on from the newest version
// every shard was written at, an explicit rollback instead of a failure.
//
// Layout: <root>/run-<id>/version-<v>/epoch-<e>-rank-<r>-of-<n>.ckpt, root
// = JobConfig.checkpoint_dir (the coordinator's --checkpoint_dir, job and
// incarnation). One group epoch is one history of the
// run (a rollback comes only with a new epoch), so a version is written
// whole when every rank of one epoch wrote its file: files of two
// histories are never mixed.
//
// A file: "STARCKPT", the format (4 bytes, little endian: 1), the header's
// length (4 bytes), a proto::CheckpointHeader, the shard's master values
// and then each state slot's values (float32, little endian, in the order
// of the header's ranges), and the SHA-256 of everything before it.
// Written durably (server/base/durable_file.h): a reader finds a whole
// file or none. A file that does not check is never read as a shard: its
// error names the file and what is wrong.
//
// CheckpointWriter writes them on its own thread, so that the step only
// copies the shard (a memcpy of 1/N of the state) and goes on.
//
// Thread safety: CheckpointFolder is immutable (its calls touch the file
// system only); CheckpointWriter is thread-safe.
#ifndef STARLING_SERVER_NODE_SYNC_CHECKPOINT_H_
#define STARLING_SERVER_NODE_SYNC_CHECKPOINT_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/node/telemetry/node_metrics.h"

namespace starling {
namespace node {

// One daemon's shard at one committed version.
struct ShardCheckpoint {
  uint64_t run_id = 0;
  int64_t version = 0;
  uint64_t group_epoch = 0;
  int rank = 0;
  int ranks = 1;
  uint64_t elements = 0;
  std::string optimizer;
  int state_slots = 0;
  // The shard's parts of the flat vector, [begin, end), in value order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  // Sum of the ranges' lengths values, then state_slots times as many.
  std::vector<float> master;
  std::vector<float> state;
};

// A version written whole: every rank of group epoch `epoch` (`ranks` of
// them) wrote its file.
struct WholeVersion {
  int64_t version = -1;
  uint64_t epoch = 0;
  int ranks = 0;
};

// One run's checkpoints under `root` (JobConfig.checkpoint_dir).
class CheckpointFolder {
 public:
  CheckpointFolder(std::string root, uint64_t run_id);

  const std::string& run_folder() const { return run_folder_; }
  std::string PathOf(int64_t version, uint64_t epoch, int rank,
                     int ranks) const;

  // Writes `shard` (its run must be this folder's), creating the folders.
  // The errno's code naming the file and the call.
  absl::Status Write(const ShardCheckpoint& shard) const;

  // Reads and checks rank `rank`'s file of `whole`. DataLoss naming the
  // file when it is not a whole checkpoint of that run, version, epoch and
  // rank; NotFound when it is missing.
  absl::StatusOr<ShardCheckpoint> Read(const WholeVersion& whole,
                                       int rank) const;

  // The versions written whole, newest first (none when the folder does
  // not exist). Files are named, not read: Read checks them.
  std::vector<WholeVersion> WholeVersions() const;

  // Removes the folders of versions older than the `keep` newest written
  // whole (any daemon may: a file already gone is no error). Returns how
  // many version folders it removed.
  int Prune(int keep) const;

 private:
  const uint64_t run_id_;
  const std::string run_folder_;
};

// Writes checkpoints in the background, in order. Submit copies nothing:
// the caller hands over the shard it copied.
class CheckpointWriter {
 public:
  // `metrics` is borrowed and must outlive the writer; `keep` whole
  // versions are kept per run (>= 1).
  explicit CheckpointWriter(NodeMetrics* metrics, int keep = 2);
  // Finishes what was submitted, then stops.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues `shard` for `folder`. While kMaxQueued shards wait (the disk
  // slower than the steps), waits for one to be written, until `deadline`:
  // the step is held back rather than the memory growing (the wait is
  // counted). False, and the shard is dropped (logged and counted as a
  // failure: that version is never written whole), when the writer is
  // still busy at the deadline (a file system that stopped answering).
  bool Submit(CheckpointFolder folder, ShardCheckpoint shard,
              absl::Time deadline);

  // Waits until everything submitted is written (or failed), at most
  // until `deadline`. False when it was not.
  bool Drain(absl::Time deadline);

  // The newest version this writer wrote for `run_id` (-1: none).
  int64_t written_version(uint64_t run_id) const;

  static constexpr int kMaxQueued = 2;

 private:
  struct Item {
    CheckpointFolder folder;
    ShardCheckpoint shard;
  };
  void Loop();

  NodeMetrics* const metrics_;
  const int keep_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t written_run_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_version_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread thread_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_CHECKPOINT_H_
