#include "server/base/describe_collective.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/base/data_type.h"
#include "server/base/proto_data_type.h"

namespace starling {

std::string DescribeCollective(const proto::CollectiveRequest& c) {
  absl::StatusOr<DataType> type = proto::DataTypeFromProto(c.dtype());
  const std::string of = absl::StrCat(
      " of ", c.slice().elements(), " ",
      type.ok() ? DataTypeName(*type) : absl::string_view("elements"));
  absl::StatusOr<ReduceOp> op = proto::ReduceOpFromProto(c.op());
  const std::string op_name = absl::StrCat(
      " (", op.ok() ? ReduceOpName(*op) : absl::string_view("no op"), ")");
  switch (c.kind()) {
    case proto::CollectiveRequest::KIND_ALL_REDUCE:
      return absl::StrCat("all_reduce", op_name, of);
    case proto::CollectiveRequest::KIND_BROADCAST:
      return absl::StrCat("broadcast from slot ", c.root(), of);
    case proto::CollectiveRequest::KIND_ALL_GATHER:
      return absl::StrCat("all_gather", of);
    case proto::CollectiveRequest::KIND_REDUCE_SCATTER:
      return absl::StrCat("reduce_scatter", op_name, of);
    default:
      return absl::StrCat("collective", of);
  }
}

}  // namespace starling
