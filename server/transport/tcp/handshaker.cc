#include "server/transport/tcp/handshaker.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

void Append(const uint8_t* bytes, size_t n, std::vector<uint8_t>* out) {
  out->insert(out->end(), bytes, bytes + n);
}

// Encodes `hello` into `out` and returns its body, as the transcript holds it.
std::array<uint8_t, kHelloBodyBytes> AppendHello(const Hello& hello,
                                                 std::vector<uint8_t>* out) {
  uint8_t frame[kHelloFrameBytes];
  EncodeHelloFrame(hello, frame);
  if (out != nullptr) Append(frame, sizeof(frame), out);
  std::array<uint8_t, kHelloBodyBytes> body;
  std::copy(frame + kFrameHeaderBytes, frame + kHelloFrameBytes, body.begin());
  return body;
}

// A peer's ERROR text goes into our logs: keep it on one line.
std::string Printable(const std::vector<uint8_t>& bytes) {
  std::string text(bytes.begin(), bytes.end());
  for (char& c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return text;
}

const char* const kSecretHint =
    "start every node with the same "
    "--cluster_secret_file";

// How to get past the no-secret policy (loopback peers only).
const char* const kNoSecretFix =
    "start every node with --cluster_secret_file=<file> (the same secret on "
    "every node), or with --insecure on a trusted network";

}  // namespace

Handshaker::Handshaker(HandshakeConfig config)
    : config_(std::move(config)), local_(config_.local) {
  if (config_.role == HandshakeConfig::Role::kConnect) {
    transcript_.connect_hello = AppendHello(local_, nullptr);
    transcript_.connect_nonce = config_.nonce;
  } else {
    transcript_.accept_nonce = config_.nonce;
  }
}

std::string Handshaker::Who() const {
  if (config_.role == HandshakeConfig::Role::kConnect) {
    return config_.name(static_cast<int>(local_.receiver_rank));
  }
  if (!hello_checked_) {
    return absl::StrCat("the connection from ", config_.peer_address);
  }
  return absl::StrCat("the connection from ", config_.peer_address,
                      " claiming to be ",
                      config_.name(static_cast<int>(remote_.sender_rank)));
}

absl::Status Handshaker::Start(std::vector<uint8_t>* out) {
  if (config_.role == HandshakeConfig::Role::kAccept) return absl::OkStatus();
  if (!has_cluster_secret() && !config_.peer_is_loopback && !config_.insecure) {
    state_ = State::kFailed;
    return absl::UnauthenticatedError(
        absl::StrCat(Who(), " is not on a loopback address and ",
                     config_.name(static_cast<int>(local_.sender_rank)),
                     " has no cluster secret: ", kNoSecretFix));
  }
  AppendHello(local_, out);
  AppendChallenge(out);
  return absl::OkStatus();
}

void Handshaker::AppendChallenge(std::vector<uint8_t>* out) const {
  Challenge challenge;
  challenge.mode = !has_secret()            ? AuthMode::kNone
                   : config_.group_key_only ? AuthMode::kGroupKey
                                            : AuthMode::kHmacSha256;
  challenge.nonce = config_.nonce;
  uint8_t frame[kChallengeFrameBytes];
  EncodeChallengeFrame(challenge, frame);
  Append(frame, sizeof(frame), out);
}

size_t Handshaker::BytesWanted() const {
  if (state_ != State::kRunning) return 0;
  return in_payload_ ? payload_.size() - have_ : kFrameHeaderBytes - have_;
}

absl::Status Handshaker::Fail(const absl::Status& why,
                              std::vector<uint8_t>* out) {
  state_ = State::kFailed;
  const std::string text(why.message().substr(
      0, std::min(why.message().size(), kMaxErrorMessageBytes)));
  FrameHeader header;
  header.type = FrameType::kError;
  header.imm = static_cast<uint32_t>(why.code());
  header.length = text.size();
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(header, bytes);
  Append(bytes, sizeof(bytes), out);
  Append(reinterpret_cast<const uint8_t*>(text.data()), text.size(), out);
  return why;
}

