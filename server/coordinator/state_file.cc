#include "server/coordinator/state_file.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/durable_file.h"

namespace starling {
namespace coordinator {

StateFile::StateFile(std::string path)
    : path_(std::move(path)),
      where_(absl::StrCat("the coordinator state file ", path_)) {}

absl::StatusOr<std::optional<proto::CoordinatorState>> StateFile::Read() {
  absl::StatusOr<std::string> read =
      ReadWholeFile(path_, "the coordinator state file");
  if (absl::IsNotFound(read.status())) return std::nullopt;
  if (!read.ok()) return read.status();
  return DecodeStateRecord(
      *read, where_, "move it away to start this job's coordinator afresh");
}

absl::Status StateFile::Write(const proto::CoordinatorState& state) {
  return WriteFileDurably(path_, EncodeStateRecord(state));
}

}  // namespace coordinator
}  // namespace starling
