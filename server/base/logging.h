// A small leveled logger: one line per message on stderr, with severity,
// wall-clock time (UTC, microseconds), thread id and source location:
//
//   I20261122 20:49:18.123456 4711 node_daemon.cc:42] joined group as rank 3
//
//   STARLING_LOG(INFO) << "joined group as rank " << rank;
//   STARLING_LOG(WARNING) << ...;   STARLING_LOG(ERROR) << ...;
//   STARLING_VLOG(DEBUG) << ...;    // same as STARLING_LOG(DEBUG)
//   STARLING_CHECK(ptr != nullptr) << "context";   // aborts: our own bugs only
//   STARLING_CHECK_OK(status);                      // aborts if !ok()
//
// Errors from the outside world are absl::Status, never CHECK (STYLE.md §3).
// Thread-safe: each message is written with a single write(2).
#ifndef STARLING_SERVER_BASE_LOGGING_H_
#define STARLING_SERVER_BASE_LOGGING_H_

#include <functional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace starling {

enum class LogSeverity {
  kDebug = 0,
  kInfo = 1,
  kWarning = 2,
  kError = 3,
  kFatal = 4
};

// "DEBUG", "INFO", ... and back. Parse is case-insensitive.
absl::string_view LogSeverityName(LogSeverity severity);
absl::Status ParseLogSeverity(absl::string_view text, LogSeverity* out);

// Messages below this severity are dropped (default kInfo). Set from main.cc
// (e.g. a --log_level flag); reading it is a relaxed atomic load.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

// Receives every formatted line (without the trailing newline) instead of
// stderr while installed; pass nullptr to restore stderr. For tests.
using LogSinkForTesting = std::function<void(LogSeverity, absl::string_view)>;
void SetLogSinkForTesting(LogSinkForTesting sink);

namespace internal_logging {

// Collects one message; the destructor formats and emits it (and aborts for
// kFatal).
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();

  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` compile.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal_logging
}  // namespace starling

#define STARLING_LOG_SEVERITY_DEBUG ::starling::LogSeverity::kDebug
#define STARLING_LOG_SEVERITY_INFO ::starling::LogSeverity::kInfo
#define STARLING_LOG_SEVERITY_WARNING ::starling::LogSeverity::kWarning
#define STARLING_LOG_SEVERITY_ERROR ::starling::LogSeverity::kError
#define STARLING_LOG_SEVERITY_FATAL ::starling::LogSeverity::kFatal

#define STARLING_LOG(severity)                                        \
  (STARLING_LOG_SEVERITY_##severity) < ::starling::MinLogSeverity()   \
      ? (void)0                                                       \
      : ::starling::internal_logging::Voidify() &                     \
            ::starling::internal_logging::LogMessage(                 \
                __FILE__, __LINE__, STARLING_LOG_SEVERITY_##severity) \
                .stream()

#define STARLING_VLOG(severity) STARLING_LOG(severity)

#define STARLING_CHECK(condition)                                            \
  (condition) ? (void)0                                                      \
              : ::starling::internal_logging::Voidify() &                    \
                    ::starling::internal_logging::LogMessage(                \
                        __FILE__, __LINE__, ::starling::LogSeverity::kFatal) \
                            .stream()                                        \
                        << "check failed: " #condition " "

#define STARLING_CHECK_OK(expr)                                            \
  do {                                                                     \
    const ::absl::Status starling_check_status_ = (expr);                  \
    STARLING_CHECK(starling_check_status_.ok()) << starling_check_status_; \
  } while (false)

#endif  // STARLING_SERVER_BASE_LOGGING_H_
