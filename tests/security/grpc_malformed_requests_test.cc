// Malformed and hostile messages against the control plane's real gRPC
// services, sent the way a fuzzer sends them but bounded and deterministic
// (fixed seeds, a fixed number per handler), over a real channel on
// 127.0.0.1. It proves that:
//  - the coordinator (Coordinator + CoordinatorService) answers every
//    request of each of its eight handlers, whatever it holds (random bytes,
//    random wire format, byte mutations of valid requests including invalid
//    UTF-8 in string fields, fields set to extremes, 1 MiB strings, control
//    bytes, thousands of repeated entries): no crash, no hang; a request that
//    parses reaches the handler and is answered by the coordinator itself,
//    one that does not parse is refused before it;
//  - every error it answers has a message of at most 8 KiB without raw
//    control bytes, so that what a caller sends can neither swell an answer
//    nor rewrite the terminal of whoever reads the error;
//  - afterwards its real members are unaffected and still work; hostile
//    Joins take no slot in a forming group; with a cluster secret no call
//    without a credential reaches its state;
//  - the node admin service of a daemon still joining answers UNAVAILABLE to
//    whatever it is sent.
// A crash fails the test: everything runs in this process.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/base/clock.h"
#include "server/base/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/node_admin_service.h"

namespace starling {
namespace {

namespace pb = ::google::protobuf;
using coordinator::Coordinator;
using coordinator::CoordinatorOptions;
using coordinator::CoordinatorService;

constexpr char kJob[] = "fuzz-job";
// The most an error message may hold, and the largest request sent (below
// gRPC's default 4 MiB limit on a received message, which would refuse
// the call before the handler).
constexpr size_t kMaxErrorMessageBytes = 8 << 10;
constexpr size_t kMaxRequestBytes = 3 << 20;
constexpr absl::Duration kCallDeadline = absl::Seconds(5);

using Metadata = std::vector<std::pair<std::string, std::string>>;

// --- Hostile input ----------------------------------------------------------

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Byte strings that are not UTF-8: proto3 refuses them in a string field.
const char* const kInvalidUtf8[] = {"\xff",       "\xc0\x80", "\xed\xa0\x80",
                                    "ok\xe2\x82", "\x80\x80", "a\xfe\xffz"};

// Draws every kind of input from one std::mt19937_64, so a seed fixes them.
class HostileInput {
 public:
  // `plausible`: values that pass a handler's first checks (the job id,
  // the version), so that mutations reach further.
  HostileInput(uint64_t seed, std::vector<std::string> plausible)
      : rng_(seed), plausible_(std::move(plausible)) {}

  uint64_t Below(uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }
  bool OneIn(uint64_t n) { return Below(n) == 0; }

  std::string RandomBytes(size_t max_bytes) {
    std::string out(Below(max_bytes + 1), '\0');
    for (char& c : out) c = static_cast<char>(Below(256));
    return out;
  }

  std::string Printable(size_t bytes) {
    std::string out(bytes, ' ');
    for (char& c : out) c = static_cast<char>(0x20 + Below(0x5f));
    return out;
  }

  // Protobuf wire format with random field numbers (mostly the ones the
  // messages use), wire types (sometimes invalid), extreme varints and
  // lengths that sometimes lie.
  std::string RandomWire(int depth) {
    std::string out;
    const int fields = static_cast<int>(Below(8));
    for (int i = 0; i < fields; ++i) {
      const uint64_t number =
          OneIn(8) ? Below(uint64_t{1} << 29) : 1 + Below(12);
      static constexpr int kUsual[] = {0, 1, 2, 5};
      const int type =
          OneIn(10) ? static_cast<int>(Below(8)) : kUsual[Below(4)];
      AppendVarint(&out, (number << 3) | type);
      switch (type) {
        case 0:
          AppendVarint(&out, static_cast<uint64_t>(ExtremeInt64()));
          break;
        case 1:
          out += RandomBytes(8).append(8, '\0').substr(0, 8);
          break;
        case 5:
          out += RandomBytes(4).append(4, '\0').substr(0, 4);
          break;
        case 2: {
          std::string payload;
          switch (Below(3)) {
            case 0:
              payload = Printable(Below(64));
              break;
            case 1:
              payload = depth < 3 ? RandomWire(depth + 1) : "";
              break;
            default:
              payload = RandomBytes(64);
          }
          AppendVarint(&out, OneIn(16) ? payload.size() + 1 + Below(1 << 20)
                                       : payload.size());
          out += payload;
          break;
        }
        default:
          break;  // groups and invalid types: no payload
      }
    }
    return out;
  }

