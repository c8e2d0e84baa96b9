// Status propagation macros, which Debian's Abseil (20220623) lacks.
//
//   STARLING_RETURN_IF_ERROR(expr);     // returns the absl::Status if not ok
//   STARLING_ASSIGN_OR_RETURN(lhs, expr);  // lhs = value of a StatusOr, or
//                                          // return its status
//
// `expr` is evaluated exactly once. Both work in functions returning
// absl::Status or absl::StatusOr<T>. Header-only; thread-compatible.
#ifndef STARLING_SERVER_BASE_STATUS_MACROS_H_
#define STARLING_SERVER_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace starling {

// Returns `status` with `context` prepended to its message ("while X: <msg>"),
// keeping the code and payloads. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace starling

#define STARLING_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status starling_status_ = (expr);            \
    if (!starling_status_.ok()) return starling_status_; \
  } while (false)

#define STARLING_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define STARLING_STATUS_MACROS_CONCAT_(a, b) \
  STARLING_STATUS_MACROS_CONCAT_INNER_(a, b)

#define STARLING_ASSIGN_OR_RETURN(lhs, expr) \
  STARLING_ASSIGN_OR_RETURN_IMPL_(           \
      STARLING_STATUS_MACROS_CONCAT_(starling_statusor_, __LINE__), lhs, expr)

#define STARLING_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // STARLING_SERVER_BASE_STATUS_MACROS_H_
