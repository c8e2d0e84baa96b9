// quadratic_worker: an example worker. It trains the quadratic of
// quadratic.h with SGD through the client API: pull the parameters, compute
// this worker's gradient, push it, repeat; then a barrier, a final pull and
// Finish (the run ends; the daemons stay up for the next one). Started in
// place of a worker that left a running run (same --worker_index), it
// resumes where that one stopped.
// In sync modes every step is averaged over all workers by the daemons; in
// parameter-server mode each push is applied by the shard owners at once.
//
// With --pull_view (sync SGD, staleness 0) it reads the parameters in
// place from the daemon's read-only memory (Client::ParametersView)
// instead of pulling copies; --view_checks then also checks, after the
// training, that the view cannot be written and that a stale version is
// refused, and prints "view_checks=ok" before the parameters.
//
// Prints, on success, one line "loss=<loss> params=<hex floats>" (the
// parameters' bit patterns, for the tests' bit-identity check) and exits 0;
// on failure, the error on stderr, exit 1.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "worker/examples/quadratic.h"

ABSL_FLAG(std::string, worker_socket, starling::kDefaultWorkerSocket,
          "the local starling-node's --worker_socket");
ABSL_FLAG(int, worker_index, 0, "this worker's index on its daemon");
ABSL_FLAG(int, steps, 50, "SGD steps");
ABSL_FLAG(bool, summary, false,
          "print one human-readable line (loss, distance to the optimum) "
          "instead of the loss and the parameters' bits");
ABSL_FLAG(int, dim, 1000, "elements of x (the job's --parameter_count)");
ABSL_FLAG(int, declared_dim, -1,
          "declare x with this many elements instead (tests a mismatch)");
ABSL_FLAG(bool, declare_float64, false,
          "declare x as float64 (tests a dtype mismatch)");
ABSL_FLAG(int, staleness, 0,
          "0: synchronous SGD; k > 0: asynchronous pushes, each step computed "
          "on parameters at least k steps old");
ABSL_FLAG(bool, pull_view, false,
          "read the parameters through Client::ParametersView (no copy); "
          "staleness 0 only");
ABSL_FLAG(bool, view_checks, false,
          "with --pull_view: check that the view is read-only and that a "
          "stale version is refused; prints view_checks=ok");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30),
          "bound on connecting and on each op");
ABSL_FLAG(bool, homogeneous, false,
          "every worker minimises the same f (no per-worker offset c)");
ABSL_FLAG(bool, check_allreduce, false,
          "after training, all-reduce [worker number + 1, 1] and check the "
          "sums (prints allreduce=ok)");
ABSL_FLAG(absl::Duration, step_delay, absl::ZeroDuration(),
          "sleep per step (stands in for compute)");
ABSL_FLAG(int, rejoins, 3,
          "when the group of daemons re-forms around a lost daemon and the "
          "run goes on (Client::Rejoin), rejoin it up to this many times");