  // One to four byte-level edits of `bytes` (a serialized request of
  // `type`): bit flips, overwrites, inserts, cuts, duplicated slices, and a
  // string field appended holding invalid UTF-8 (the raw-bytes path: a
  // protobuf client cannot send that through a typed stub).
  std::string MutateBytes(std::string bytes, const pb::Descriptor& type) {
    const int edits = 1 + static_cast<int>(Below(4));
    for (int e = 0; e < edits; ++e) {
      const size_t size = bytes.size();
      switch (Below(7)) {
        case 0:
          if (size > 0) bytes[Below(size)] ^= static_cast<char>(1 << Below(8));
          break;
        case 1:
          if (size > 0) bytes[Below(size)] = static_cast<char>(Below(256));
          break;
        case 2:
          bytes.insert(Below(size + 1), RandomBytes(16));
          break;
        case 3:
          if (size > 0) {
            const size_t at = Below(size);
            bytes.erase(at, 1 + Below(size - at));
          }
          break;
        case 4:
          bytes.resize(size > 0 ? Below(size) : 0);
          break;
        case 5:
          if (size > 0) {
            const size_t at = Below(size);
            const std::string slice = bytes.substr(at, 1 + Below(size - at));
            bytes.insert(Below(size + 1), slice);
          }
          break;
        default: {
          std::vector<int> strings;
          for (int i = 0; i < type.field_count(); ++i) {
            if (type.field(i)->type() == pb::FieldDescriptor::TYPE_STRING) {
              strings.push_back(type.field(i)->number());
            }
          }
          const int number =
              strings.empty() ? 1 : strings[Below(strings.size())];
          const std::string payload =
              kInvalidUtf8[Below(std::size(kInvalidUtf8))];
          AppendVarint(&bytes, (static_cast<uint64_t>(number) << 3) | 2);
          AppendVarint(&bytes, payload.size());
          bytes += payload;
        }
      }
    }
    return bytes;
  }

  // `mutations` field-level edits of `message` (any request type, through
  // reflection): scalars to extremes, strings hostile, enums to unknown
  // values, sub-messages cleared or edited, repeated fields cleared or
  // grown (sometimes by thousands of entries). An edit that would make the
  // request larger than kMaxRequestBytes is undone.
  void MutateFields(pb::Message* message, int mutations) {
    std::unique_ptr<pb::Message> before(message->New());
    for (int i = 0; i < mutations; ++i) {
      before->CopyFrom(*message);
      MutateField(message, /*depth=*/0, /*bulk_allowed=*/true);
      if (message->ByteSizeLong() > kMaxRequestBytes)
        message->CopyFrom(*before);
    }
  }

  // Printable ASCII of `bytes` (a credential, a host name in metadata).
  std::string MetadataValue() {
    if (OneIn(3)) {
      // Shaped like a credential (call_credential.h), but made up.
      static constexpr char kHex[] = "0123456789abcdef";
      std::string nonce(32, '0'), mac(64, '0');
      for (char& c : nonce) c = kHex[Below(16)];
      for (char& c : mac) c = kHex[Below(16)];
      return absl::StrCat("v2 member ", absl::ToUnixMillis(absl::Now()), " ",
                          nonce, " ", mac);
    }
    return Printable(Below(OneIn(8) ? 4096 : 64));
  }

 private:
  int64_t ExtremeInt64() {
    static constexpr int64_t kValues[] = {
        std::numeric_limits<int64_t>::min(),
        std::numeric_limits<int64_t>::min() + 1,
        -1,
        0,
        1,
        2,
        std::numeric_limits<int32_t>::max(),
        std::numeric_limits<int64_t>::max()};
    if (OneIn(4)) return static_cast<int64_t>(rng_());
    return kValues[Below(std::size(kValues))];
  }
  int32_t ExtremeInt32() {
    static constexpr int32_t kValues[] = {
        std::numeric_limits<int32_t>::min(), -2, -1, 0, 1, 4096, 4097,
        std::numeric_limits<int32_t>::max()};
    if (OneIn(4)) return static_cast<int32_t>(rng_());
    return kValues[Below(std::size(kValues))];
  }
  uint64_t ExtremeUint64() {
    static constexpr uint64_t kValues[] = {
        0,
        1,
        2,
        uint64_t{1} << 63,
        std::numeric_limits<uint64_t>::max() - 1,
        std::numeric_limits<uint64_t>::max()};
    if (OneIn(4)) return rng_();
    return kValues[Below(std::size(kValues))];
  }
  double ExtremeDouble() {
    static constexpr double kValues[] = {
        std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(),
        -0.0,
        -1.0,
        std::numeric_limits<double>::max(),
        std::numeric_limits<double>::denorm_min(),
        0.5};
    return kValues[Below(std::size(kValues))];
  }

