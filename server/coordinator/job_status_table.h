// FormatJobStatusTable: a JobStatus as the text `starlingctl status`
// prints: one row per node (rank, hostname, address, health, shard and
// optimizer state sizes, heartbeat age, data-plane transport to its peers,
// last error); then, for the nodes
// that reported them, their run and workers (a MISSING worker with its
// grace left); the job's epoch, iteration and degraded flag; the runs (the
// current one, then the recent ones with their outcome and error); and the
// job's last error. Sections with nothing to show are left out.
// Stateless; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_
#define STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_

#include <cstdint>
#include <string>

#include "proto/coordinator.pb.h"

namespace starling {
namespace coordinator {

// Ends in '\n'.
std::string FormatJobStatusTable(const proto::JobStatus& status);

// "run 4 FAILED after 37 steps (8 workers, 1000 parameters, 5.0s): why".
// `now_unix_seconds` times a run still in progress (0: not shown).
std::string FormatRun(const proto::RunStatus& run, double now_unix_seconds);

// 0 -> "0 B", 1536 -> "1.5 KiB", 4194304 -> "4.0 MiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_
