// The layout of a run's parameter memfd, shared between the node daemon
// (which writes it) and its local workers (which map it read-only, sync
// modes; client/client.h ParametersView):
//
//   [ header: one page, SharedParametersHeader at offset 0 ]
//   [ parameters: the flat float32 vector, rounded up to whole pages ]
//
// The daemon stores the header's fields with release order after the
// parameters are complete; a worker loads them with acquire order.
// std::atomic<int64_t> is lock-free (address-free) on every platform we
// build for, so it works across processes.
#ifndef STARLING_SERVER_BASE_SHARED_PARAMETERS_H_
#define STARLING_SERVER_BASE_SHARED_PARAMETERS_H_

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace starling {

struct SharedParametersHeader {
  // The version (updates applied) the parameters hold; -1 while a step
  // writes them.
  std::atomic<int64_t> version;
  // The version being written while `version` is -1; otherwise -1.
  std::atomic<int64_t> writing;
};
static_assert(std::atomic<int64_t>::is_always_lock_free,
              "the shared parameter header needs lock-free 64-bit atomics");

// Bytes of the header: one page, so that the parameters that follow are
// page-aligned in the file and in every mapping of it.
inline size_t SharedParametersHeaderBytes() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

// Bytes of the whole memfd for `parameter_bytes` bytes of parameters.
inline size_t SharedParametersFileBytes(size_t parameter_bytes) {
  const size_t page = SharedParametersHeaderBytes();
  return page + (parameter_bytes + page - 1) / page * page;
}

}  // namespace starling

#endif  // STARLING_SERVER_BASE_SHARED_PARAMETERS_H_