  // `short_only`: at most a few hundred bytes (inside thousands of entries).
  std::string HostileString(bool short_only) {
    switch (Below(13)) {
      case 0:
        return "";
      case 1:
      case 2:
        return plausible_[Below(plausible_.size())];
      case 3:
        return "\x1b[2J\x1b[H\x1b[31mowned\x07";
      case 4:
        return "\x1b]0;pwned\x07\r\nI0101 00:00:00 forged log line\n";
      case 5:
        return std::string("nul\0inside", 10);
      case 6:
        return "\x7f\b\b\b\t\v\f";
      case 7:
        // Valid UTF-8, not ASCII: a right-to-left override and a C1 CSI.
        return "\xe2\x80\xae"
               "evil"
               "\xc2\x9b"
               "31m";
      case 8: {
        std::string mixed = Printable(1 + Below(64));
        for (char& c : mixed) {
          if (OneIn(3)) c = static_cast<char>(1 + Below(0x1f));
        }
        return mixed;
      }
      case 9:
        return short_only ? Printable(300) : std::string(4097, 'e');
      case 10:
        return short_only ? Printable(16) : std::string(8193, 'k');
      case 11:
        if (!short_only && OneIn(4)) {
          return std::string(1 << 20, 'M') + "\x1b[0m";
        }
        return Printable(Below(300));
      default:
        return Printable(Below(300));
    }
  }

  void SetSingular(pb::Message* m, const pb::FieldDescriptor* f, int depth,
                   bool bulk_allowed) {
    const pb::Reflection* r = m->GetReflection();
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32:
        r->SetInt32(m, f, ExtremeInt32());
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(m, f, ExtremeInt64());
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(m, f, static_cast<uint32_t>(ExtremeUint64()));
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(m, f, ExtremeUint64());
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        r->SetDouble(m, f, ExtremeDouble());
        break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        r->SetFloat(m, f, static_cast<float>(ExtremeDouble()));
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(m, f, !r->GetBool(*m, f));
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        // proto3 enums are open: unknown numbers are kept.
        r->SetEnumValue(m, f, OneIn(2) ? ExtremeInt32() : Below(10));
        break;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        r->SetString(m, f,
                     f->type() == pb::FieldDescriptor::TYPE_BYTES
                         ? RandomBytes(64)
                         : HostileString(!bulk_allowed));
        break;
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        if (depth < 3 && !OneIn(4)) {
          MutateField(r->MutableMessage(m, f), depth + 1, bulk_allowed);
        } else {
          r->ClearField(m, f);
        }
        break;
    }
  }

  void AddEntry(pb::Message* m, const pb::FieldDescriptor* f, int depth,
                bool bulk_allowed) {
    const pb::Reflection* r = m->GetReflection();
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32:
        r->AddInt32(m, f, ExtremeInt32());
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        r->AddInt64(m, f, ExtremeInt64());
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        r->AddUInt32(m, f, static_cast<uint32_t>(ExtremeUint64()));
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        r->AddUInt64(m, f, ExtremeUint64());
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        r->AddDouble(m, f, ExtremeDouble());
        break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        r->AddFloat(m, f, static_cast<float>(ExtremeDouble()));
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        r->AddBool(m, f, OneIn(2));
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        r->AddEnumValue(m, f, static_cast<int>(Below(10)));
        break;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        r->AddString(m, f, HostileString(!bulk_allowed));
        break;
      case pb::FieldDescriptor::CPPTYPE_MESSAGE: {
        pb::Message* entry = r->AddMessage(m, f);
        if (depth < 3 && !OneIn(3)) MutateField(entry, depth + 1, bulk_allowed);
        break;
      }
    }
  }

