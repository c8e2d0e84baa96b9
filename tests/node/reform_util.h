// What the tests of a node lost mid-run share (reform_test, ps_reform_test):
// a run going on every daemon, a daemon killed with its worker, and the
// restarted daemon taken back into the running run.
#ifndef STARLING_TESTS_NODE_REFORM_UTIL_H_
#define STARLING_TESTS_NODE_REFORM_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {

// Starts a worker on each daemon training with `flags`, and waits
// (bounded) until every node reached iteration `iterations`.
std::vector<pid_t> StartTraining(NodeCluster& cluster,
                                 const std::vector<std::string>& flags,
                                 int64_t iterations);

// kill -9 of daemon `victim` and its worker (of `workers`, one per
// daemon), both waited for.
void KillDaemonAndItsWorker(NodeCluster& cluster,
                            const std::vector<pid_t>& workers, int victim);

// Waits (bounded) until daemon `victim`, restarted, serves in a group of
// every daemon with run 1 going on; `*status` is the last job status read.
::testing::AssertionResult TakenBackIntoRun1(NodeCluster& cluster, int victim,
                                             proto::JobStatus* status);

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_REFORM_UTIL_H_
