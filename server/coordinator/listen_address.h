// Forwarding header: listen addresses moved to server/base/listen_address.h
// (//server/base:listen_address). TODO(#coordinator-runs): delete once
// server/node/main.cc includes the base header.
#ifndef STARLING_SERVER_COORDINATOR_LISTEN_ADDRESS_H_
#define STARLING_SERVER_COORDINATOR_LISTEN_ADDRESS_H_

#include "server/base/listen_address.h"

namespace starling {
namespace coordinator {

using ::starling::CheckCanListen;
using ::starling::HostPort;
using ::starling::ParseHostPort;

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_LISTEN_ADDRESS_H_