  void MutateField(pb::Message* m, int depth, bool bulk_allowed) {
    const pb::Descriptor* d = m->GetDescriptor();
    if (d->field_count() == 0) return;
    const pb::FieldDescriptor* f = d->field(Below(d->field_count()));
    const pb::Reflection* r = m->GetReflection();
    if (!f->is_repeated()) {
      SetSingular(m, f, depth, bulk_allowed);
      return;
    }
    switch (Below(4)) {
      case 0:
        r->ClearField(m, f);
        break;
      case 1:
        if (bulk_allowed) {
          // Thousands of entries, each small and without bulk of its own.
          const int n = 2000 + static_cast<int>(Below(3000));
          for (int i = 0; i < n; ++i) AddEntry(m, f, depth, false);
          break;
        }
        [[fallthrough]];
      default: {
        const int n = 1 + static_cast<int>(Below(3));
        for (int i = 0; i < n; ++i) AddEntry(m, f, depth, bulk_allowed);
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<std::string> plausible_;
};

// --- Sending raw bytes and checking answers ---------------------------------

struct Answer {
  grpc::Status status;
  // The coordinator's mark (CoordinatorService::kAnsweredByKey) came back.
  bool marked = false;
  std::string response;
};

// Unary calls with any bytes as the request (grpc::GenericStub), one at a
// time, each with a deadline. Thread-compatible.
class RawCaller {
 public:
  explicit RawCaller(std::shared_ptr<grpc::Channel> channel)
      : stub_(std::move(channel)) {}
  ~RawCaller() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  RawCaller(const RawCaller&) = delete;
  RawCaller& operator=(const RawCaller&) = delete;

  Answer Call(const std::string& method, const std::string& bytes,
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

 private:
  grpc::GenericStub stub_;
  grpc::CompletionQueue cq_;
};

// Rule -> how often it was broken, with the first few examples, so that a
// failure says what and how without thousands of lines.
class Findings {
 public:
  void Add(const std::string& rule, const std::string& example) {
    if (++counts_[rule] <= 3) examples_[rule].push_back(example);
  }
  int total() const {
    int n = 0;
    for (const auto& [rule, count] : counts_) n += count;
    return n;
  }
  std::string Summary() const {
    std::string out;
    for (const auto& [rule, count] : counts_) {
      absl::StrAppend(&out, "\n", count, " x ", rule);
      for (const std::string& e : examples_.at(rule)) {
        absl::StrAppend(&out, "\n    e.g. ", e);
      }
    }
    return out;
  }

 private:
  std::map<std::string, int> counts_;
  std::map<std::string, std::vector<std::string>> examples_;
};

std::string Shown(const std::string& bytes, size_t max) {
  return absl::StrCat(
      "\"", absl::CHexEscape(bytes.substr(0, max)), "\"",
      bytes.size() > max ? absl::StrCat("... (", bytes.size(), " bytes)") : "");
}

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
  std::unique_ptr<pb::Message> valid;
  const pb::Message* response_type;
};

// Counts what came back, for the test's log.
struct Tally {
  int sent = 0;
  int parsed = 0;
  std::map<int, int> codes;
};

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

// Sends `count` hostile variants of `handler.valid` (drawn from `seed`) and
// checks every answer. `skip` (may be null) leaves out requests that parse
// and that it returns true for; `metadata` (may be null) gives each call's
// metadata.
Tally Drive(RawCaller* caller, const Handler& handler, int count, uint64_t seed,
            const std::vector<std::string>& plausible, const Rules& rules,
            Findings* findings,
            const std::function<bool(const pb::Message&)>& skip = nullptr,
            const std::function<Metadata(HostileInput*)>& metadata = nullptr) {
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

// The coordinator's log lines, kept off stderr (thousands of refusals);
// those with raw control bytes are counted and the first kept.
class LogTally {
 public:
  void Note(absl::string_view line) {
    absl::MutexLock lock(&mu_);
    ++lines_;
    if (std::any_of(line.begin(), line.end(), [](char c) {
          return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        })) {
      if (raw_++ == 0) first_raw_ = std::string(line.substr(0, 300));
    }
  }
  std::string Summary() const {
    absl::MutexLock lock(&mu_);
    return absl::StrCat(
        lines_, " log lines, ", raw_, " with raw control bytes",
        raw_ > 0 ? absl::StrCat(", first: ", Shown(first_raw_, 200)) : "");
  }

 private:
  mutable absl::Mutex mu_;
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
  int raw_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_raw_ ABSL_GUARDED_BY(mu_);
};

void DropProtobufLog(pb::LogLevel, const char*, int, const std::string&) {}

// --- The services on loopback -----------------------------------------------

proto::JoinRequest MemberJoin(int i, const std::string& version) {
  proto::JoinRequest request;
  request.set_job_id(kJob);
  request.set_hostname(absl::StrCat("member-", i));
  request.set_data_address(absl::StrCat("127.0.0.1:", 30000 + i));
  request.set_admin_address(absl::StrCat("127.0.0.1:", 31000 + i));
  request.set_version(version);
  request.mutable_capabilities()->set_local_workers(1);
  return request;
}

class MalformedRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Protobuf logs each string that is not UTF-8, on both ends of a call.
    previous_protobuf_log_ = pb::SetLogHandler(&DropProtobufLog);
    SetLogSinkForTesting(
        [this](LogSeverity, absl::string_view line) { logs_.Note(line); });
  }

  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Shutdown();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    }
    SetLogSinkForTesting(nullptr);
    pb::SetLogHandler(previous_protobuf_log_);
    std::cout << "coordinator: " << logs_.Summary() << std::endl;
  }

