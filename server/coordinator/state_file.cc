#include "server/coordinator/state_file.h"

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/base/durable_file.h"

namespace starling {
namespace coordinator {
namespace {

constexpr absl::string_view kHeader = "starling-coordinator-state 1\n";
constexpr size_t kLengthBytes = 8;
constexpr size_t kDigestBytes = 32;  // SHA-256

}  // namespace

absl::StatusOr<std::optional<proto::CoordinatorState>> StateFile::Read() const {
  absl::StatusOr<std::string> read =
      ReadWholeFile(path_, "the coordinator state file");
  if (absl::IsNotFound(read.status())) return std::nullopt;
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        "the coordinator state file ", path_, " is not a whole record (", why,
        "); move it away to start this job's coordinator afresh"));
  };
  if (!absl::StartsWith(bytes, kHeader)) {
    return corrupt("its first line is not \"starling-coordinator-state 1\"");
  }
  if (bytes.size() < kHeader.size() + kLengthBytes + kDigestBytes) {
    return corrupt(absl::StrCat(bytes.size(), " bytes: shorter than a header"));
  }
  uint64_t length = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) {
    length |= static_cast<uint64_t>(
                  static_cast<unsigned char>(bytes[kHeader.size() + i]))
              << (8 * i);
  }
  const size_t body = kHeader.size() + kLengthBytes + kDigestBytes;
  if (length != bytes.size() - body) {
    return corrupt(absl::StrCat("the header announces ", length,
                                " bytes of record, the file holds ",
                                bytes.size() - body));
  }
  const absl::string_view payload = absl::string_view(bytes).substr(body);
  if (Sha256(payload) != absl::string_view(bytes).substr(
                             kHeader.size() + kLengthBytes, kDigestBytes)) {
    return corrupt("its SHA-256 does not match");
  }
  proto::CoordinatorState state;
  if (!state.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("the record does not parse");
  }
  return state;
}

absl::Status StateFile::Write(const proto::CoordinatorState& state) const {
  const std::string payload = state.SerializeAsString();
  std::string bytes(kHeader);
  for (size_t i = 0; i < kLengthBytes; ++i) {
    bytes.push_back(static_cast<char>((payload.size() >> (8 * i)) & 0xff));
  }
  bytes += Sha256(payload);
  bytes += payload;
  return WriteFileDurably(path_, bytes);
}

}  // namespace coordinator
}  // namespace starling
