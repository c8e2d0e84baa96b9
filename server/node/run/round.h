// Round: one collective request from every local worker (the commit, a push
// of step s, a worker all-reduce, a barrier or the finish), and how rounds
// are matched and named in messages.
//
// Plain data and free functions of their arguments: thread-compatible.
#ifndef STARLING_SERVER_NODE_RUN_ROUND_H_
#define STARLING_SERVER_NODE_RUN_ROUND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

// One local worker's request of a round, queued until every local worker
// sent one.
struct Round {
  WorkerHandle worker;
  proto::WorkerRequest request;
  absl::Time submitted;
};

// "step 7 on rank 0 (...)", "all_reduce (sum) of 12 float32 on ...", "barrier
// on
// ...": `request` in messages, `self` naming the daemon.
std::string DescribeRequest(const proto::WorkerRequest& request,
                            const std::string& self);

// InvalidArgument naming the first two local workers that made different
// collective calls (kind, push step, a collective's kind, length, type,
// op or root) in `rounds`.
// REQUIRES: !rounds.empty().
absl::Status CheckSameRequests(const std::vector<Round>& rounds,
                               const std::string& self);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_ROUND_H_