  // Serves a coordinator of `options` (job kJob; the group of
  // `expected_nodes`) on 127.0.0.1, port 0.
  void StartCoordinator(int expected_nodes, const std::string& secret = "") {
    CoordinatorOptions options;
    options.job_id = kJob;
    options.expected_nodes = expected_nodes;
    options.partitions_per_epoch = 64;
    options.iterations_per_schedule = 4;
    options.rejoin_grace = absl::Hours(1);
    options.cluster_secret = secret;
    absl::StatusOr<std::unique_ptr<Coordinator>> made =
        Coordinator::Create(options, &clock_, &registry_);
    ASSERT_TRUE(made.ok()) << made.status();
    coordinator_ = *std::move(made);
    service_ = std::make_unique<CoordinatorService>(coordinator_.get());
    Serve(service_.get());
    stub_ = proto::Coordinator::NewStub(channel_);
    plausible_ = {kJob, version(), "127.0.0.1:1", "stranger", "w"};
  }

  void Serve(grpc::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    raw_ = std::make_unique<RawCaller>(channel_);
  }

  std::string version() const { return coordinator_->options().version; }

  template <typename Request, typename Response, typename Method>
  grpc::Status Typed(Method method, const Request& request, Response* out) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    return (stub_.get()->*method)(&context, request, out);
  }

  // Members 0..n-1 join at once; their answers by member.
  std::vector<proto::JoinResponse> JoinMembers(int n) {
    std::vector<proto::JoinResponse> joined(n);
    std::vector<grpc::Status> statuses(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        statuses[i] = Typed(&proto::Coordinator::Stub::Join,
                            MemberJoin(i, version()), &joined[i]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(statuses[i].ok())
          << "member " << i << ": " << statuses[i].error_message();
    }
    return joined;
  }

  // The eight coordinator handlers with valid requests from member 0 of
  // the group `joined` describes (or a forming group if it is empty).
  std::vector<Handler> CoordinatorHandlers(const proto::JoinResponse& joined) {
    const std::string prefix = "/starling.proto.Coordinator/";
    const uint64_t epoch = joined.group_epoch();
    std::vector<Handler> handlers;
    const auto add = [&](const char* name, std::unique_ptr<pb::Message> valid,
                         const pb::Message& response_type) {
      handlers.push_back({prefix + name, std::move(valid), &response_type});
    };

    auto join = std::make_unique<proto::JoinRequest>(MemberJoin(0, version()));
    join->set_hostname("stranger");
    join->set_data_address("127.0.0.1:1");
    join->set_wait_timeout_ms(50);
    add("Join", std::move(join), proto::JoinResponse::default_instance());

    auto beat = std::make_unique<proto::HeartbeatRequest>();
    beat->set_job_id(kJob);
    beat->set_group_epoch(epoch);
    beat->set_iteration(3);
    proto::WorkerStatus* worker = beat->add_workers();
    worker->set_name("worker-0");
    worker->set_state(proto::WorkerStatus::STATE_ATTACHED);
    add("Heartbeat", std::move(beat),
        proto::HeartbeatResponse::default_instance());

    auto schedule = std::make_unique<proto::GetScheduleRequest>();
    schedule->set_job_id(kJob);
    schedule->set_group_epoch(epoch);
    add("GetSchedule", std::move(schedule),
        proto::Schedule::default_instance());

    auto report = std::make_unique<proto::StepReport>();
    report->set_job_id(kJob);
    report->set_group_epoch(epoch);
    report->set_iteration(1);
    report->set_compute_seconds(0.25);
    report->set_communication_seconds(0.125);
    report->set_loss(1.5);
    add("ReportStep", std::move(report),
        proto::StepReportAck::default_instance());

    auto status = std::make_unique<proto::GetJobStatusRequest>();
    status->set_job_id(kJob);
    add("GetJobStatus", std::move(status),
        proto::JobStatus::default_instance());

    auto rejoin = std::make_unique<proto::RejoinRequest>();
    *rejoin->mutable_node() = MemberJoin(0, version());
    rejoin->set_group_epoch(epoch == 0 ? 1 : epoch);
    if (joined.peers_size() > 0) {
      *rejoin->mutable_peers() = joined.peers();
      *rejoin->mutable_shard_map() = joined.shard_map();
    } else {
      rejoin->add_peers()->set_data_address(rejoin->node().data_address());
    }
    add("Rejoin", std::move(rejoin), proto::JoinResponse::default_instance());

    auto begin = std::make_unique<proto::BeginRunRequest>(BeginFor(epoch));
    begin->set_wait_timeout_ms(50);
    add("BeginRun", std::move(begin),
        proto::BeginRunResponse::default_instance());

    auto end = std::make_unique<proto::EndRunRequest>();
    end->set_job_id(kJob);
    end->set_group_epoch(epoch);
    end->set_run_id(1);
    end->set_state(proto::RunStatus::STATE_FINISHED);
    end->set_steps(1);
    add("EndRun", std::move(end), proto::EndRunResponse::default_instance());
    return handlers;
  }

  static proto::BeginRunRequest BeginFor(uint64_t epoch) {
    proto::BeginRunRequest begin;
    begin.set_job_id(kJob);
    begin.set_group_epoch(epoch);
    begin.set_local_workers(1);
    begin.set_next_op_seq(1);
    proto::TensorSpec* spec = begin.add_tensors();
    spec->set_name("w");
    spec->add_shape(10);
    spec->set_dtype(proto::DATA_TYPE_FLOAT32);
    return begin;
  }

  // The job as the coordinator sees it, from the class itself (no
  // credential needed), without the time of the answer.
  proto::JobStatus StatusNow() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_TRUE(status.ok()) << status.status();
    proto::JobStatus out = status.ok() ? *status : proto::JobStatus();
    out.clear_status_unix_seconds();
    return out;
  }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  LogTally logs_;
  pb::LogHandler* previous_protobuf_log_ = nullptr;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<node::NodeAdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<RawCaller> raw_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  std::vector<std::string> plausible_;
};

