#include "server/node/run/round.h"

#include "absl/strings/str_cat.h"
#include "server/base/describe_collective.h"

namespace starling {
namespace node {
namespace {

// "push", "all_reduce", ... for mismatch messages.
const char* KindName(const proto::WorkerRequest& request) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kCommitTensors:
      return "end of declarations";
    case proto::WorkerRequest::kPushGradients:
      return "push_gradients";
    case proto::WorkerRequest::kCollective:
      return "collective";
    case proto::WorkerRequest::kBarrier:
      return "barrier";
    case proto::WorkerRequest::kFinish:
      return "finish";
    default:
      return "request";
  }
}

}  // namespace

std::string DescribeRequest(const proto::WorkerRequest& request,
                            const std::string& self) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kPushGradients:
      return absl::StrCat(
          "step ", request.push_gradients().step(),
          request.push_gradients().bucket() != 0
              ? absl::StrCat(" bucket ", request.push_gradients().bucket())
              : std::string(),
          " on ", self);
    case proto::WorkerRequest::kCommitTensors:
      return absl::StrCat("end of declarations (bucket_bytes ",
                          request.commit_tensors().bucket_bytes(), ") on ",
                          self);
    case proto::WorkerRequest::kCollective:
      return absl::StrCat(DescribeCollective(request.collective()), " on ",
                          self);
    default:
      return absl::StrCat(KindName(request), " on ", self);
  }
}

absl::Status CheckSameRequests(const std::vector<Round>& rounds,
                               const std::string& self) {
  const proto::WorkerRequest& first = rounds[0].request;
  for (size_t i = 1; i < rounds.size(); ++i) {
    const proto::WorkerRequest& other = rounds[i].request;
    bool same = first.kind_case() == other.kind_case();
    if (same && first.has_push_gradients()) {
      same = first.push_gradients().step() == other.push_gradients().step() &&
             first.push_gradients().bucket() == other.push_gradients().bucket();
    }
    if (same && first.has_commit_tensors()) {
      same = first.commit_tensors().bucket_bytes() ==
             other.commit_tensors().bucket_bytes();
    }
    if (same && first.has_collective()) {
      const proto::CollectiveRequest& a = first.collective();
      const proto::CollectiveRequest& b = other.collective();
      same = a.kind() == b.kind() &&
             a.slice().elements() == b.slice().elements() &&
             a.dtype() == b.dtype() && a.op() == b.op() && a.root() == b.root();
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "local workers of ", self, " made different collective calls: ",
          rounds[0].worker.name, " ", DescribeRequest(first, self), ", ",
          rounds[i].worker.name, " ", DescribeRequest(other, self)));
    }
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
