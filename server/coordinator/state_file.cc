#include "server/coordinator/state_file.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace coordinator {
namespace {

constexpr absl::string_view kHeader = "starling-coordinator-state 1\n";
constexpr size_t kLengthBytes = 8;
constexpr size_t kDigestBytes = SHA256_DIGEST_LENGTH;

absl::Status Errno(int err, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string Digest(absl::string_view payload) {
  unsigned char digest[kDigestBytes];
  SHA256(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest), kDigestBytes);
}

absl::Status WriteAll(int fd, absl::string_view bytes, absl::string_view path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "writing", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// The folder holding `path` ("." for a bare name).
std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::optional<proto::CoordinatorState>> StateFile::Read() const {
  const ScopedFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    return Errno(errno, "opening the coordinator state file", path_);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "reading the coordinator state file", path_);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
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
  if (Digest(payload) != absl::string_view(bytes).substr(
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
  bytes += Digest(payload);
  bytes += payload;
  const std::string tmp = path_ + ".tmp";
  {
    const ScopedFd fd(
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return Errno(errno, "creating", tmp);
    if (absl::Status written = WriteAll(fd.get(), bytes, tmp); !written.ok()) {
      return written;
    }
    if (::fsync(fd.get()) != 0) return Errno(errno, "fsync of", tmp);
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Errno(errno, absl::StrCat("renaming ", tmp, " to"), path_);
  }
  const std::string folder = FolderOf(path_);
  const ScopedFd dir(
      ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return Errno(errno, "opening the folder", folder);
  if (::fsync(dir.get()) != 0)
    return Errno(errno, "fsync of the folder", folder);
  return absl::OkStatus();
}

}  // namespace coordinator
}  // namespace starling
