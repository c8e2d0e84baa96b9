#include "server/coordinator/state_store.h"

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/durable_file.h"

namespace starling {
namespace coordinator {
namespace {

constexpr absl::string_view kHeader = "starling-coordinator-state 1\n";
constexpr size_t kLengthBytes = 8;
constexpr size_t kDigestBytes = 32;  // SHA-256

}  // namespace

std::string EncodeStateRecord(const proto::CoordinatorState& state) {
  const std::string payload = state.SerializeAsString();
  std::string bytes(kHeader);
  for (size_t i = 0; i < kLengthBytes; ++i) {
    bytes.push_back(static_cast<char>((payload.size() >> (8 * i)) & 0xff));
  }
  bytes += Sha256(payload);
  bytes += payload;
  return bytes;
}

absl::StatusOr<proto::CoordinatorState> DecodeStateRecord(
    absl::string_view bytes, absl::string_view where,
    absl::string_view remedy) {
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat(where, " is not a whole record (", why, "); ", remedy));
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
                                " bytes of record, it holds ",
                                bytes.size() - body));
  }
  const absl::string_view payload = bytes.substr(body);
  if (Sha256(payload) !=
      bytes.substr(kHeader.size() + kLengthBytes, kDigestBytes)) {
    return corrupt("its SHA-256 does not match");
  }
  proto::CoordinatorState state;
  if (!state.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("the record does not parse");
  }
  return state;
}

}  // namespace coordinator
}  // namespace starling
