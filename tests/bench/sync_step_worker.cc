// sync_step_worker: the worker of tests/bench/sync_step_bench.sh, which
// measures the node daemon's synchronous step (DESIGN.md "One synchronous
// step") with large models. Each worker trains f_w(x) = 0.5 |x - t_w|^2
// with synchronous SGD through the client API: pull version `step`,
// gradient x - t_w (one cheap pass, so the step is dominated by the
// daemons' data path), push `step`. t_w is a per-worker hash of the
// element index, so workers differ and every run computes the same values.
//
// --compute D sleeps D per step before the gradient pass, as a worker
// does while its GPU runs forward and backward. --pipeline pushes
// asynchronously into one of two gradient buffers and waits for step t's
// push only at step t + 2, when its buffer is reused (as starling-worker
// does): the worker pulls version t + 1 and computes while the daemons
// finish step t (its replication included).
//
// With --pull_view the worker reads the parameters in place, read-only,
// from the daemon's memory (Client::ParametersView) instead of pulling a
// copy into its pool; "pull" times the view (the wait for the version).
//
// Warm-up steps first, then the timed steps. With --sync_dir the worker
// stops at two points and waits for the script, which reads the daemons'
// counters there: before the first timed step (file "timed.<rank>.<index>",
// then waits for "timed.go") and after the last one ("done.<rank>.<index>",
// then "done.go"). At those points every step before has completed on every
// daemon (a sync push is answered once its step ran) and no later pull has
// begun, so counter differences cover exactly the timed steps.
//
// Prints one line: rank, index, the medians over timed steps of the step
// (pull + gradient + push), pull, push and gradient times in ms, and an
// FNV-1a hash of the final parameters' bytes (equal on every worker, and
// across builds whose sums are bit-identical). Exit 0 on success; on
// failure the error on stderr, exit 1.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "server/base/worker_socket.h"

ABSL_FLAG(std::string, worker_socket, starling::kDefaultWorkerSocket,
          "the local starling-node's --worker_socket");
ABSL_FLAG(int, worker_index, 0, "this worker's index on its daemon");
ABSL_FLAG(int64_t, dim, 10000000, "parameters (float32 elements)");
ABSL_FLAG(int, warmup, 3, "steps before the timed ones");
ABSL_FLAG(int, steps, 20, "timed steps");
ABSL_FLAG(std::string, sync_dir, "",
          "directory of the handshake files with the bench script; empty: "
          "no handshake");
ABSL_FLAG(bool, pull_view, false,
          "read the parameters through Client::ParametersView (no copy)");
ABSL_FLAG(absl::Duration, compute, absl::ZeroDuration(),
          "simulated forward/backward time per step (the worker sleeps, as "
          "while its GPU computes), before the gradient pass");
ABSL_FLAG(bool, pipeline, false,
          "push asynchronously and wait for step t's push only when its "
          "gradient buffer is reused, at step t + 2 (as starling-worker "
          "does): the worker pulls and computes step t + 1 while the "
          "daemons finish step t");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(120),
          "bound on connecting, each op and each handshake");