// A formed group of one (so that a BeginRun is decided at once and the
// run book sees every hostile table) takes 3000 hostile requests on each of
// the eight handlers: each is answered by the coordinator or refused
// before it, every error is bounded and printable, and afterwards the
// group is the one that formed and its member still heartbeats, gets its
// schedule, and begins and ends a run.
TEST_F(MalformedRequestsTest, CoordinatorSurvivesAndStaysUsable) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const std::vector<proto::JoinResponse> joined = JoinMembers(1);
  ASSERT_EQ(joined.size(), 1u);
  const proto::JoinResponse& member = joined[0];
  ASSERT_EQ(member.group_size(), 1);

  Findings findings;
  uint64_t seed = 0x5ec0'0001;
  for (const Handler& handler : CoordinatorHandlers(member)) {
    Drive(raw_.get(), handler, 3000, seed++, plausible_, Rules(), &findings);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  // The group is the one that formed.
  proto::JobStatus status;
  ASSERT_TRUE(Typed(&proto::Coordinator::Stub::GetJobStatus,
                    proto::GetJobStatusRequest(), &status)
                  .ok());
  EXPECT_EQ(status.job_id(), kJob);
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.group_size(), 1);
  EXPECT_EQ(status.group_epoch(), member.group_epoch());
  ASSERT_EQ(status.nodes_size(), 1) << "no hostile Join is left waiting";
  EXPECT_EQ(status.nodes(0).peer().data_address(),
            member.peers(0).data_address());
  EXPECT_EQ(status.nodes(0).peer().health(), proto::NODE_HEALTH_HEALTHY);

  // Its member still works.
  proto::HeartbeatRequest beat;
  beat.set_job_id(kJob);
  beat.set_group_epoch(member.group_epoch());
  proto::HeartbeatResponse beat_answer;
  grpc::Status call =
      Typed(&proto::Coordinator::Stub::Heartbeat, beat, &beat_answer);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_FALSE(beat_answer.degraded());
  proto::GetScheduleRequest ask;
  ask.set_job_id(kJob);
  ask.set_group_epoch(member.group_epoch());
  proto::Schedule schedule;
  call = Typed(&proto::Coordinator::Stub::GetSchedule, ask, &schedule);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_EQ(schedule.first_iteration(), 0u);
  EXPECT_GT(schedule.iteration_count(), 0);

  proto::BeginRunResponse begun;
  call = Typed(&proto::Coordinator::Stub::BeginRun,
               BeginFor(member.group_epoch()), &begun);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_GE(begun.run_id(), 1u) << "run ids are numbered from 1";
  EXPECT_EQ(begun.parameter_count(), 10u);
  proto::EndRunRequest end;
  end.set_job_id(kJob);
  end.set_group_epoch(member.group_epoch());
  end.set_run_id(begun.run_id());
  end.set_state(proto::RunStatus::STATE_FINISHED);
  end.set_steps(5);
  proto::EndRunResponse ended;
  call = Typed(&proto::Coordinator::Stub::EndRun, end, &ended);
  EXPECT_TRUE(call.ok()) << "ending run " << begun.run_id() << ": "
                         << call.error_message();
  ASSERT_TRUE(Typed(&proto::Coordinator::Stub::GetJobStatus,
                    proto::GetJobStatusRequest(), &status)
                  .ok());
  ASSERT_GE(status.recent_runs_size(), 1);
  EXPECT_EQ(status.recent_runs(0).run_id(), begun.run_id());
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
}

