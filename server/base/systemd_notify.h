// Service readiness for systemd units of Type=notify (sd_notify(3)): a daemon
// says READY=1 once it serves, STOPPING=1 when it begins to shut down, and
// STATUS=<text> for `systemctl status`. Outside systemd (NOTIFY_SOCKET unset)
// every call is a no-op returning OK, so binaries call these unconditionally.
//
// libsystemd reads NOTIFY_SOCKET itself at each call (the one environment
// variable read outside a main.cc: it is systemd's protocol, not a flag).
// Thread-safe: each call sends one datagram on a socket of its own.
#ifndef STARLING_SERVER_BASE_SYSTEMD_NOTIFY_H_
#define STARLING_SERVER_BASE_SYSTEMD_NOTIFY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace starling {

// Sends "READY=1" and "STATUS=<status>" (omitted when `status` is empty).
// Newlines in `status` become spaces (each line of a notification is an
// assignment). OK when NOTIFY_SOCKET is unset; InvalidArgument when it is
// malformed; Unavailable when the datagram cannot be sent (no listener).
absl::Status NotifyReady(absl::string_view status);

// Sends "STOPPING=1". Codes as NotifyReady.
absl::Status NotifyStopping();

// Sends "STATUS=<status>" alone. Codes as NotifyReady.
absl::Status NotifyStatus(absl::string_view status);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_SYSTEMD_NOTIFY_H_
