// Measures TcpTransport small-write latency between two ranks on 127.0.0.1:
//   bazel run -c opt //server/transport/tcp:tcp_loopback_latency --
//       [iterations] [wait_spin_us] [sizes_bytes...]
// Ping-pong: rank 0 writes `size` bytes to rank 1 and waits for its write's
// completion and for rank 1's answer of the same size; rank 1 waits for the
// ping, then answers the same way. Prints the median and 99th percentile
// round trip per size, with TcpOptions::wait_spin as given. Not a test: numbers
// vary by host.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "server/transport/tcp/tcp_test_util.h"

namespace {

using starling::transport::Completion;
using starling::transport::Transport;
using starling::transport::WriteMatch;

constexpr int kWarmup = 200;

// One side of the ping-pong: `first` writes before it waits. Returns false
// on any transport error.
bool PingPong(Transport* self, int peer, size_t size, int rounds, bool first,
              std::vector<double>* round_trips_us) {
  std::vector<std::byte> region(size), data(size, std::byte{1});
  const uint64_t id = 100 + size;
  if (!self->RegisterRegion(id, absl::MakeSpan(region)).ok()) return false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  bool ok = true;
  for (int i = 0; i < rounds && ok; ++i) {
    const absl::Time start = absl::Now();
    if (!first) {
      ok &= self->WaitForWrite(WriteMatch{id, peer, {}}, deadline).ok();
    }
    Completion done;
    self->Write(peer, data, id, 0, 0, &done);
    ok &= done.Wait(deadline).ok();
    if (first) {
      ok &= self->WaitForWrite(WriteMatch{id, peer, {}}, deadline).ok();
      if (i >= kWarmup) {
        round_trips_us->push_back(
            absl::ToDoubleMicroseconds(absl::Now() - start));
      }
    }
  }
  // Deregistering drops nothing the peer still needs: every ping and pong
  // of this size has been consumed once both sides are done.
  return self->DeregisterRegion(id).ok() && ok;
}

}  // namespace

int main(int argc, char** argv) {
  using starling::transport::tcp::CreateGroup;
  using starling::transport::tcp::TcpOptions;
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int spin_us = argc > 2 ? std::atoi(argv[2]) : 0;
  std::vector<size_t> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(std::atol(argv[i]));
  if (sizes.empty()) sizes = {8, 4096};
  auto group = CreateGroup(2, [&](TcpOptions& options) {
    options.wait_spin = absl::Microseconds(spin_us);
  });
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
    return 1;
  }
  for (size_t size : sizes) {
    std::vector<double> round_trips_us;
    bool ok[2] = {false, false};
    const int rounds = iterations + kWarmup;
    std::thread answerer([&] {
      ok[1] = PingPong((*group)[1].get(), 0, size, rounds, false, nullptr);
    });
    ok[0] = PingPong((*group)[0].get(), 1, size, rounds, true, &round_trips_us);
    answerer.join();
    if (!ok[0] || !ok[1] || round_trips_us.empty()) {
      std::fprintf(stderr, "ping-pong of %zu bytes failed\n", size);
      return 1;
    }
    std::sort(round_trips_us.begin(), round_trips_us.end());
    const size_t n = round_trips_us.size();
    std::printf("%zu bytes: %zu round trips, median %.1f us, p99 %.1f us\n",
                size, n, round_trips_us[n / 2], round_trips_us[n * 99 / 100]);
  }
  return 0;
}
