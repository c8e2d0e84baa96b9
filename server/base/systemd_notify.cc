#include "server/base/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace starling {
namespace {

// One line per assignment: a newline inside `text` would start another.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r", " "}, {"\n", " "}});
}

// sd_notify returns > 0 once sent, 0 without NOTIFY_SOCKET, -errno on error.
absl::Status Notify(const std::string& state) {
  const int result = sd_notify(/*unset_environment=*/0, state.c_str());
  if (result >= 0) return absl::OkStatus();
  const char* socket = std::getenv("NOTIFY_SOCKET");
  const std::string message =
      absl::StrCat("sd_notify(", OneLine(state),
                   ") to NOTIFY_SOCKET=", socket == nullptr ? "" : socket, ": ",
                   std::strerror(-result));
  if (result == -EINVAL || result == -EAFNOSUPPORT) {
    return absl::InvalidArgumentError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

absl::Status NotifyReady(absl::string_view status) {
  if (status.empty()) return Notify("READY=1");
  return Notify(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
}

absl::Status NotifyStopping() { return Notify("STOPPING=1"); }

absl::Status NotifyStatus(absl::string_view status) {
  return Notify(absl::StrCat("STATUS=", OneLine(status)));
}

}  // namespace starling
