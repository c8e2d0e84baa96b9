// BuddyDistance: which daemon keeps a replica of which shard (sync_run.h
// ShardReplica). Rank r's buddy is rank r + d (mod N) for one distance d
// that every daemon computes alike from the group's host names (the
// coordinator numbers ranks by hostname, then address, so the daemons of a
// host are neighbours): the smallest d that puts every rank's buddy on
// another host, or 1 where no d does (one host, or hosts of unequal daemon
// counts that no single stride separates).
#ifndef STARLING_SERVER_NODE_SYNC_BUDDY_H_
#define STARLING_SERVER_NODE_SYNC_BUDDY_H_

#include <string>
#include <vector>

namespace starling {
namespace node {

// `hosts[r]` is rank r's host name. 0 for a group of fewer than 2.
int BuddyDistance(const std::vector<std::string>& hosts);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_BUDDY_H_
