#include "server/transport/retired_regions.h"

#include <algorithm>
#include <iterator>

namespace starling {
namespace transport {

void RetiredRegions::Add(RegionId first, RegionId end) {
  if (first >= end) return;
  // Merge with a range that starts before `first` and reaches it...
  auto it = ranges_.upper_bound(first);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second >= first) {
      first = before->first;
      end = std::max(end, before->second);
      it = ranges_.erase(before);
    }
  }
  // ...and with every range that starts within or right after the new one.
  while (it != ranges_.end() && it->first <= end) {
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(first, end);
}

bool RetiredRegions::Contains(RegionId id) const {
  auto it = ranges_.upper_bound(id);
  if (it == ranges_.begin()) return false;
  return id < std::prev(it)->second;
}

}  // namespace transport
}  // namespace starling
