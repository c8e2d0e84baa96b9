// Sending raw bytes to a gRPC service and checking its answers, for the
// malformed-request tests: a caller that sends any bytes as a unary request,
// the rules every answer must satisfy, a driver that sends a handler a
// seeded series of hostile requests (hostile_input.h) and checks each
// answer, and the bounded record of the rules broken. Also a sink that
// counts the service's log lines without printing them.
#ifndef STARLING_TESTS_SECURITY_RAW_CALLS_H_
#define STARLING_TESTS_SECURITY_RAW_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "tests/security/hostile_input.h"

namespace starling {
namespace testing_security {

// The most an error message may hold, in bytes.
constexpr size_t kMaxErrorMessageBytes = 8 << 10;
// The deadline of each call RawCaller makes.
constexpr absl::Duration kCallDeadline = absl::Seconds(5);

// Metadata of one call: (key, value) pairs, in order.
using Metadata = std::vector<std::pair<std::string, std::string>>;

// What came back from one call.
struct Answer {
  grpc::Status status;
  // The coordinator's mark (CoordinatorService::kAnsweredByKey) came back.
  bool marked = false;
  // The serialized response, when `status` is OK.
  std::string response;
};

// Unary calls with any bytes as the request (grpc::GenericStub), one at a
// time, each with a deadline. Thread-compatible.
class RawCaller {
 public:
  // Calls over `channel` (shared with the test's typed stubs).
  explicit RawCaller(std::shared_ptr<grpc::Channel> channel);
  // Shuts down and drains the completion queue.
  ~RawCaller();
  RawCaller(const RawCaller&) = delete;
  RawCaller& operator=(const RawCaller&) = delete;

  // Sends `bytes` as the request of `method` (its full name,
  // "/package.Service/Method") with `metadata`, and waits for the answer
  // or kCallDeadline. A failure of the completion queue itself is a
  // GoogleTest failure.
  Answer Call(const std::string& method, const std::string& bytes,
              const Metadata& metadata);

 private:
  grpc::GenericStub stub_;
  grpc::CompletionQueue cq_;
};

// Rule -> how often it was broken, with the first few examples, so that a
// failure says what and how without thousands of lines. Thread-compatible.
class Findings {
 public:
  // Records that `rule` was broken, as `example` shows.
  void Add(const std::string& rule, const std::string& example);
  // How many times any rule was broken.
  int total() const;
  // One line per rule broken: the count, the rule, then up to three
  // examples.
  std::string Summary() const;

 private:
  std::map<std::string, int> counts_;
  std::map<std::string, std::vector<std::string>> examples_;
};

// What every answer must satisfy, per service.
struct Rules {
  // A request that parses is answered by the service itself (the
  // coordinator marks its answers; the node admin service does not).
  bool marked = true;
  // The one code every request that parses gets, if there is one.
  std::optional<grpc::StatusCode> code;
};

// One handler: its full method name, a request it accepts, the type of its
// answer.
struct Handler {
  std::string method;
  std::unique_ptr<google::protobuf::Message> valid;
  // A default instance; not owned, lives for the program.
  const google::protobuf::Message* response_type;
};

// Counts what came back, for the test's log.
struct Tally {
  // Requests sent, and how many of them parse as the handler's request.
  int sent = 0;
  int parsed = 0;
  // grpc::StatusCode -> how many answers had it.
  std::map<int, int> codes;
};

// Sends `count` hostile variants of `handler.valid` (drawn from `seed`,
// with `plausible` as in HostileInput) through `caller` and checks every
// answer against `rules` and the limits above (error messages of at most
// kMaxErrorMessageBytes, without raw control bytes), adding what breaks
// them to `findings`. `skip` (may be null) leaves out requests that parse
// and that it returns true for; `metadata` (may be null) gives each call's
// metadata. Prints a line of the tally to stdout and returns it.
Tally Drive(
    RawCaller* caller, const Handler& handler, int count, uint64_t seed,
    const std::vector<std::string>& plausible, const Rules& rules,
    Findings* findings,
    const std::function<bool(const google::protobuf::Message&)>& skip = nullptr,
    const std::function<Metadata(HostileInput*)>& metadata = nullptr);

// A log sink's tally of a service's log lines, kept off stderr (thousands
// of refusals); those with raw control bytes are counted and the first
// kept. Thread-safe.
class LogTally {
 public:
  // Counts `line`.
  void Note(absl::string_view line);
  // The counts, and the first line with raw control bytes (escaped).
  std::string Summary() const;

 private:
  mutable absl::Mutex mu_;
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
  int raw_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_raw_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing_security
}  // namespace starling

#endif  // STARLING_TESTS_SECURITY_RAW_CALLS_H_
