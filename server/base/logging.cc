#include "server/base/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace starling {
namespace {

// Process-wide logging settings. The logger is the one place where process
// state is global: every thread of every component writes to the same stderr.
std::atomic<int> min_severity{static_cast<int>(LogSeverity::kInfo)};

absl::Mutex sink_mu(absl::kConstInit);

// Never destroyed, so threads still logging during exit stay safe.
LogSinkForTesting& Sink() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sink_mu) {
  static LogSinkForTesting* const sink = new LogSinkForTesting();
  return *sink;
}

constexpr absl::string_view kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR",
                                        "FATAL"};

// Path components before the last two are noise in a log line.
absl::string_view ShortFile(absl::string_view file) {
  size_t slash = file.rfind('/');
  return slash == absl::string_view::npos ? file : file.substr(slash + 1);
}

void WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // Nowhere left to report a failing stderr.
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// The most bytes of one message logged; the rest is left out, saying so.
constexpr size_t kMaxMessageBytes = 64 * 1024;

// `message` as one line a terminal shows as it is: control bytes (a
// newline that would forge a line of its own, an escape sequence's start,
// a NUL from a peer's text) as \xNN, tabs and UTF-8 kept; cut at
// kMaxMessageBytes.
std::string OneSafeLine(absl::string_view message) {
  const size_t kept = std::min(message.size(), kMaxMessageBytes);
  std::string line;
  line.reserve(kept);
  for (size_t i = 0; i < kept; ++i) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      absl::StrAppendFormat(&line, "\\x%02x", c);
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  if (kept < message.size()) {
    absl::StrAppend(&line, "... (", message.size() - kept, " more bytes)");
  }
  return line;
}

}  // namespace

absl::string_view LogSeverityName(LogSeverity severity) {
  return kNames[static_cast<int>(severity)];
}

absl::Status ParseLogSeverity(absl::string_view text, LogSeverity* out) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (upper == "WARN") upper = "WARNING";
  for (int i = 0; i < 5; ++i) {
    if (upper == kNames[i]) {
      *out = static_cast<LogSeverity>(i);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", text,
                   "': expected one of debug, info, warning, error, fatal"));
}

void SetMinLogSeverity(LogSeverity severity) {
  // Relaxed: a level change may reach other threads a little late.
  min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(min_severity.load(std::memory_order_relaxed));
}

void SetLogSinkForTesting(LogSinkForTesting new_sink) {
  absl::MutexLock lock(&sink_mu);
  Sink() = std::move(new_sink);
}

namespace internal_logging {

LogMessage::LogMessage(const char* file, int line, LogSeverity severity)
    : file_(file), line_(line), severity_(severity) {}

LogMessage::~LogMessage() {
  const absl::Time now = absl::Now();
  const std::string line = absl::StrCat(
      LogSeverityName(severity_).substr(0, 1),
      absl::FormatTime("%Y%m%d %H:%M:%E6S", now, absl::UTCTimeZone()), " ",
      static_cast<long>(::syscall(SYS_gettid)), " ", ShortFile(file_), ":",
      line_, "] ", OneSafeLine(stream_.str()));
  bool written = false;
  {
    absl::MutexLock lock(&sink_mu);
    if (Sink()) {
      Sink()(severity_, line);
      written = true;
    }
  }
  if (!written) WriteAll(STDERR_FILENO, absl::StrCat(line, "\n"));
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace internal_logging
}  // namespace starling
