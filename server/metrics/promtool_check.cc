#include "server/metrics/promtool_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace metrics {

std::string FindPromtool() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  }
  dirs.push_back("/usr/bin");
  for (const std::string& dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/promtool");
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status CheckWithPromtool(absl::string_view text) {
  const std::string promtool = FindPromtool();
  if (promtool.empty()) {
    return absl::NotFoundError(
        "promtool not found in $PATH or /usr/bin (apt-get install prometheus)");
  }
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  std::string path =
      absl::StrCat(tmpdir != nullptr ? tmpdir : "/tmp", "/metrics.XXXXXX");
  size_t written = 0;
  {
    const ScopedFd fd(::mkstemp(path.data()));
    if (!fd.valid()) {
      return absl::InternalError("cannot create a temporary file");
    }
    while (written < text.size()) {
      ssize_t n =
          ::write(fd.get(), text.data() + written, text.size() - written);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
  }
  if (written != text.size()) {
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  const std::string command =
      absl::StrCat("'", promtool, "' check metrics < '", path, "' 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot run ", command));
  }
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output.append(buffer, n);
  }
  const int status = ::pclose(pipe);
  ::unlink(path.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !output.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "promtool check metrics failed (status ", status, "): ", output));
  }
  return absl::OkStatus();
}

}  // namespace metrics
}  // namespace starling
