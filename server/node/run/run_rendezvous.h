// RunRendezvous: how a daemon begins and ends runs with the rest of its
// group: the coordinator's BeginRun / EndRun in the daemon, a fake in tests.
// Implementations are thread-safe.
#ifndef STARLING_SERVER_NODE_RUN_RUN_RENDEZVOUS_H_
#define STARLING_SERVER_NODE_RUN_RUN_RENDEZVOUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"

namespace starling {
namespace node {

class RunRendezvous {
 public:
  struct Begun {
    uint64_t run_id = 0;
    uint64_t first_op_seq = 0;
    int total_workers = 0;
    // The earlier run whose newest durable checkpoint this one goes on
    // from (BeginRunResponse.resume_run_id); 0: none.
    uint64_t resume_run_id = 0;
  };
  virtual ~RunRendezvous() = default;
  // Blocks until every daemon of the group began (all answered alike), or
  // fails (mismatched tables: InvalidArgument naming both; `local_error`
  // of some daemon; DeadlineExceeded naming the daemons that did not).
  // `initial_crc32c`: the CRC32C of the initial parameters this daemon's
  // workers set as the run's (not offered), if any.
  virtual absl::StatusOr<Begun> BeginRun(
      const std::vector<proto::TensorSpec>& tensors,
      const std::string& local_error, std::optional<uint32_t> initial_crc32c,
      int local_workers, uint64_t next_op_seq, absl::Time deadline) = 0;
  // Reports a run's end; never blocks.
  virtual void EndRun(const proto::RunStatus& run) = 0;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_RENDEZVOUS_H_