// While a group of two forms, hostile requests on every handler (none of
// them a Join or Rejoin that could rightly take a slot or adopt a group)
// leave no node waiting, and then the two real members form the group
// with ranks 0 and 1 as if nothing had happened.
TEST_F(MalformedRequestsTest, HostileJoinsTakeNoSlotInAFormingGroup) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::string right_version = version();
  const auto could_take_a_slot = [&](const pb::Message& message) {
    const auto* join = dynamic_cast<const proto::JoinRequest*>(&message);
    const auto* rejoin = dynamic_cast<const proto::RejoinRequest*>(&message);
    if (rejoin != nullptr) join = &rejoin->node();
    return join != nullptr && join->job_id() == kJob &&
           join->version() == right_version;
  };
  Findings findings;
  uint64_t seed = 0x5ec0'0101;
  for (const Handler& handler : CoordinatorHandlers(proto::JoinResponse())) {
    Drive(raw_.get(), handler, 600, seed++, plausible_, Rules(), &findings,
          could_take_a_slot);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  proto::JobStatus status = StatusNow();
  EXPECT_EQ(status.job_id(), kJob);
  EXPECT_FALSE(status.formed());
  EXPECT_EQ(status.nodes_size(), 0) << status.DebugString();

  const std::vector<proto::JoinResponse> joined = JoinMembers(2);
  ASSERT_EQ(joined.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(joined[i].rank(), i);
    EXPECT_EQ(joined[i].group_size(), 2);
    ASSERT_EQ(joined[i].peers_size(), 2);
    EXPECT_EQ(joined[i].peers(i).hostname(), absl::StrCat("member-", i));
  }
  status = StatusNow();
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.group_size(), 2);
  EXPECT_EQ(status.nodes_size(), 2);
}

