// FormatJobStatusTable: a JobStatus as the text table `starlingctl status`
// prints: one row per node (rank, hostname, address, health, shard and
// optimizer state sizes, heartbeat age, last error), then the job's epoch,
// iteration, degraded flag and last error. Stateless; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_
#define STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_

#include <cstdint>
#include <string>

#include "proto/coordinator.pb.h"

namespace starling {
namespace coordinator {

// Ends in '\n'.
std::string FormatJobStatusTable(const proto::JobStatus& status);

// 0 -> "0 B", 1536 -> "1.5 KiB", 4194304 -> "4.0 MiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_JOB_STATUS_TABLE_H_