namespace starling {
namespace examples {

using client::Client;
using client::Tensor;

// [README API sample begins]
// Trains x with `steps` SGD steps through `client`; returns the final x.
// staleness 0: synchronous SGD. staleness k > 0: pushes are asynchronous and
// step t computes on parameters at least k steps old, overlapping compute
// with the daemons' all-reduce (DESIGN.md "Async SGD"). A worker started in
// place of one that left a running run (same index) resumes at the step
// its predecessor reached: client.first_step().
absl::StatusOr<std::vector<float>> Train(Client& client, int dim, int steps,
                                         int staleness, bool homogeneous,
                                         absl::Duration delay,
                                         absl::Duration timeout,
                                         bool rejoined = false,
                                         int64_t* acknowledged = nullptr) {
  absl::Status status =
      rejoined ? absl::OkStatus()
               : client.DeclareTensor("x", {dim}, client::DataType::kFloat32);
  if (!status.ok()) return status;
  // Buffers live in the client's shared-memory pool: zero copy. A pushed
  // buffer is read by the daemon until its push completes, so each push in
  // flight gets its own.
  absl::StatusOr<absl::Span<float>> x = client.AllocateTensor("x");
  if (!x.ok()) return x.status();
  std::vector<absl::Span<float>> grads;
  for (int i = 0; i <= staleness; ++i) {
    absl::StatusOr<absl::Span<float>> grad = client.AllocateTensor("x");
    if (!grad.ok()) return grad.status();
    grads.push_back(*grad);
  }
  // This worker's number in the job, for its share of the objective.
  const int workers =
      homogeneous ? 1 : client.group_size() * client.local_workers();
  const int me = homogeneous ? 0
                             : client.rank() * client.local_workers() +
                                   client.worker_index();

  // The first pull ends the declarations; then first_step() is final.
  status = client.PullParameters(client.first_step(), {Tensor{"x", *x}});
  if (!status.ok()) return status;
  const int64_t first = client.first_step();
  std::vector<client::Future> pushes(staleness + 1);
  for (int64_t step = first; step < steps; ++step) {
    const int slot = static_cast<int>(step % (staleness + 1));
    // The push that last used this buffer must be done with it.
    if (step - first > staleness &&
        !(status = pushes[slot].Wait(timeout)).ok()) {
      return status;
    }
    // The parameters after at least `step - staleness` updates.
    status = client.PullParameters(std::max(first, step - staleness),
                                   {Tensor{"x", *x}});
    if (!status.ok()) return status;
    QuadraticGradient(me, workers, *x, grads[slot]);
    absl::SleepFor(delay);  // stands in for more compute
    pushes[slot] = client.PushGradientsAsync(step, {{"x", grads[slot]}});
    if (staleness == 0 && !(status = pushes[slot].Wait(timeout)).ok()) {
      return status;
    }
    if (staleness == 0 && acknowledged != nullptr) *acknowledged = step;
  }
  for (int64_t step = std::max<int64_t>(first, steps - staleness - 1);
       step < steps; ++step) {
    status = pushes[step % (staleness + 1)].Wait(timeout);
    if (!status.ok()) return status;
  }
  status = client.Barrier();  // every worker has pushed its last step
  if (!status.ok()) return status;
  status = client.PullParameters(steps, {Tensor{"x", *x}});
  if (!status.ok()) return status;
  return std::vector<float>(x->begin(), x->end());
}
// [README API sample ends]

// Train() with staleness 0, reading the parameters through views: the
// same arithmetic on the same values, so the same bits.
absl::StatusOr<std::vector<float>> TrainWithViews(Client& client, int dim,
                                                  int steps) {
  absl::Status status =
      client.DeclareTensor("x", {dim}, client::DataType::kFloat32);
  if (!status.ok()) return status;
  absl::StatusOr<absl::Span<float>> grad = client.AllocateTensor("x");
  if (!grad.ok()) return grad.status();
  const int workers = client.group_size() * client.local_workers();
  const int me = client.rank() * client.local_workers() + client.worker_index();
  for (int64_t step = client.first_step(); step < steps; ++step) {
    // Valid until this worker's push of `step`.
    absl::StatusOr<absl::Span<const float>> x =
        client.ParametersView(step, "x");
    if (!x.ok()) return x.status();
    QuadraticGradient(me, workers, *x, *grad);
    status = client.PushGradients(step, {{"x", *grad}});
    if (!status.ok()) return status;
  }
  status = client.Barrier();
  if (!status.ok()) return status;
  absl::StatusOr<absl::Span<const float>> x = client.ParametersView(steps, "x");
  if (!x.ok()) return x.status();
  return std::vector<float>(x->begin(), x->end());
}

// After TrainWithViews (the parameters hold version `steps`): the view's
// memory is read-only for this process, and a stale version is refused.
absl::Status CheckViews(Client& client, int steps) {
  absl::StatusOr<absl::Span<const float>> x = client.ParametersView(steps, "x");
  if (!x.ok()) return x.status();
  absl::Status status = client.CheckParametersView(steps);
  if (!status.ok()) return status;
  // No writable mapping can be made of it...
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(x->data()) &
                                        ~(page - 1));
  if (::mprotect(start, page, PROT_READ | PROT_WRITE) == 0) {
    return absl::InternalError("mprotect(PROT_WRITE) of the view succeeded");
  }
  // ...and a write through it faults (in a child, which dies of it).
  const pid_t child = ::fork();
  if (child == 0) {
    *const_cast<volatile float*>(x->data()) = 1.0f;
    ::_exit(0);
  }
  int wstatus = 0;
  if (child < 0 || ::waitpid(child, &wstatus, 0) != child ||
      !WIFSIGNALED(wstatus) || WTERMSIG(wstatus) != SIGSEGV) {
    return absl::InternalError(absl::StrCat(
        "a write through the view did not fault (wait status ", wstatus, ")"));
  }
  // A stale version is refused, naming both versions.
  absl::StatusOr<absl::Span<const float>> stale =
      client.ParametersView(steps - 1, "x");
  if (stale.ok() ||
      stale.status().code() != absl::StatusCode::kFailedPrecondition ||
      stale.status().message().find(absl::StrCat("version ", steps - 1)) ==
          absl::string_view::npos ||
      stale.status().message().find(absl::StrCat("version ", steps)) ==
          absl::string_view::npos) {
    return absl::InternalError(
        absl::StrCat("a view of version ", steps - 1, " at version ", steps,
                     " gave: ", stale.ok() ? "OK" : stale.status().ToString()));
  }
  return absl::OkStatus();
}

// Every worker all-reduces [its number + 1, 1]: the sums must be
// W (W + 1) / 2 and W, exactly (small integers in float).
absl::Status CheckAllReduce(Client& client, absl::Duration timeout) {
  const int workers = client.group_size() * client.local_workers();
  const int me = client.rank() * client.local_workers() + client.worker_index();
  absl::StatusOr<absl::Span<float>> data = client.Allocate(2);
  if (!data.ok()) return data.status();
  (*data)[0] = static_cast<float>(me + 1);
  (*data)[1] = 1.0f;
  client::Future done = client.AllReduceAsync(*data);
  absl::Status status = done.Wait(timeout);
  if (!status.ok()) return status;
  if ((*data)[0] != workers * (workers + 1) / 2.0f || (*data)[1] != workers) {
    return absl::InternalError(absl::StrCat("all-reduce gave ", (*data)[0],
                                            ", ", (*data)[1], " for ", workers,
                                            " workers"));
  }
  return absl::OkStatus();
}

// Prints `status` on stderr; returns the failure exit code.
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "quadratic_worker: %s\n",
               std::string(status.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "an example Starling worker training a quadratic with SGD");
  absl::ParseCommandLine(argc, argv);
  client::ClientOptions options;
  options.socket_path = absl::GetFlag(FLAGS_worker_socket);
  options.worker_index = absl::GetFlag(FLAGS_worker_index);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int staleness = absl::GetFlag(FLAGS_staleness);
  if (staleness < 0) {
    std::fprintf(stderr, "quadratic_worker: --staleness must be >= 0\n");
    return 2;
  }
  // Each Train allocates its buffers again after a rejoin.
  options.pool_bytes = (1 + std::max(0, absl::GetFlag(FLAGS_rejoins))) *
                           (staleness + 3) * static_cast<size_t>(dim + 64) *
                           sizeof(float) +
                       4096;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  if ((*client)->run_id() != 0) {
    // In place of a worker that left, or on a daemon taken into the run.
    std::fprintf(
        stderr,
        "quadratic_worker: resumed run %llu at step %lld as worker "
        "%d of rank %d of %d\n",
        static_cast<unsigned long long>((*client)->run_id()),  // NOLINT
        static_cast<long long>((*client)->first_step()),       // NOLINT
        (*client)->worker_index(), (*client)->rank(), (*client)->group_size());
  }
  const int declared_dim = absl::GetFlag(FLAGS_declared_dim);
  absl::StatusOr<std::vector<float>> x;
  if (declared_dim >= 0 || absl::GetFlag(FLAGS_declare_float64)) {
    // Mismatch tests: declare, then end the declarations with a barrier.
    absl::Status status = (*client)->DeclareTensor(
        "x", {declared_dim >= 0 ? declared_dim : dim},
        absl::GetFlag(FLAGS_declare_float64) ? client::DataType::kFloat64
                                             : client::DataType::kFloat32);
    if (status.ok()) status = (*client)->Barrier();
    x = status;
  } else if (absl::GetFlag(FLAGS_pull_view)) {
    x = TrainWithViews(**client, dim, absl::GetFlag(FLAGS_steps));
    if (x.ok() && absl::GetFlag(FLAGS_view_checks)) {
      absl::Status status = CheckViews(**client, absl::GetFlag(FLAGS_steps));
      if (!status.ok()) x = status;
    }
  } else {
    // The last step whose push returned (the update is committed).
    int64_t acknowledged = -1;
    x = Train(**client, dim, absl::GetFlag(FLAGS_steps),
              absl::GetFlag(FLAGS_staleness), absl::GetFlag(FLAGS_homogeneous),
              absl::GetFlag(FLAGS_step_delay), options.timeout,
              /*rejoined=*/false, &acknowledged);
    for (int rejoins = absl::GetFlag(FLAGS_rejoins); !x.ok() && rejoins > 0;
         --rejoins) {
      // A lost daemon: the run may go on in the re-formed group.
      std::fprintf(stderr, "quadratic_worker: %s\n",
                   std::string(x.status().message()).c_str());
      absl::StatusOr<Client::Rejoined> rejoined = (*client)->Rejoin();
      if (!rejoined.ok()) return Fail(rejoined.status());
      std::fprintf(
          stderr,
          "quadratic_worker: rejoined run %llu at step %lld as worker %d of "
          "rank %d of %d; %lld pushed step(s) rolled back; acknowledged "
          "through step %lld%s\n",
          static_cast<unsigned long long>(rejoined->run_id),  // NOLINT
          static_cast<long long>(rejoined->next_step),        // NOLINT
          (*client)->worker_index(), (*client)->rank(), (*client)->group_size(),
          static_cast<long long>(rejoined->rolled_back),  // NOLINT
          static_cast<long long>(acknowledged),           // NOLINT
          rejoined->next_step <= acknowledged ? " -- ACKNOWLEDGED UPDATES LOST"
                                              : "");
      x = Train(**client, dim, absl::GetFlag(FLAGS_steps),
                absl::GetFlag(FLAGS_staleness),
                absl::GetFlag(FLAGS_homogeneous),
                absl::GetFlag(FLAGS_step_delay), options.timeout,
                /*rejoined=*/true, &acknowledged);
    }
  }
  if (!x.ok()) return Fail(x.status());
  std::string checked;
  if (absl::GetFlag(FLAGS_view_checks)) checked = "view_checks=ok ";
  if (absl::GetFlag(FLAGS_check_allreduce)) {
    absl::Status status = CheckAllReduce(**client, options.timeout);
    if (!status.ok()) return Fail(status);
    absl::StrAppend(&checked, "allreduce=ok ");
  }
  // Done: the run ends once every worker of the job finished; the daemons
  // release its memory and stay up for the next run.
  absl::Status finished = (*client)->Finish();
  if (!finished.ok()) return Fail(finished);
  if (absl::GetFlag(FLAGS_summary)) {
    // The job's optimum is x*_i = b_i (see quadratic.h).
    double distance = 0;
    for (size_t i = 0; i < x->size(); ++i) {
      distance = std::max(
          distance, std::fabs(static_cast<double>((*x)[i]) - QuadraticB(i)));
    }
    // FNV-1a over the parameters' bytes: equal hashes, equal parameters.
    uint64_t hash = 14695981039346656037ull;
    for (float v : *x) {
      uint32_t bits;
      __builtin_memcpy(&bits, &v, sizeof(bits));
      for (int b = 0; b < 4; ++b) {
        hash = (hash ^ ((bits >> (8 * b)) & 0xff)) * 1099511628211ull;
      }
    }
    std::printf(
        "worker %d of rank %d: %d steps, loss %.6g (optimum 0), max |x - x*| "
        "%.3g, parameters' hash %016llx\n",
        (*client)->worker_index(), (*client)->rank(),
        absl::GetFlag(FLAGS_steps), QuadraticLoss(*x), distance,
        static_cast<unsigned long long>(hash));  // NOLINT(runtime/int)
    return 0;
  }
  std::string line = absl::StrCat(
      checked, absl::StrFormat("loss=%.9g params=", QuadraticLoss(*x)));
  for (float v : *x) {
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(v), "float is 32 bits");
    __builtin_memcpy(&bits, &v, sizeof(bits));
    absl::StrAppendFormat(&line, "%08x", bits);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace examples
}  // namespace starling

int main(int argc, char** argv) { return starling::examples::Main(argc, argv); }
