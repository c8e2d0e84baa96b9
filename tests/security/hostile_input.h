// A generator of hostile input for the control plane's gRPC handlers, the
// kind a fuzzer sends but deterministic: random bytes, random protobuf wire
// format, byte-level mutations of a valid serialized request (including
// invalid UTF-8 in string fields), field-level mutations through reflection
// (extremes, hostile strings, unknown enum values, thousands of repeated
// entries) and made-up metadata values. Every draw comes from one
// std::mt19937_64 seeded by the caller, so a seed fixes the whole sequence.
#ifndef STARLING_TESTS_SECURITY_HOSTILE_INPUT_H_
#define STARLING_TESTS_SECURITY_HOSTILE_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace starling {
namespace testing_security {

// The largest request MutateFields makes, in bytes: below gRPC's default
// 4 MiB limit on a received message, which would refuse the call before the
// handler.
constexpr size_t kMaxRequestBytes = 3 << 20;

// Draws every kind of input from one std::mt19937_64, so a seed fixes them.
// Thread-compatible.
class HostileInput {
 public:
  // Seeds the generator with `seed`. `plausible`: values that pass a
  // handler's first checks (the job id, the version), so that mutations
  // reach further; it must not be empty.
  HostileInput(uint64_t seed, std::vector<std::string> plausible);

  // A uniform draw from [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);
  // True with probability 1/n. REQUIRES: n > 0.
  bool OneIn(uint64_t n);

  // Between 0 and `max_bytes` bytes, each uniform over 0..255.
  std::string RandomBytes(size_t max_bytes);

  // Exactly `bytes` printable ASCII characters (0x20..0x7e).
  std::string Printable(size_t bytes);

  // Protobuf wire format with random field numbers (mostly the ones the
  // messages use), wire types (sometimes invalid), extreme varints and
  // lengths that sometimes lie. `depth`: how deep in nested messages this
  // is (0 at the top; nesting stops at 3).
  std::string RandomWire(int depth);

  // One to four byte-level edits of `bytes` (a serialized request of
  // `type`): bit flips, overwrites, inserts, cuts, duplicated slices, and a
  // string field appended holding invalid UTF-8 (the raw-bytes path: a
  // protobuf client cannot send that through a typed stub).
  std::string MutateBytes(std::string bytes,
                          const google::protobuf::Descriptor& type);

  // `mutations` field-level edits of `message` (any request type, through
  // reflection): scalars to extremes, strings hostile, enums to unknown
  // values, sub-messages cleared or edited, repeated fields cleared or
  // grown (sometimes by thousands of entries). An edit that would make the
  // request larger than kMaxRequestBytes is undone. `message` is borrowed
  // for the call only.
  void MutateFields(google::protobuf::Message* message, int mutations);

  // Printable ASCII for a metadata value (a credential, a host name): a
  // made-up value shaped like a credential (call_credential.h), or random
  // text of up to 4 KiB.
  std::string MetadataValue();

 private:
  // Extreme values of each scalar type (limits, -1, 0, 1, ...), or now and
  // then any value at all.
  int64_t ExtremeInt64();
  int32_t ExtremeInt32();
  uint64_t ExtremeUint64();
  // NaN, infinities, -0, the largest and smallest values, ...
  double ExtremeDouble();

  // A string meant to hurt: empty, plausible, terminal escapes, a forged
  // log line, an embedded NUL, control bytes, bidirectional overrides,
  // 4 KiB, 8 KiB or 1 MiB. `short_only`: at most a few hundred bytes
  // (inside thousands of entries).
  std::string HostileString(bool short_only);

  // Sets the singular field `f` of `m` to a hostile value; a sub-message is
  // cleared or edited further. `depth` as in MutateField; `bulk_allowed` as
  // in MutateField.
  void SetSingular(google::protobuf::Message* m,
                   const google::protobuf::FieldDescriptor* f, int depth,
                   bool bulk_allowed);

  // Appends one hostile entry to the repeated field `f` of `m`.
  void AddEntry(google::protobuf::Message* m,
                const google::protobuf::FieldDescriptor* f, int depth,
                bool bulk_allowed);

  // Edits one field of `m`, chosen at random. `depth`: how deep in nested
  // messages `m` is (edits stop at 3). `bulk_allowed`: whether the edit may
  // add large strings or thousands of repeated entries.
  void MutateField(google::protobuf::Message* m, int depth, bool bulk_allowed);

  std::mt19937_64 rng_;
  const std::vector<std::string> plausible_;
};

}  // namespace testing_security
}  // namespace starling

#endif  // STARLING_TESTS_SECURITY_HOSTILE_INPUT_H_
