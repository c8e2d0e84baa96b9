// Shift: each rank sends one block to the rank `distance` ahead of it and
// receives one from the rank `distance` behind it, in a single step (a
// one-step ring at stride `distance`). The node daemons use it to hand each
// shard's reduced gradient to the shard's buddy (the rank keeping a replica
// of it) before the all-gather, so that every committed step exists on two
// daemons.
//
// In place on OpContext::data(), two halves of count/2 elements: the first
// is sent into the second half of rank (r + distance) mod N; the second
// half receives rank (r - distance) mod N's first half. The distance is the
// descriptor's `root` (so ranks that disagree on it fail the op, naming both
// calls). Each rank sends and receives count/2 elements: n/2 bytes each way.
// For a group of 1 the first half is copied into the second.
//
// Free functions; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_SHIFT_H_
#define STARLING_SERVER_COLLECTIVE_SHIFT_H_

#include "absl/status/status.h"
#include "server/collective/op_context.h"

namespace starling {
namespace collective {

absl::Status ShiftExchange(OpContext* ctx);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_SHIFT_H_