absl::Status Handshaker::Consume(const uint8_t* data, size_t n,
                                 std::vector<uint8_t>* out) {
  STARLING_CHECK(n <= BytesWanted())
      << "fed " << n << " bytes to a handshake that wants " << BytesWanted();
  if (n == 0) return absl::OkStatus();
  if (!in_payload_) {
    std::memcpy(header_bytes_ + have_, data, n);
    have_ += n;
    if (have_ < kFrameHeaderBytes) return absl::OkStatus();
    have_ = 0;
    absl::StatusOr<FrameHeader> header = DecodeFrameHeader(header_bytes_);
    if (!header.ok()) {
      return Fail(absl::DataLossError(absl::StrCat(
                      "bad frame from ", Who(),
                      " during the handshake: ", header.status().message())),
                  out);
    }
    header_ = *header;
    FrameType expected = FrameType::kHello;
    switch (step_) {
      case Step::kHello:
        break;
      case Step::kChallenge:
        expected = FrameType::kChallenge;
        break;
      case Step::kProof:
        expected = FrameType::kProof;
        break;
      case Step::kWelcome:
        expected = FrameType::kWelcome;
        break;
      case Step::kNone:
        return Fail(absl::InternalError("handshake has no next step"), out);
    }
    if (header_.type != FrameType::kError && header_.type != expected) {
      return Fail(
          absl::DataLossError(absl::StrCat(
              Who(), " sent ", FrameTypeName(header_.type), " instead of ",
              FrameTypeName(expected), " during the handshake")),
          out);
    }
    // DecodeFrameHeader() bounds the length of every type let through: at
    // most kMaxErrorMessageBytes.
    payload_.assign(header_.length, 0);
    in_payload_ = true;
    if (!payload_.empty()) return absl::OkStatus();
  } else {
    std::memcpy(payload_.data() + have_, data, n);
    have_ += n;
    if (have_ < payload_.size()) return absl::OkStatus();
  }
  in_payload_ = false;
  have_ = 0;
  return OnFrame(out);
}

absl::Status Handshaker::OnFrame(std::vector<uint8_t>* out) {
  if (header_.type == FrameType::kError) return PeerError();
  switch (step_) {
    case Step::kHello:
      return OnHello(out);
    case Step::kChallenge:
      return OnChallenge(out);
    case Step::kProof:
      return OnProof(out);
    case Step::kWelcome:
      state_ = State::kDone;
      step_ = Step::kNone;
      return absl::OkStatus();
    case Step::kNone:
      break;
  }
  return Fail(absl::InternalError("handshake has no next step"), out);
}

absl::Status Handshaker::PeerError() {
  state_ = State::kFailed;
  refused_by_peer_ = true;
  return absl::Status(ErrorFrameCode(header_.imm),
                      absl::StrCat(Who(), " refused: ", Printable(payload_)));
}

absl::Status Handshaker::OnHello(std::vector<uint8_t>* out) {
  uint8_t frame[kHelloFrameBytes];
  std::memcpy(frame, header_bytes_, kFrameHeaderBytes);
  std::memcpy(frame + kFrameHeaderBytes, payload_.data(), kHelloBodyBytes);
  absl::StatusOr<Hello> hello = DecodeHelloFrame(frame);
  if (!hello.ok()) {
    return Fail(absl::DataLossError(absl::StrCat("bad HELLO from ", Who(), ": ",
                                                 hello.status().message())),
                out);
  }
  remote_ = *hello;
  int expected_sender = static_cast<int>(local_.receiver_rank);
  if (config_.role == HandshakeConfig::Role::kAccept) {
    local_.socket_index = remote_.socket_index;
    local_.receiver_rank = remote_.sender_rank;
    expected_sender = -1;
  }
  absl::Status checked =
      CheckHello(local_, remote_, expected_sender, config_.name);
  if (!checked.ok()) return Fail(checked, out);
  hello_checked_ = true;
  std::array<uint8_t, kHelloBodyBytes> body;
  std::copy(payload_.begin(), payload_.end(), body.begin());
  if (config_.role == HandshakeConfig::Role::kAccept) {
    transcript_.connect_hello = body;
    transcript_.accept_hello = AppendHello(local_, nullptr);
  } else {
    transcript_.accept_hello = body;
  }
  step_ = Step::kChallenge;
  return absl::OkStatus();
}

