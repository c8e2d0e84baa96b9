// StateStore: where the coordinator records its job, so that a coordinator
// killed at any point and restarted resumes it (DESIGN.md "Failure": the
// coordinator forgets nothing). Two stores: a local file (state_file.h, the
// default when --state_file is set) and a key in an etcd cluster
// (etcd_store.h, --state_etcd) for operators who run one.
//
// Every store keeps the record framed the same way (EncodeStateRecord): a
// header line "starling-coordinator-state 1\n", the payload's length (8
// bytes, little endian), its SHA-256 (32 bytes), then the payload, a
// serialized proto::CoordinatorState. A record that does not check is never
// taken for one. A write replaces the whole record or nothing.
//
// Thread-compatible: one writer at a time (the coordinator's persister
// thread); Read runs before it starts.
#ifndef STARLING_SERVER_COORDINATOR_STATE_STORE_H_
#define STARLING_SERVER_COORDINATOR_STATE_STORE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator_state.pb.h"

namespace starling {
namespace coordinator {

class StateStore {
 public:
  virtual ~StateStore() = default;

  // The record in messages: "the coordinator state file /var/lib/...".
  virtual const std::string& where() const = 0;

  // The record, or nullopt when there is none yet (a first start).
  // DataLoss naming it when it is not a whole record; the store's error
  // (naming it) when it cannot be read.
  virtual absl::StatusOr<std::optional<proto::CoordinatorState>> Read() = 0;

  // Replaces the record with `state`. On an error (naming the store and
  // what failed) the store still holds the previous record.
  virtual absl::Status Write(const proto::CoordinatorState& state) = 0;
};

// The framed record (above).
std::string EncodeStateRecord(const proto::CoordinatorState& state);

// The record framed in `bytes`; DataLoss saying what does not check, naming
// `where` (StateStore::where) and ending with `remedy` (how to start the
// job's coordinator afresh).
absl::StatusOr<proto::CoordinatorState> DecodeStateRecord(
    absl::string_view bytes, absl::string_view where, absl::string_view remedy);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_STATE_STORE_H_
