// Raw calls and the checks on their answers (raw_calls.h).
#include "tests/security/raw_calls.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_service.h"

namespace starling {
namespace testing_security {
namespace {

namespace pb = ::google::protobuf;
using coordinator::CoordinatorService;

// `bytes` C-escaped and quoted, cut after `max` bytes (then with its size).
std::string Shown(const std::string& bytes, size_t max) {
  return absl::StrCat(
      "\"", absl::CHexEscape(bytes.substr(0, max)), "\"",
      bytes.size() > max ? absl::StrCat("... (", bytes.size(), " bytes)") : "");
}

// Checks one answer of `handler` to a request (`parsed`: whether it parses
// as the handler's request; `shown_input`: how a finding shows it) against
// `rules`, adding what breaks them to `findings`.
void CheckAnswer(const Handler& handler, const std::string& shown_input,
                 bool parsed, const Answer& answer, const Rules& rules,
                 Findings* findings) {
  const grpc::Status& status = answer.status;
  const std::string name = handler.method.substr(handler.method.rfind('/') + 1);
  const auto add = [&](absl::string_view rule) {
    findings->Add(absl::StrCat(rule, " [", name, "]"),
                  absl::StrCat(shown_input, " => code ", status.error_code(),
                               " ", Shown(status.error_message(), 200), " (",
                               status.error_message().size(), " bytes)"));
  };
  const bool metadata_limit =
      status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      absl::StrContains(status.error_message(), "metadata size exceeds");
  if (!parsed) {
    // gRPC refuses it before the handler, with INTERNAL (and, in gRPC
    // 1.51, an empty message: nothing of the services' to check).
    if (metadata_limit) {
      add("an answer the caller cannot receive, after an oversized one on "
          "the same connection (RESOURCE_EXHAUSTED: metadata limit)");
    } else if (status.error_code() != grpc::StatusCode::INTERNAL) {
      add("a request that does not parse not refused by gRPC (INTERNAL)");
    }
    if (answer.marked) add("a request that does not parse reached the handler");
    return;
  }
  if (rules.marked && !answer.marked) {
    if (metadata_limit) {
      add("an error message too large for the caller to receive (over "
          "gRPC's 8 KiB metadata limit: the caller gets RESOURCE_EXHAUSTED "
          "instead of the coordinator's answer)");
    } else {
      add("a request that parses not answered by the coordinator itself "
          "(hang past the deadline, or refused before the handler)");
    }
  }
  if (rules.code.has_value() && status.error_code() != *rules.code) {
    add(absl::StrCat("a request that parses not answered with code ",
                     *rules.code));
  }
  if (status.ok()) {
    std::unique_ptr<pb::Message> response(handler.response_type->New());
    if (!response->ParseFromString(answer.response)) {
      add("an OK answer that is not its response type");
    }
    return;
  }
  const std::string& message = status.error_message();
  if (message.empty()) add("an error without a message");
  if (message.size() > kMaxErrorMessageBytes) {
    add("an error message over 8 KiB");
  }
  if (std::any_of(message.begin(), message.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    add("raw control bytes in an error message");
  }
}

}  // namespace

RawCaller::RawCaller(std::shared_ptr<grpc::Channel> channel)
    : stub_(std::move(channel)) {}

RawCaller::~RawCaller() {
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

Answer RawCaller::Call(const std::string& method, const std::string& bytes,
                       const Metadata& metadata) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
  for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  Answer answer;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub_.PrepareUnaryCall(&context, method, request, &cq_);
  call->StartCall();
  int tag = 0;
  call->Finish(&reply, &answer.status, &tag);
  void* got = nullptr;
  bool ok = false;
  // Returns when this call completed: answered, or at its deadline.
  EXPECT_TRUE(cq_.Next(&got, &ok));
  EXPECT_EQ(got, &tag);
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto mark = trailers.find(CoordinatorService::kAnsweredByKey);
  answer.marked = mark != trailers.end() && mark->second == "coordinator";
  if (answer.status.ok()) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(reply.Dump(&slices).ok());
    for (const grpc::Slice& s : slices) {
      answer.response.append(reinterpret_cast<const char*>(s.begin()),
                             s.size());
    }
  }
  return answer;
}

void Findings::Add(const std::string& rule, const std::string& example) {
  if (++counts_[rule] <= 3) examples_[rule].push_back(example);
}

int Findings::total() const {
  int n = 0;
  for (const auto& [rule, count] : counts_) n += count;
  return n;
}

std::string Findings::Summary() const {
  std::string out;
  for (const auto& [rule, count] : counts_) {
    absl::StrAppend(&out, "\n", count, " x ", rule);
    for (const std::string& e : examples_.at(rule)) {
      absl::StrAppend(&out, "\n    e.g. ", e);
    }
  }
  return out;
}

// Request i is of kind i % 10: two of random bytes, two of random wire
// format, three byte-mutated valid requests, three field-mutated ones; so
// any `count` of ten or more sends every kind.
Tally Drive(RawCaller* caller, const Handler& handler, int count, uint64_t seed,
            const std::vector<std::string>& plausible, const Rules& rules,
            Findings* findings,
            const std::function<bool(const pb::Message&)>& skip,
            const std::function<Metadata(HostileInput*)>& metadata) {
  HostileInput input(seed, plausible);
  const pb::Descriptor& type = *handler.valid->GetDescriptor();
  Tally tally;
  std::unique_ptr<pb::Message> mutated(handler.valid->New());
  std::unique_ptr<pb::Message> parsed(handler.valid->New());
  for (int i = 0; i < count; ++i) {
    std::string bytes;
    std::string kind;
    switch (i % 10) {
      case 0:
      case 1:
        kind = "random bytes";
        bytes = input.RandomBytes(input.OneIn(4) ? 4096 : 64);
        break;
      case 2:
      case 3:
        kind = "random wire format";
        bytes = input.RandomWire(0);
        break;
      case 4:
      case 5:
      case 6:
        kind = "byte mutations of a valid request";
        mutated->CopyFrom(*handler.valid);
        if (input.OneIn(2)) input.MutateFields(mutated.get(), 1);
        bytes = input.MutateBytes(mutated->SerializeAsString(), type);
        break;
      default:
        kind = "field mutations of a valid request";
        mutated->CopyFrom(*handler.valid);
        input.MutateFields(mutated.get(), 1 + static_cast<int>(input.Below(4)));
        bytes = mutated->SerializeAsString();
    }
    const bool parses = parsed->ParseFromString(bytes);
    if (parses && skip != nullptr && skip(*parsed)) continue;
    const Answer answer = caller->Call(
        handler.method, bytes, metadata ? metadata(&input) : Metadata());
    ++tally.sent;
    tally.parsed += parses ? 1 : 0;
    ++tally.codes[answer.status.error_code()];
    CheckAnswer(handler, absl::StrCat(kind, " #", i, " ", Shown(bytes, 48)),
                parses, answer, rules, findings);
  }
  std::string codes;
  for (const auto& [code, n] : tally.codes) {
    absl::StrAppend(&codes, " code ", code, ": ", n, ";");
  }
  std::cout << handler.method << ": " << tally.sent << " sent, " << tally.parsed
            << " parsed;" << codes << std::endl;
  return tally;
}

void LogTally::Note(absl::string_view line) {
  absl::MutexLock lock(&mu_);
  ++lines_;
  if (std::any_of(line.begin(), line.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    if (raw_++ == 0) first_raw_ = std::string(line.substr(0, 300));
  }
}

std::string LogTally::Summary() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat(
      lines_, " log lines, ", raw_, " with raw control bytes",
      raw_ > 0 ? absl::StrCat(", first: ", Shown(first_raw_, 200)) : "");
}

}  // namespace testing_security
}  // namespace starling
