#include "server/coordinator/etcd_store.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "httplib.h"
#include "proto/etcd_gateway.pb.h"

namespace starling {
namespace coordinator {
namespace {

namespace etcd = ::starling::proto::etcd;

// At most this much of an answer goes into a message, escaped.
constexpr size_t kExcerptBytes = 300;

std::string Excerpt(absl::string_view text) {
  std::string escaped = absl::CHexEscape(text.substr(0, kExcerptBytes));
  if (text.size() > kExcerptBytes) absl::StrAppend(&escaped, "...");
  return escaped;
}

// "http://HOST:PORT" with a port in 1..65535, or why not.
absl::StatusOr<std::string> ParseEndpoint(absl::string_view text) {
  std::string url(absl::StripAsciiWhitespace(text));
  if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
    if (absl::StrContains(url, "://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state_etcd: '", Excerpt(url),
          "' is not an http:// or https:// URL of an etcd member"));
    }
    url = absl::StrCat("http://", url);
  }
  absl::string_view rest = url;
  rest = rest.substr(rest.find("://") + 3);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 ||
      port > 65535 || absl::StrContains(rest, '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state_etcd: '", Excerpt(text),
        "' is not HOST:PORT (a port in 1..65535) of an etcd member's client "
        "URL, e.g. http://127.0.0.1:2379"));
  }
  return absl::StrCat(url.substr(0, url.find("://") + 3), rest);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Create(
    absl::string_view endpoints, std::string key, absl::Duration timeout) {
  std::vector<std::string> parsed;
  for (absl::string_view one : absl::StrSplit(endpoints, ',')) {
    if (absl::StripAsciiWhitespace(one).empty()) continue;
    absl::StatusOr<std::string> endpoint = ParseEndpoint(one);
    if (!endpoint.ok()) return endpoint.status();
    parsed.push_back(*std::move(endpoint));
  }
  if (parsed.empty()) {
    return absl::InvalidArgumentError(
        "--state_etcd: no endpoint given (e.g. http://127.0.0.1:2379)");
  }
  if (key.empty()) {
    return absl::InvalidArgumentError("the etcd key of the record is empty");
  }
  return std::unique_ptr<EtcdStore>(
      new EtcdStore(std::move(parsed), std::move(key), timeout));
}

std::string EtcdStore::KeyFor(absl::string_view prefix,
                              absl::string_view job_id) {
  absl::string_view trimmed = prefix;
  while (!trimmed.empty() && trimmed.back() == '/') trimmed.remove_suffix(1);
  return absl::StrCat(trimmed, "/", job_id);
}

EtcdStore::EtcdStore(std::vector<std::string> endpoints, std::string key,
                     absl::Duration timeout)
    : endpoints_(std::move(endpoints)),
      key_(std::move(key)),
      timeout_(timeout),
      where_(absl::StrCat("the coordinator's record in etcd (key ", key_,
                          " at ", absl::StrJoin(endpoints_, ","), ")")) {}

absl::Status EtcdStore::Call(absl::string_view path,
                             const google::protobuf::Message& request,
                             google::protobuf::Message* reply,
                             absl::string_view what) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string body;
  const auto printed =
      google::protobuf::util::MessageToJsonString(request, &body, print);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat(what,
                                            ": the request does not "
                                            "print as JSON: ",
                                            printed.ToString()));
  }
  const int64_t micros = absl::ToInt64Microseconds(timeout_);
  std::vector<std::string> unreached;
  for (const std::string& endpoint : endpoints_) {
    httplib::Client client(endpoint);
    client.set_connection_timeout(micros / 1000000, micros % 1000000);
    client.set_read_timeout(micros / 1000000, micros % 1000000);
    client.set_write_timeout(micros / 1000000, micros % 1000000);
    const httplib::Result result =
        client.Post(std::string(path), body, "application/json");
    if (!result) {
      unreached.push_back(absl::StrCat(
          endpoint, " (", httplib::to_string(result.error()), ")"));
      continue;
    }
    if (result->status != 200) {
      return absl::InternalError(absl::StrCat(what, ": etcd at ", endpoint,
                                              " answered HTTP ", result->status,
                                              ": ", Excerpt(result->body)));
    }
    google::protobuf::util::JsonParseOptions parse;
    parse.ignore_unknown_fields = true;
    const auto parsed =
        google::protobuf::util::JsonStringToMessage(result->body, reply, parse);
    if (!parsed.ok()) {
      return absl::InternalError(absl::StrCat(
          what, ": the answer of ", endpoint,
          " is not an etcd v3 reply (is it an etcd member's client URL?): ",
          Excerpt(parsed.ToString()), "; it began: ", Excerpt(result->body)));
    }
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      what, ": no etcd member answered within ", absl::FormatDuration(timeout_),
      ": ", absl::StrJoin(unreached, ", ")));
}

absl::StatusOr<std::optional<proto::CoordinatorState>> EtcdStore::Read() {
  etcd::RangeRequest request;
  request.set_key(key_);
  etcd::RangeResponse reply;
  const absl::Status called =
      Call("/v3/kv/range", request, &reply, absl::StrCat("reading ", where_));
  if (!called.ok()) return called;
  if (reply.kvs().empty()) {
    revision_ = 0;
    return std::nullopt;
  }
  revision_ = reply.kvs(0).mod_revision();
  absl::StatusOr<proto::CoordinatorState> state =
      DecodeStateRecord(reply.kvs(0).value(), where_,
                        absl::StrCat("delete the key (etcdctl del ", key_,
                                     ") to start this job's coordinator "
                                     "afresh"));
  if (!state.ok()) return state.status();
  return *std::move(state);
}

absl::Status EtcdStore::Write(const proto::CoordinatorState& state) {
  const std::string value = EncodeStateRecord(state);
  absl::Status written = WriteValue(value);
  if (absl::IsAborted(written)) written = WriteValue(value);
  return written;
}

absl::Status EtcdStore::WriteValue(const std::string& value) {
  etcd::TxnRequest request;
  etcd::Compare* unchanged = request.add_compare();
  unchanged->set_key(key_);
  unchanged->set_target(etcd::Compare::MOD);
  unchanged->set_result(etcd::Compare::EQUAL);
  unchanged->set_mod_revision(revision_);
  etcd::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key_);
  put->set_value(value);
  request.add_failure()->mutable_request_range()->set_key(key_);
  etcd::TxnResponse reply;
  const absl::Status called =
      Call("/v3/kv/txn", request, &reply, absl::StrCat("writing ", where_));
  if (!called.ok()) {
    // The put may have been applied with its answer lost.
    unconfirmed_ = value;
    return called;
  }
  if (reply.succeeded()) {
    revision_ = reply.header().revision();
    unconfirmed_.clear();
    return absl::OkStatus();
  }
  int64_t now = 0;
  if (!reply.responses().empty() &&
      !reply.responses(0).response_range().kvs().empty()) {
    const etcd::KeyValue& held = reply.responses(0).response_range().kvs(0);
    now = held.mod_revision();
    if (!unconfirmed_.empty() && held.value() == unconfirmed_) {
      // Our own earlier write, whose answer was lost: go on from it.
      revision_ = now;
      unconfirmed_.clear();
      return absl::AbortedError("retry");
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      where_, " was ",
      now == 0 ? std::string("deleted")
               : absl::StrCat("written by someone else (revision ", now, ")"),
      " since this coordinator ",
      revision_ == 0 ? std::string("found none")
                     : absl::StrCat("read or wrote revision ", revision_),
      ": is a second coordinator running for this job? This one no longer "
      "records the job; restart it to resume from the record"));
}

}  // namespace coordinator
}  // namespace starling
