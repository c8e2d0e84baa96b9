// A worker's collective request in words, for the messages of the client
// and of the daemons alike: "all_reduce (sum) of 12 float32", "broadcast
// from slot 3 of 5 int64", "all_gather of 8 float16", "reduce_scatter (max)
// of 4 float64". Stateless; thread-safe.
#ifndef STARLING_SERVER_BASE_DESCRIBE_COLLECTIVE_H_
#define STARLING_SERVER_BASE_DESCRIBE_COLLECTIVE_H_

#include <string>

#include "proto/worker.pb.h"

namespace starling {

// Unknown kinds, types and ops (a request not checked yet) are named as
// such ("collective", "elements", "no op").
std::string DescribeCollective(const proto::CollectiveRequest& collective);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_DESCRIBE_COLLECTIVE_H_
