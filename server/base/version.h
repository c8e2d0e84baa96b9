// kStarlingVersion: the Starling version this build speaks. Every process
// reports it (--version, status) and the coordinator refuses a node whose
// Join carries another. Header-only constant; thread-safe.
#ifndef STARLING_SERVER_BASE_VERSION_H_
#define STARLING_SERVER_BASE_VERSION_H_

namespace starling {

inline constexpr char kStarlingVersion[] = "0.1.0";

}  // namespace starling

#endif  // STARLING_SERVER_BASE_VERSION_H_