// With a cluster secret, every request that parses on every handler, sent
// without a credential or with a made-up one (random text, or shaped like
// a credential), is refused with PERMISSION_DENIED by the coordinator
// itself, bounded and printable, and none changes the job's state.
TEST_F(MalformedRequestsTest, WithAClusterSecretNoUncredentialedCallGetsIn) {
  ASSERT_NO_FATAL_FAILURE(
      StartCoordinator(2, "malformed-requests-test cluster secret"));
  const proto::JobStatus before = StatusNow();
  const auto metadata = [](HostileInput* input) {
    Metadata out;
    if (input->OneIn(3)) return out;
    out.emplace_back(kCallerHostKey, input->MetadataValue());
    out.emplace_back(kCallerAddressKey, input->MetadataValue());
    out.emplace_back(kCallCredentialKey, input->MetadataValue());
    return out;
  };
  Rules rules;
  rules.code = grpc::StatusCode::PERMISSION_DENIED;
  Findings findings;
  uint64_t seed = 0x5ec0'0201;
  for (const Handler& handler : CoordinatorHandlers(proto::JoinResponse())) {
    Drive(raw_.get(), handler, 300, seed++, plausible_, rules, &findings,
          nullptr, metadata);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();
  const proto::JobStatus after = StatusNow();
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "before: " << before.DebugString() << "after: " << after.DebugString();
}

// A member that reports the end of a run with the largest run id (a
// corrupt daemon's EndRun, or a hostile one without a cluster secret)
// must not wrap the coordinator's run counter: the next run still gets an
// id >= 1 and its member can end it.
TEST_F(MalformedRequestsTest, LargestRunIdDoesNotWrapTheRunCounter) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const std::vector<proto::JoinResponse> joined = JoinMembers(1);
  ASSERT_EQ(joined.size(), 1u);
  const uint64_t epoch = joined[0].group_epoch();
  const auto end_run = [&](uint64_t run_id) {
    proto::EndRunRequest end;
    end.set_job_id(kJob);
    end.set_group_epoch(epoch);
    end.set_run_id(run_id);
    end.set_state(proto::RunStatus::STATE_FINISHED);
    end.set_steps(1);
    proto::EndRunResponse ended;
    return Typed(&proto::Coordinator::Stub::EndRun, end, &ended);
  };
  // Refused or recorded: either way the counter must survive it.
  const grpc::Status hostile = end_run(std::numeric_limits<uint64_t>::max());
  std::cout << "EndRun of run 2^64-1: code " << hostile.error_code() << " "
            << hostile.error_message() << std::endl;

  proto::BeginRunResponse begun;
  grpc::Status call =
      Typed(&proto::Coordinator::Stub::BeginRun, BeginFor(epoch), &begun);
  ASSERT_TRUE(call.ok()) << call.error_message();
  EXPECT_GE(begun.run_id(), 1u) << "run ids are numbered from 1";
  call = end_run(begun.run_id());
  EXPECT_TRUE(call.ok()) << "ending run " << begun.run_id() << ": "
                         << call.error_message();
}

// A node daemon serves its admin service before it joins: until then each
// of its four handlers answers any request, whatever bytes it holds, with
// UNAVAILABLE "still joining", bounded and printable.
TEST_F(MalformedRequestsTest, NodeAdminStillJoiningAnswersUnavailable) {
  admin_ = std::make_unique<node::NodeAdminService>();
  ASSERT_NO_FATAL_FAILURE(Serve(admin_.get()));
  const std::string prefix = "/starling.proto.NodeAdmin/";
  std::vector<Handler> handlers;
  handlers.push_back({prefix + "GetStatus",
                      std::make_unique<proto::GetNodeStatusRequest>(),
                      &proto::NodeStatusReply::default_instance()});
  handlers.push_back({prefix + "ListShards",
                      std::make_unique<proto::ListShardsRequest>(),
                      &proto::ListShardsReply::default_instance()});
  handlers.push_back({prefix + "GetGroup",
                      std::make_unique<proto::GetGroupRequest>(),
                      &proto::GroupReply::default_instance()});
  handlers.push_back({prefix + "GetCollectives",
                      std::make_unique<proto::GetCollectivesRequest>(),
                      &proto::CollectivesReply::default_instance()});
  Rules rules;
  rules.marked = false;
  rules.code = grpc::StatusCode::UNAVAILABLE;
  Findings findings;
  uint64_t seed = 0x5ec0'0301;
  for (const Handler& handler : handlers) {
    Drive(raw_.get(), handler, 500, seed++, {"x"}, rules, &findings);
  }
  EXPECT_EQ(findings.total(), 0) << findings.Summary();

  auto stub = proto::NodeAdmin::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  proto::NodeStatusReply reply;
  const grpc::Status status =
      stub->GetStatus(&context, proto::GetNodeStatusRequest(), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "still joining"))
      << status.error_message();
}

}  // namespace
}  // namespace starling
