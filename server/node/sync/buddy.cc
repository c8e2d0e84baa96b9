#include "server/node/sync/buddy.h"

namespace starling {
namespace node {

int BuddyDistance(const std::vector<std::string>& hosts) {
  const int n = static_cast<int>(hosts.size());
  if (n < 2) return 0;
  for (int d = 1; d < n; ++d) {
    bool apart = true;
    for (int r = 0; r < n && apart; ++r) {
      apart = hosts[r] != hosts[(r + d) % n];
    }
    if (apart) return d;
  }
  return 1;
}

}  // namespace node
}  // namespace starling
