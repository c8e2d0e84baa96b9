// The collectives of a Python session's client, as a table of C functions
// that other extension modules of the package call (the torch.distributed
// backend, starling/torch/_backend.so): one copy of the client and its
// generated protocol code in the process (in starling/_starling.so), one
// connection to the daemon per worker, and no C++ ABI between the two
// modules. starling._starling.Client.collective_api() returns a capsule
// named STARLING_COLLECTIVE_API_CAPSULE holding a StarlingCollectiveApi*
// that stays valid while that Python Client object lives (hold a reference
// to it).
//
// Codes are absl::StatusCode values (0 = OK); every message is
// NUL-terminated text naming what failed and where.
//
// Thread-safe: any function may be called from any thread; ops are sent in
// call order. `done` runs once per op, on the client's reader thread (or at
// once on the caller's when the op could not start, and for a barrier,
// which the client runs synchronously inside `start`) and must not block.
// After the Client was closed (starling.shutdown()) every function still
// answers: total_workers 0, slot -1, allocate NULL and ops
// FAILED_PRECONDITION; memory allocate() gave is then gone. An op's `done`
// may come only when the daemons end it (a worker that left is waited for
// up to the daemon's --worker_grace, not the client's timeout): a caller
// that must not wait that long needs its own deadline.
#ifndef STARLING_CLIENT_PYTHON_COLLECTIVE_API_H_
#define STARLING_CLIENT_PYTHON_COLLECTIVE_API_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STARLING_COLLECTIVE_API_CAPSULE "starling._starling.collective_api"
#define STARLING_COLLECTIVE_API_VERSION 1

// Kinds: as Client::AllReduceAsync, BroadcastAsync, AllGatherAsync,
// ReduceScatterAsync and Barrier (client/client.h).
enum StarlingCollectiveKind {
  STARLING_ALL_REDUCE = 0,
  STARLING_BROADCAST = 1,
  STARLING_ALL_GATHER = 2,
  STARLING_REDUCE_SCATTER = 3,
  STARLING_BARRIER = 4,
};

// Element types, in the order of starling::DataType.
enum StarlingDataType {
  STARLING_FLOAT32 = 0,
  STARLING_FLOAT64 = 1,
  STARLING_FLOAT16 = 2,
  STARLING_BFLOAT16 = 3,
  STARLING_INT32 = 4,
  STARLING_INT64 = 5,
};

// Reduction operators, in the order of starling::ReduceOp.
enum StarlingReduceOp {
  STARLING_SUM = 0,
  STARLING_MIN = 1,
  STARLING_MAX = 2,
  STARLING_AVERAGE = 3,
  STARLING_PRODUCT = 4,
};

typedef void (*StarlingDone)(void* arg, int code, const char* message);

typedef struct StarlingCollectiveApi {
  // STARLING_COLLECTIVE_API_VERSION of the module that made the table.
  int version;
  // Opaque; the first argument of every function below.
  void* client;
  // Every worker of the job and this worker's slot among them (see
  // Client::slot()); 0 and -1 until a run began (after the first op).
  int (*total_workers)(void* client);
  int (*slot)(void* client);
  // `bytes` zeroed bytes in the worker's shared pool, kept until the client
  // closes (ops need their data there). NULL when the pool is full; then
  // `error` (of `error_bytes`) holds why.
  void* (*allocate)(void* client, size_t bytes, char* error,
                    size_t error_bytes);
  // Starts a collective on data[0, bytes) (pool memory; data and bytes
  // ignored for a barrier); `root` is the broadcast's slot, `op` a
  // StarlingReduceOp for all-reduce and reduce-scatter. Calls
  // done(arg, code, message) once when the op ended. The data is the
  // caller's scratch memory (Client's CollectiveOptions::scratch): a
  // failed op may leave it changed.
  void (*start)(void* client, int kind, void* data, size_t bytes, int dtype,
                int op, int root, StarlingDone done, void* arg);
} StarlingCollectiveApi;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // STARLING_CLIENT_PYTHON_COLLECTIVE_API_H_
