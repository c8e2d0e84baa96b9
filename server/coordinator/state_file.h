// StateFile: the coordinator's record of its job (state_store.h) in a local
// file, written so that a coordinator killed at any point finds either the
// previous record or the new one, whole, when it restarts.
//
// A write goes to PATH.tmp, is fsync'ed, renamed over PATH, and the folder
// is fsync'ed (the rename itself durable).
#ifndef STARLING_SERVER_COORDINATOR_STATE_FILE_H_
#define STARLING_SERVER_COORDINATOR_STATE_FILE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator/state_store.h"

namespace starling {
namespace coordinator {

class StateFile : public StateStore {
 public:
  explicit StateFile(std::string path);

  const std::string& path() const { return path_; }

  // StateStore. Read: nullopt when PATH does not exist; the errno's code
  // when it cannot be read. Write: the errno's code, naming the file and
  // the call, when a step fails.
  const std::string& where() const override { return where_; }
  absl::StatusOr<std::optional<proto::CoordinatorState>> Read() override;
  absl::Status Write(const proto::CoordinatorState& state) override;

 private:
  const std::string path_;
  const std::string where_;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_STATE_FILE_H_
