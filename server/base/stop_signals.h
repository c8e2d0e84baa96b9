// How a Starling service waits for its end: SIGINT and SIGTERM are blocked
// in every thread (BlockStopSignals, called before any thread starts, so
// that each inherits the mask) and taken by the main thread alone
// (WaitForStopSignal). Call from main() only.
#ifndef STARLING_SERVER_BASE_STOP_SIGNALS_H_
#define STARLING_SERVER_BASE_STOP_SIGNALS_H_

#include <signal.h>

namespace starling {

// Blocks SIGINT and SIGTERM in the calling thread; returns that set.
sigset_t BlockStopSignals();

// Waits for one of `signals`; returns its number.
int WaitForStopSignal(const sigset_t& signals);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_STOP_SIGNALS_H_
