// The hostile-input generator (hostile_input.h). Each draw takes its
// randomness from rng_ alone, in a fixed order, so that a seed fixes every
// input a test sends.
#include "tests/security/hostile_input.h"

#include <iterator>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace starling {
namespace testing_security {
namespace {

namespace pb = ::google::protobuf;

// Appends `value` to `out` as a protobuf varint.
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

}  // namespace

HostileInput::HostileInput(uint64_t seed, std::vector<std::string> plausible)
    : rng_(seed), plausible_(std::move(plausible)) {}

uint64_t HostileInput::Below(uint64_t n) {
  return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
}

bool HostileInput::OneIn(uint64_t n) { return Below(n) == 0; }

std::string HostileInput::RandomBytes(size_t max_bytes) {
  std::string out(Below(max_bytes + 1), '\0');
  for (char& c : out) c = static_cast<char>(Below(256));
  return out;
}

std::string HostileInput::Printable(size_t bytes) {
  std::string out(bytes, ' ');
  for (char& c : out) c = static_cast<char>(0x20 + Below(0x5f));
  return out;
}

std::string HostileInput::RandomWire(int depth) {
  std::string out;
  const int fields = static_cast<int>(Below(8));
  for (int i = 0; i < fields; ++i) {
    const uint64_t number = OneIn(8) ? Below(uint64_t{1} << 29) : 1 + Below(12);
    static constexpr int kUsual[] = {0, 1, 2, 5};
    const int type = OneIn(10) ? static_cast<int>(Below(8)) : kUsual[Below(4)];
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

std::string HostileInput::MutateBytes(std::string bytes,
                                      const pb::Descriptor& type) {
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
        const int number = strings.empty() ? 1 : strings[Below(strings.size())];
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

void HostileInput::MutateFields(pb::Message* message, int mutations) {
  std::unique_ptr<pb::Message> before(message->New());
  for (int i = 0; i < mutations; ++i) {
    before->CopyFrom(*message);
    MutateField(message, /*depth=*/0, /*bulk_allowed=*/true);
    if (message->ByteSizeLong() > kMaxRequestBytes) message->CopyFrom(*before);
  }
}

std::string HostileInput::MetadataValue() {
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

int64_t HostileInput::ExtremeInt64() {
  static constexpr int64_t kValues[] = {std::numeric_limits<int64_t>::min(),
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

int32_t HostileInput::ExtremeInt32() {
  static constexpr int32_t kValues[] = {
      std::numeric_limits<int32_t>::min(), -2, -1, 0, 1, 4096, 4097,
      std::numeric_limits<int32_t>::max()};
  if (OneIn(4)) return static_cast<int32_t>(rng_());
  return kValues[Below(std::size(kValues))];
}

uint64_t HostileInput::ExtremeUint64() {
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

double HostileInput::ExtremeDouble() {
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

std::string HostileInput::HostileString(bool short_only) {
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

void HostileInput::SetSingular(pb::Message* m, const pb::FieldDescriptor* f,
                               int depth, bool bulk_allowed) {
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

void HostileInput::AddEntry(pb::Message* m, const pb::FieldDescriptor* f,
                            int depth, bool bulk_allowed) {
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

void HostileInput::MutateField(pb::Message* m, int depth, bool bulk_allowed) {
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

}  // namespace testing_security
}  // namespace starling
