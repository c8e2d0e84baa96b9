#include "server/base/status_macros.h"

namespace starling {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&annotated](absl::string_view type_url, const absl::Cord& payload) {
        annotated.SetPayload(type_url, payload);
      });
  return annotated;
}

}  // namespace starling
