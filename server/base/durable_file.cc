#include "server/base/durable_file.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace {

absl::Status Errno(int err, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
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

}  // namespace

std::string Sha256(absl::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest),
                     SHA256_DIGEST_LENGTH);
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteFileDurably(const std::string& path,
                              absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    const ScopedFd fd(
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return Errno(errno, "creating", tmp);
    if (absl::Status written = WriteAll(fd.get(), bytes, tmp); !written.ok()) {
      return written;
    }
    if (::fsync(fd.get()) != 0) return Errno(errno, "fsync of", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Errno(errno, absl::StrCat("renaming ", tmp, " to"), path);
  }
  const std::string folder = FolderOf(path);
  const ScopedFd dir(
      ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return Errno(errno, "opening the folder", folder);
  if (::fsync(dir.get()) != 0) {
    return Errno(errno, "fsync of the folder", folder);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what) {
  const ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " ", path, " is missing"));
    }
    return Errno(errno, absl::StrCat("opening ", what), path);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("reading ", what), path);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace starling
