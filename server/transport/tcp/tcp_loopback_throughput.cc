// Measures TcpTransport write throughput between two ranks on 127.0.0.1:
//   bazel run -c opt //server/transport/tcp:tcp_loopback_throughput --
//       [total_mib] [chunk_kib] [sockets_per_peer] [socket_buffer_kib]
// Rank 1 writes `total_mib` MiB to rank 0 in chunks of `chunk_kib` KiB, with
// up to 8 chunks in flight; prints GiB/s. Not a test: numbers vary by host.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/time/clock.h"
#include "server/transport/tcp/tcp_test_util.h"

int main(int argc, char** argv) {
  using starling::transport::Completion;
  using starling::transport::WriteMatch;
  using starling::transport::tcp::CreateGroup;
  using starling::transport::tcp::TcpOptions;
  const size_t total = (argc > 1 ? std::atol(argv[1]) : 2048) << 20;
  const size_t chunk = (argc > 2 ? std::atol(argv[2]) : 4096) << 10;
  const int sockets = argc > 3 ? std::atoi(argv[3]) : 1;
  const int buffer_bytes = argc > 4 ? std::atoi(argv[4]) << 10 : 0;
  auto group = CreateGroup(2, [&](TcpOptions& options) {
    options.sockets_per_peer = sockets;
    options.socket_send_buffer_bytes = buffer_bytes;
    options.socket_recv_buffer_bytes = buffer_bytes;
  });
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
    return 1;
  }
  std::vector<std::byte> region(chunk * 8), data(chunk * 8, std::byte{1});
  if (!(*group)[0]->RegisterRegion(1, absl::MakeSpan(region)).ok()) return 1;
  const size_t chunks = total / chunk;
  const absl::Time start = absl::Now();
  for (size_t sent = 0; sent < chunks; sent += 8) {
    Completion done;
    for (size_t i = 0; i < 8 && sent + i < chunks; ++i) {
      (*group)[1]->Write(0, absl::MakeConstSpan(data.data() + i * chunk, chunk),
                         1, i * chunk, 0, &done);
    }
    if (!done.Wait(absl::InfiniteFuture()).ok()) return 1;
    for (size_t i = 0; i < 8 && sent + i < chunks; ++i) {
      if (!(*group)[0]
               ->WaitForWrite(WriteMatch{1, 1, {}}, absl::InfiniteFuture())
               .ok()) {
        return 1;
      }
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf(
      "%zu MiB in %zu KiB chunks, %d socket(s), buffers %d KiB: %.2f GiB/s\n",
      total >> 20, chunk >> 10, sockets, buffer_bytes >> 10,
      static_cast<double>(total) / seconds / (1 << 30));
  return 0;
}
