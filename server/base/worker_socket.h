// kDefaultWorkerSocket: the unix socket a node daemon serves its local
// workers on unless told otherwise (starling-node --worker_socket), and so
// where every worker looks by default (starling-worker --socket, the
// Python package's starling.init, the examples). Header-only constant;
// thread-safe.
#ifndef STARLING_SERVER_BASE_WORKER_SOCKET_H_
#define STARLING_SERVER_BASE_WORKER_SOCKET_H_

namespace starling {

inline constexpr char kDefaultWorkerSocket[] = "/tmp/starling-node.sock";

}  // namespace starling

#endif  // STARLING_SERVER_BASE_WORKER_SOCKET_H_
