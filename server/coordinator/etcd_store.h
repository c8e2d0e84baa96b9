// EtcdStore: the coordinator's record of its job (state_store.h) under one
// key of an etcd cluster (--state_etcd), for operators who run one: the
// record then outlives the coordinator's machine, and a coordinator
// restarted on another host resumes the job.
//
// It speaks etcd's v3 JSON gateway (POST /v3/kv/range and /v3/kv/txn on a
// member's client URL; etcd 3.4 and later, Debian's etcd-server) with
// cpp-httplib, the messages in proto/etcd_gateway.proto. The value is the
// framed record every store keeps (EncodeStateRecord: header, length,
// SHA-256, payload), so a value that does not check is refused like a
// damaged file.
//
// Single writer, enforced: Read remembers the key's revision, and each
// Write is a transaction that puts the record only if the key is still at
// the revision this coordinator last read or wrote. A second coordinator
// of the same job that wrote meanwhile makes this one's writes fail,
// naming it (FailedPrecondition), instead of two coordinators overwriting
// each other's record.
//
// Endpoints are tried in order; the next one is tried only when one cannot
// be reached (an answer, even an error, ends the call). Every request has a
// deadline (`timeout`).
//
// Thread-compatible, like every StateStore.
#ifndef STARLING_SERVER_COORDINATOR_ETCD_STORE_H_
#define STARLING_SERVER_COORDINATOR_ETCD_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator/state_store.h"

namespace starling {
namespace coordinator {

class EtcdStore : public StateStore {
 public:
  // `endpoints`: "http://HOST:PORT,http://HOST:PORT..." (a bare HOST:PORT
  // means http://); `key`: the record's key. InvalidArgument naming the
  // flag when an endpoint does not parse or none is given.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Create(
      absl::string_view endpoints, std::string key,
      absl::Duration timeout = absl::Seconds(5));

  // The key the coordinator of `job_id` records its job under: PREFIX/JOB.
  static std::string KeyFor(absl::string_view prefix, absl::string_view job_id);

  // StateStore. Read: nullopt when the key does not exist; Unavailable
  // naming every endpoint tried when none answers; Internal with etcd's
  // answer when it refuses the request.
  const std::string& where() const override { return where_; }
  absl::StatusOr<std::optional<proto::CoordinatorState>> Read() override;
  absl::Status Write(const proto::CoordinatorState& state) override;

  // The key's revision this store last read or wrote (0: no key).
  int64_t revision() const { return revision_; }

 private:
  EtcdStore(std::vector<std::string> endpoints, std::string key,
            absl::Duration timeout);

  // POSTs `request` as JSON to `path` of the first endpoint that answers
  // and parses the answer into `reply`. `what` names the call in errors.
  absl::Status Call(absl::string_view path,
                    const google::protobuf::Message& request,
                    google::protobuf::Message* reply, absl::string_view what);

  // One transaction: puts `value` if the key is at revision_. Aborted
  // when the key holds this store's own earlier write whose answer was
  // lost (revision_ then follows it: try again).
  absl::Status WriteValue(const std::string& value);

  const std::vector<std::string> endpoints_;
  const std::string key_;
  const absl::Duration timeout_;
  const std::string where_;
  int64_t revision_ = 0;
  // The value of a write whose answer never came (empty: none).
  std::string unconfirmed_;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_ETCD_STORE_H_