absl::Status Handshaker::OnChallenge(std::vector<uint8_t>* out) {
  absl::StatusOr<Challenge> challenge = DecodeChallengeBody(payload_);
  if (!challenge.ok()) {
    return Fail(
        absl::DataLossError(absl::StrCat("bad CHALLENGE from ", Who(), ": ",
                                         challenge.status().message())),
        out);
  }
  const bool accepting = config_.role == HandshakeConfig::Role::kAccept;
  if (accepting) {
    transcript_.connect_nonce = challenge->nonce;
  } else {
    transcript_.accept_nonce = challenge->nonce;
  }
  const std::string them = config_.name(static_cast<int>(remote_.sender_rank));
  const std::string me = config_.name(static_cast<int>(local_.sender_rank));
  const bool peer_has_secret = challenge->mode != AuthMode::kNone;
  // Both prove a key, but only one has the cluster secret (the other the
  // coordinator's group key alone): named as such, not as a failed proof.
  if (has_secret() && peer_has_secret &&
      (challenge->mode == AuthMode::kGroupKey) != config_.group_key_only) {
    return Fail(
        absl::UnauthenticatedError(
            config_.group_key_only
                ? absl::StrCat(them, " uses a cluster secret but ", me,
                               " has none (a --cluster_secret_file missing "
                               "on ",
                               me, "'s node): ", kSecretHint)
                : absl::StrCat(them, " has no cluster secret but ", me,
                               " requires one (a --cluster_secret_file "
                               "missing on ",
                               them, "'s node): ", kSecretHint)),
        out);
  }
  if (has_secret() && !peer_has_secret) {
    return Fail(absl::UnauthenticatedError(
                    absl::StrCat(them, " has no cluster secret but ", me,
                                 " requires one: ", kSecretHint)),
                out);
  }
  if (!has_secret() && peer_has_secret) {
    return Fail(absl::UnauthenticatedError(
                    absl::StrCat(them, " uses a cluster secret but ", me,
                                 " has none: ", kSecretHint)),
                out);
  }
  if (accepting && !has_cluster_secret() && !config_.peer_is_loopback &&
      !config_.insecure) {
    return Fail(
        absl::UnauthenticatedError(absl::StrCat(
            "connection from ", config_.peer_address, " claiming to be ", them,
            " refused by ", me,
            ": without a cluster secret only loopback peers are accepted; ",
            kNoSecretFix)),
        out);
  }
  if (!accepting) {
    step_ = has_secret() ? Step::kProof : Step::kWelcome;
    return absl::OkStatus();
  }
  AppendHello(local_, out);
  AppendChallenge(out);
  if (has_secret()) {
    uint8_t proof[kProofFrameBytes];
    EncodeProofFrame(
        ComputeProof(config_.secret, ProofRole::kAccept, transcript_), proof);
    Append(proof, sizeof(proof), out);
    step_ = Step::kProof;
  } else {
    state_ = State::kAuthenticated;
    step_ = Step::kNone;
  }
  return absl::OkStatus();
}

absl::Status Handshaker::OnProof(std::vector<uint8_t>* out) {
  const bool accepting = config_.role == HandshakeConfig::Role::kAccept;
  const ProofRole theirs = accepting ? ProofRole::kConnect : ProofRole::kAccept;
  if (!VerifyProof(config_.secret, theirs, transcript_, payload_)) {
    const std::string me = config_.name(static_cast<int>(local_.sender_rank));
    return Fail(absl::UnauthenticatedError(absl::StrCat(
                    Who(), " failed the cluster-secret challenge of ", me,
                    config_.group_key_only
                        ? " (it does not know this group's key: not a member "
                          "of the group, e.g. a forged HELLO or a node of "
                          "another group)"
                        : " (a different --cluster_secret_file, not a member "
                          "of this group, or not a Starling peer)")),
                out);
  }
  if (accepting) {
    state_ = State::kAuthenticated;
    step_ = Step::kNone;
    return absl::OkStatus();
  }
  uint8_t proof[kProofFrameBytes];
  EncodeProofFrame(
      ComputeProof(config_.secret, ProofRole::kConnect, transcript_), proof);
  Append(proof, sizeof(proof), out);
  step_ = Step::kWelcome;
  return absl::OkStatus();
}

void Handshaker::Admit(std::vector<uint8_t>* out) {
  STARLING_CHECK(state_ == State::kAuthenticated)
      << "admitting a peer that has not authenticated";
  FrameHeader header;
  header.type = FrameType::kWelcome;
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(header, bytes);
  Append(bytes, sizeof(bytes), out);
  state_ = State::kDone;
}

void Handshaker::Refuse(const absl::Status& why, std::vector<uint8_t>* out) {
  // The caller has `why`; the return value repeats it.
  (void)Fail(why, out);
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