namespace starling {
namespace bench {
namespace {

using client::Client;
using client::Tensor;

// Worker `worker`'s target for element i, in [-1, 1).
float Target(int worker, uint64_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(worker) + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(h >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

uint64_t Fnv1a(absl::Span<const float> data) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < data.size() * sizeof(float); ++i) {
    h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool Exists(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

// Writes <dir>/<phase>.<rank>.<index>, then waits for <dir>/<phase>.go.
absl::Status Handshake(const std::string& dir, const std::string& phase,
                       int rank, int index, absl::Duration timeout) {
  if (dir.empty()) return absl::OkStatus();
  const std::string mine = absl::StrCat(dir, "/", phase, ".", rank, ".", index);
  FILE* f = std::fopen(mine.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create ", mine));
  }
  std::fclose(f);
  const std::string go = absl::StrCat(dir, "/", phase, ".go");
  const absl::Time deadline = absl::Now() + timeout;
  while (!Exists(go)) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ", go, " within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return absl::OkStatus();
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The parameters of `version`: a view of the daemon's, or pulled into `x`.
absl::StatusOr<absl::Span<const float>> Parameters(Client& client,
                                                   int64_t version, bool view,
                                                   absl::Span<float> x) {
  if (view) return client.ParametersView(version, "x");
  absl::Status status = client.PullParameters(version, {Tensor{"x", x}});
  if (!status.ok()) return status;
  return absl::Span<const float>(x);
}

absl::Status Run(Client& client, int64_t dim, int warmup, int steps, bool view,
                 const std::string& sync_dir, absl::Duration timeout,
                 absl::Duration compute, bool pipeline) {
  absl::Status status =
      client.DeclareTensor("x", {dim}, client::DataType::kFloat32);
  if (!status.ok()) return status;
  absl::StatusOr<absl::Span<float>> x = client.AllocateTensor("x");
  if (!x.ok()) return x.status();
  absl::StatusOr<absl::Span<float>> grads[2] = {client.AllocateTensor("x"),
                                                client.AllocateTensor("x")};
  if (!grads[0].ok()) return grads[0].status();
  if (!grads[1].ok()) return grads[1].status();
  client::Future pushes[2];
  bool pending[2] = {false, false};
  absl::StatusOr<absl::Span<const float>> params =
      Parameters(client, 0, view, *x);
  if (!params.ok()) return params.status();
  if (client.first_step() != 0) {
    return absl::FailedPreconditionError("the bench starts fresh runs only");
  }
  const int me = client.rank() * client.local_workers() + client.worker_index();
  std::vector<float> target(dim);
  for (int64_t i = 0; i < dim; ++i) target[i] = Target(me, i);

  std::vector<double> step_ms, pull_ms, push_ms, grad_ms;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      // The timed steps begin with no push of the warm-up outstanding.
      for (int s = 0; s < 2; ++s) {
        if (!pending[s]) continue;
        status = pushes[s].Wait(timeout);
        if (!status.ok()) return status;
        pending[s] = false;
      }
      status = Handshake(sync_dir, "timed", client.rank(),
                         client.worker_index(), timeout);
      if (!status.ok()) return status;
    }
    const absl::Time t0 = absl::Now();
    const int slot = static_cast<int>(step % 2);
    if (pending[slot]) {
      status = pushes[slot].Wait(timeout);
      if (!status.ok()) return status;
      pending[slot] = false;
    }
    params = Parameters(client, step, view, *x);
    if (!params.ok()) return params.status();
    const absl::Time t1 = absl::Now();
    if (compute > absl::ZeroDuration()) absl::SleepFor(compute);
    absl::StatusOr<absl::Span<float>>& grad = grads[pipeline ? slot : 0];
    float* g = grad->data();
    const float* p = params->data();
    const float* t = target.data();
    for (int64_t i = 0; i < dim; ++i) g[i] = p[i] - t[i];
    const absl::Time t2 = absl::Now();
    if (pipeline) {
      pushes[slot] = client.PushGradientsAsync(step, {Tensor{"x", *grad}});
      pending[slot] = true;
    } else {
      status = client.PushGradients(step, {Tensor{"x", *grad}});
      if (!status.ok()) return status;
    }
    const absl::Time t3 = absl::Now();
    if (step >= warmup) {
      step_ms.push_back(Ms(t3 - t0));
      pull_ms.push_back(Ms(t1 - t0));
      grad_ms.push_back(Ms(t2 - t1));
      push_ms.push_back(Ms(t3 - t2));
    }
  }
  for (int slot = 0; slot < 2; ++slot) {
    if (!pending[slot]) continue;
    status = pushes[slot].Wait(timeout);
    if (!status.ok()) return status;
  }
  status = Handshake(sync_dir, "done", client.rank(), client.worker_index(),
                     timeout);
  if (!status.ok()) return status;
  status = client.Barrier();
  if (!status.ok()) return status;
  params = Parameters(client, warmup + steps, view, *x);
  if (!params.ok()) return params.status();
  const uint64_t hash = Fnv1a(*params);
  const float x0 = (*params)[0];
  status = client.Finish();
  if (!status.ok()) return status;
  std::printf(
      "rank=%d index=%d step_ms=%.3f pull_ms=%.3f push_ms=%.3f grad_ms=%.3f "
      "params_fnv=%016llx x0=%a\n",
      client.rank(), client.worker_index(), Median(step_ms), Median(pull_ms),
      Median(push_ms), Median(grad_ms), static_cast<unsigned long long>(hash),
      static_cast<double>(x0));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the worker of tests/bench/sync_step_bench.sh (sync SGD, timed steps)");
  absl::ParseCommandLine(argc, argv);
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  if (dim < 1 || absl::GetFlag(FLAGS_warmup) < 0 ||
      absl::GetFlag(FLAGS_steps) < 1) {
    std::fprintf(stderr,
                 "sync_step_worker: need --dim >= 1, --warmup >= 0, "
                 "--steps >= 1\n");
    return 2;
  }
  client::ClientOptions options;
  options.socket_path = absl::GetFlag(FLAGS_worker_socket);
  options.worker_index = absl::GetFlag(FLAGS_worker_index);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.pool_bytes =
      3 * static_cast<size_t>(dim + 64) * sizeof(float) + (size_t{1} << 16);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  absl::Status status = client.status();
  if (status.ok()) {
    status = Run(**client, dim, absl::GetFlag(FLAGS_warmup),
                 absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_pull_view),
                 absl::GetFlag(FLAGS_sync_dir), options.timeout,
                 absl::GetFlag(FLAGS_compute), absl::GetFlag(FLAGS_pipeline));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "sync_step_worker: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace starling

int main(int argc, char** argv) { return starling::bench::Main(argc, argv); }
