// StateFile: the coordinator's record of its job on local disk, written so
// that a coordinator killed at any point finds either the previous record
// or the new one, whole, when it restarts (DESIGN.md "Failure": the
// coordinator forgets nothing).
//
// A write goes to PATH.tmp, is fsync'ed, renamed over PATH, and the folder
// is fsync'ed (the rename itself durable). The file is a header line
// "starling-coordinator-state 1\n", the payload's length (8 bytes, little
// endian), its SHA-256 (32 bytes), then the payload: a serialized
// proto::CoordinatorState. A file that does not check is never taken for a
// record.
//
// Thread-compatible: one writer at a time (the coordinator's persister
// thread); Read may run while nothing writes.
#ifndef STARLING_SERVER_COORDINATOR_STATE_FILE_H_
#define STARLING_SERVER_COORDINATOR_STATE_FILE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator_state.pb.h"

namespace starling {
namespace coordinator {

class StateFile {
 public:
  explicit StateFile(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  // The record, or nullopt when PATH does not exist (a first start).
  // DataLoss naming the file when it is not a whole record (wrong header,
  // truncated, checksum or payload that does not parse); the errno's code
  // when it cannot be read.
  absl::StatusOr<std::optional<proto::CoordinatorState>> Read() const;

  // Replaces the record with `state` (see above). The errno's code, naming
  // the file and the call, when a step fails; PATH then still holds the
  // previous record.
  absl::Status Write(const proto::CoordinatorState& state) const;

 private:
  const std::string path_;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_STATE_FILE_H_
