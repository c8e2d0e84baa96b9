// RetiredRegions: the set of region ids a transport has retired
// (Transport::RetireRegions()), kept as disjoint, sorted ranges: callers
// retire ids a range at a time and mostly extend the range they retired
// last, so the set stays a handful of ranges however many ids it holds.
// Thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_RETIRED_REGIONS_H_
#define STARLING_SERVER_TRANSPORT_RETIRED_REGIONS_H_

#include <cstddef>
#include <map>

#include "server/transport/transport.h"

namespace starling {
namespace transport {

class RetiredRegions {
 public:
  // Adds [first, end); nothing if first >= end.
  void Add(RegionId first, RegionId end);
  bool Contains(RegionId id) const;
  // Disjoint ranges held, for tests.
  size_t range_count() const { return ranges_.size(); }

 private:
  std::map<RegionId, RegionId> ranges_;  // first -> end, disjoint, not adjacent
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_RETIRED_REGIONS_H_
