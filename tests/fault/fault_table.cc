// The fault table: each fault injected --runs times into a fresh job on
// loopback (coordinator, daemons, quadratic workers with momentum;
// tests/node's NodeCluster), timed from the injection:
//
//   detect    the coordinator has acted on it (a new group epoch, or the
//             restarted coordinator serving the group again);
//   resume    a step committed again: in the run that went on at N-1 (a
//             survivor applied a step past the one in flight), or the
//             first step of the next run;
//   rolled    pushed steps the survivors' workers were told were rolled
//             back (Client::Rejoin), at most the step in flight;
//   acked     acknowledged updates lost: steps whose push had returned to a
//             worker (committed) that are not in the run that went on,
//             counted from each worker's "acknowledged through step A" and
//             "rejoined at step V" (V > A keeps them all); for a run that
//             could not go on, every step it had applied;
//   identical the survivors' workers end with bit-identical parameters,
//             and the run finished every step it was given.
//
// Prints a Markdown table (median and worst per fault) and writes it to
// --out. Every wait is bounded; a bound that passes counts as a hang.
// Run through tests/fault/run_fault_table.sh (bazel test, manual tag).
//
// With --churn=10m instead: the churn run (tests/fault/run_churn.sh), runs
// back to back on 4 daemons while one is killed every --churn_every and
// started again 5 s later; runs finished and failed, hangs, step rate.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/node_admin.pb.h"
#include "tests/node/node_cluster.h"

ABSL_FLAG(int, runs, 3, "runs of each fault");
ABSL_FLAG(std::string, out, "", "also write the table here (Markdown)");
ABSL_FLAG(std::string, only, "",
          "run only the faults whose name contains this");
ABSL_FLAG(absl::Duration, churn, absl::ZeroDuration(),
          "instead of the table: a churn run this long (after a fault-free "
          "baseline of a sixth of it, at most a minute)");
ABSL_FLAG(absl::Duration, churn_every, absl::Seconds(30),
          "churn: one fault this often (kill -9 of a random daemon, started "
          "again 5 s later, as systemd would)");
ABSL_FLAG(bool, logs, false,
          "print the coordinator's and daemons' logs of a case that hung, "
          "failed or resumed later than 3 s");

namespace starling {
namespace testing_node {
namespace {

constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(2);
constexpr absl::Duration kBound = absl::Seconds(30);
// Steps of the run a mid-run fault hits (about 7 ms each here).
constexpr int kRunSteps = 400;

struct Sample {
  bool ok = true;
  bool hung = false;
  double detect_s = -1;
  double resume_s = -1;
  int64_t rolled_back = 0;  // pushed steps rolled back, worst worker
  int64_t acked_lost = 0;   // acknowledged updates lost
  bool identical = true;    // survivors' parameters bit-identical
  std::string note;
};

Sample Failed(bool hung, double detect_s, double resume_s,
              const std::string& note) {
  Sample s;
  s.ok = false;
  s.hung = hung;
  s.detect_s = detect_s;
  s.resume_s = resume_s;
  s.note = note;
  return s;
}

// Seeded per fault and run: the same table draws the same kill points.
std::mt19937& Random() {
  static std::mt19937 random(20261127);
  return random;
}

// Waits a random share of a step (0-10 ms) so that a kill lands anywhere
// in it: the gradient's reduce-scatter, the update, the replica's shift,
// the all-gather, the worker's pull.
void RandomPointOfAStep() {
  std::uniform_int_distribution<int> micros(0, 10000);
  absl::SleepFor(absl::Microseconds(micros(Random())));
}

ClusterOptions Options(int daemons) {
  ClusterOptions options;
  options.daemons = daemons;
  options.local_workers = 1;
  options.optimizer = "momentum";
  options.parameter_count = 1000;
  options.heartbeat_timeout = kHeartbeatTimeout;
  options.collective_timeout = absl::Seconds(10);
  return options;
}

// Polls `done` every 5 ms until it holds (the time then) or `bound` passes.
std::optional<absl::Time> PollUntil(const std::function<bool()>& done,
                                    absl::Duration bound = kBound) {
  const absl::Time give_up = absl::Now() + bound;
  while (absl::Now() < give_up) {
    if (done()) return absl::Now();
    absl::SleepFor(absl::Milliseconds(5));
  }
  return std::nullopt;
}

proto::JobStatus Job(NodeCluster& cluster) {
  proto::JobStatus status;
  std::string error;
  if (!cluster.JobStatus(&status, &error)) return proto::JobStatus();
  return status;
}

// Daemon `daemon` serves group `epoch` of `size` ranks: its data plane is
// formed (no peer JOINING).
bool Serves(NodeCluster& cluster, int daemon, uint64_t epoch, int size) {
  proto::GroupReply group;
  std::string error;
  if (!cluster.NodeGroup(daemon, &group, &error) ||
      group.group_epoch() != epoch || group.peers_size() != size) {
    return false;
  }
  for (const proto::PeerInfo& peer : group.peers()) {
    if (peer.health() == proto::NODE_HEALTH_JOINING) return false;
  }
  return true;
}

// Workers on `daemons`, a short run; true if all exit 0 bit-identical.
bool TrainOn(NodeCluster& cluster, const std::vector<int>& daemons,
             int steps = 10) {
  std::vector<pid_t> pids;
  for (int d : daemons) {
    pids.push_back(cluster.StartWorker(
        d, 0, {absl::StrCat("--steps=", steps), "--timeout=20s"}));
  }
  std::string first;
  bool ok = true;
  for (size_t i = 0; i < pids.size(); ++i) {
    const ProcessResult r = cluster.Wait(pids[i], kBound);
    const size_t at = r.out.find("params=");
    if (r.exit_code != 0 || at == std::string::npos) {
      ok = false;
      continue;
    }
    if (i == 0) first = r.out.substr(at);
    ok &= r.out.substr(at) == first;
  }
  return ok;
}

// The flags of a long-running worker.
std::vector<std::string> LongRunFlags() {
  return {absl::StrCat("--steps=", kRunSteps), "--step_delay=5ms",
          "--timeout=20s"};
}

// Long-running workers on every daemon; returns once each daemon applied
// a few steps (nullopt if they did not within the bound).
std::optional<std::vector<pid_t>> StartLongRun(NodeCluster& cluster) {
  std::vector<pid_t> pids;
  for (int d = 0; d < cluster.options().daemons; ++d) {
    pids.push_back(cluster.StartWorker(d, 0, LongRunFlags()));
  }
  const bool going =
      PollUntil([&] {
        for (int d = 0; d < cluster.options().daemons; ++d) {
          proto::NodeStatusReply status;
          std::string error;
          if (!cluster.NodeStatus(d, &status, &error) ||
              status.run().state() != proto::RunStatus::STATE_RUNNING ||
              status.run().steps() < 20) {
            return false;
          }
        }
        return true;
      }).has_value();
  if (!going) {
    if (absl::GetFlag(FLAGS_logs)) {
      for (pid_t pid : pids) {
        std::fprintf(stderr, "worker: %s\n", cluster.Stderr(pid).c_str());
      }
      std::fprintf(stderr, "no run going:\n%s\n", cluster.ServerLogs().c_str());
    }
    return std::nullopt;
  }
  return pids;
}

// The first step of a run on `daemons` after `from`: starts a worker on
// each and returns when one daemon applied a step of the new run.
std::optional<absl::Time> FirstStep(NodeCluster& cluster,
                                    const std::vector<int>& daemons,
                                    uint64_t after_run,
                                    std::vector<pid_t>* pids) {
  for (int d : daemons) {
    pids->push_back(cluster.StartWorker(
        d, 0, {"--steps=30", "--step_delay=5ms", "--timeout=20s"}));
  }
  return PollUntil([&] {
    proto::NodeStatusReply status;
    std::string error;
    return cluster.NodeStatus(daemons[0], &status, &error) &&
           status.run().run_id() > after_run &&
           status.run().state() == proto::RunStatus::STATE_RUNNING &&
           status.run().steps() >= 1;
  });
}

bool AllExitZero(NodeCluster& cluster, const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t pid : pids) ok &= cluster.Wait(pid, kBound).exit_code == 0;
  return ok;
}

// A worker that exited 0 ended with the parameters `*first` holds (the
// first such worker's, set by it); `s->identical` says whether all did.
void SameParams(const ProcessResult& r, std::string* first, Sample* s) {
  const size_t at = r.out.find("params=");
  const std::string params =
      at == std::string::npos ? std::string() : r.out.substr(at);
  if (first->empty()) *first = params;
  s->identical &= !params.empty() && params == *first;
}

// How run `run` of the job ended (as far as the coordinator's recent runs
// tell): its steps and state; untouched if it is not among them.
void RunOutcome(NodeCluster& cluster, uint64_t run, int64_t* steps,
                proto::RunStatus::State* state) {
  const proto::JobStatus job = Job(cluster);
  for (const proto::RunStatus& r : job.recent_runs()) {
    if (r.run_id() == run) {
      *steps = r.steps();
      *state = r.state();
    }
  }
}

uint64_t CurrentRun(NodeCluster& cluster) {
  const proto::JobStatus s = Job(cluster);
  return s.current_run().run_id();
}

// --- The faults
// ---------------------------------------------------------------

// kill -9 of daemon 1 of 3 between runs.
Sample KillBetweenRuns() {
  Sample s;
  NodeCluster cluster(Options(3));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  if (!TrainOn(cluster, {0, 1, 2})) return Failed(false, -1, -1, "setup");
  const uint64_t last_run = Job(cluster).recent_runs_size() > 0
                                ? Job(cluster).recent_runs(0).run_id()
                                : 0;
  const absl::Time t0 = absl::Now();
  cluster.Kill(cluster.daemon_pid(1), SIGKILL);
  const auto detected =
      PollUntil([&] { return Job(cluster).group_epoch() >= 2; });
  if (!detected) return Failed(true, -1, -1, "not re-formed");
  s.detect_s = absl::ToDoubleSeconds(*detected - t0);
  if (!PollUntil([&] {
        return Serves(cluster, 0, 2, 2) && Serves(cluster, 2, 2, 2);
      })) {
    return Failed(true, s.detect_s, -1, "survivors not serving");
  }
  std::vector<pid_t> pids;
  const auto step = FirstStep(cluster, {0, 2}, last_run, &pids);
  if (!step) return Failed(true, s.detect_s, -1, "no step at N-1");
  s.resume_s = absl::ToDoubleSeconds(*step - t0);
  s.ok = AllExitZero(cluster, pids);
  return s;
}

// The number after the first `prefix` in `text` at or after `*from`
// (moved past it), or -1.
int64_t NumberAfter(const std::string& text, const std::string& prefix,
                    size_t* from) {
  const size_t at = text.find(prefix, *from);
  if (at == std::string::npos) return -1;
  *from = at + prefix.size();
  return std::strtoll(text.c_str() + *from, nullptr, 10);
}

// What a survivor's worker said of each rejoin ("rejoined run R at step V
// ...; k pushed step(s) rolled back; acknowledged through step A"): adds
// its rolled-back steps and acknowledged updates lost (A - V + 1 where the
// run went on at or before a step whose push had returned) to `s`.
void CountRejoins(const std::string& err, Sample* s, int* rejoins) {
  size_t from = 0;
  while (true) {
    const int64_t v = NumberAfter(err, "rejoined run ", &from) < 0
                          ? -1
                          : NumberAfter(err, " at step ", &from);
    if (v < 0) return;
    ++*rejoins;
    const int64_t k =
        NumberAfter(err, " of ", &from) < 0 ? 0 : NumberAfter(err, "; ", &from);
    const int64_t a = NumberAfter(err, "acknowledged through step ", &from);
    s->rolled_back = std::max(s->rolled_back, k);
    s->acked_lost += std::max<int64_t>(0, a - v + 1);
  }
}

// The daemons (of `cluster`'s) that are not in `victims`.
std::vector<int> Others(NodeCluster& cluster, const std::vector<int>& victims) {
  std::vector<int> others;
  for (int d = 0; d < cluster.options().daemons; ++d) {
    if (std::find(victims.begin(), victims.end(), d) == victims.end()) {
      others.push_back(d);
    }
  }
  return others;
}

// What the survivors `daemons` logged of the shard owners' state move: the
// replicas checked against their surviving owners, and how many differed.
std::string ReplicaChecks(NodeCluster& cluster,
                          const std::vector<int>& daemons) {
  const std::string log = cluster.Stderr(cluster.daemon_pid(daemons[0]));
  const size_t at = log.rfind(" replica(s) checked against their owners, ");
  if (at == std::string::npos) return "no state move logged";
  size_t begin = at;
  while (begin > 0 && log[begin - 1] >= '0' && log[begin - 1] <= '9') --begin;
  const size_t end = log.find(" differing", at);
  return absl::StrCat(
      log.substr(begin, end == std::string::npos ? std::string::npos
                                                 : end - begin + 10),
      " (CRC of values and optimizer state at equal update counts)");
}

// Sends `signal` to `victims` at a random point of a step of a run of
// kRunSteps: times the coordinator's re-formation without them (a group of
// the others, all healthy) and the first step committed after it: in the
// run that went on (`goes_on`: every lost shard has a replica on a
// survivor) or the next run. Counts what the survivors' workers were told
// (rolled back, acknowledged lost) and compares their parameters; the run
// that went on must finish every step. `after_kill` runs right after the
// victims are signalled (a restart), `later` are killed (-9) as soon as the
// first loss is detected.
// The victims are left as they are.
Sample MidRunFault(NodeCluster& cluster, const std::vector<int>& victims,
                   int signal, bool goes_on, const std::vector<int>& later = {},
                   const std::function<void()>& after_kill = nullptr) {
  Sample s;
  std::vector<int> lost = victims;
  lost.insert(lost.end(), later.begin(), later.end());
  const std::vector<int> others = Others(cluster, lost);
  const int size = static_cast<int>(others.size());
  const int first_size =
      cluster.options().daemons - static_cast<int>(victims.size());
  const auto workers = StartLongRun(cluster);
  if (!workers) return Failed(true, -1, -1, "setup");
  const uint64_t run = CurrentRun(cluster);
  RandomPointOfAStep();
  const absl::Time t0 = absl::Now();
  for (int v : victims) cluster.Kill(cluster.daemon_pid(v), signal);
  if (after_kill) after_kill();
  const auto detected = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    return j.group_epoch() >= 2 && j.group_size() <= first_size &&
           j.healthy_nodes() == j.group_size();
  });
  if (!detected) return Failed(true, -1, -1, "not re-formed");
  s.detect_s = absl::ToDoubleSeconds(*detected - t0);
  for (int v : later) cluster.Kill(cluster.daemon_pid(v), SIGKILL);
  if (goes_on) {
    // Resumed: a survivor serves the new group and applied a step of the
    // same run past the one it held when it did (at most a step late).
    int64_t held = -1;
    const auto resumed = PollUntil([&] {
      proto::NodeStatusReply status;
      std::string error;
      if (!cluster.NodeStatus(others[0], &status, &error) ||
          status.run().run_id() != run ||
          status.run().state() != proto::RunStatus::STATE_RUNNING) {
        return false;
      }
      if (held < 0) {
        const proto::JobStatus j = Job(cluster);
        if (j.group_size() != size ||
            !Serves(cluster, others[0], j.group_epoch(), size)) {
          return false;
        }
        held = status.run().steps();
        return false;
      }
      return status.run().steps() > held;
    });
    if (resumed) s.resume_s = absl::ToDoubleSeconds(*resumed - t0);
  }
  std::string first;
  int rejoins = 0;
  int exited_ok = 0;
  for (int d : others) {
    const ProcessResult r = cluster.Wait((*workers)[d], kBound);
    s.hung |= r.timed_out;
    if (r.timed_out && absl::GetFlag(FLAGS_logs)) {
      std::fprintf(stderr, "worker of daemon %d hung: %s\n%s\n", d,
                   r.err.c_str(), cluster.ServerLogs().c_str());
    }
    CountRejoins(r.err, &s, &rejoins);
    if (r.exit_code != 0) continue;
    ++exited_ok;
    SameParams(r, &first, &s);
  }
  const proto::JobStatus job = Job(cluster);
  const uint64_t epoch = job.group_epoch();
  PollUntil([&] {
    for (int d : others) {
      if (!Serves(cluster, d, epoch, size)) return false;
    }
    return true;
  });
  int64_t steps_of_run = -1;
  proto::RunStatus::State state = proto::RunStatus::STATE_UNSPECIFIED;
  RunOutcome(cluster, run, &steps_of_run, &state);
  // The shard owners count updates, not steps: each worker pushes its
  // kRunSteps, and the run finished once every worker did.
  const bool shard_owners = cluster.options().mode == "parameter_server";
  if (goes_on) {
    s.ok = !s.hung && exited_ok == size && s.resume_s >= 0 &&
           state == proto::RunStatus::STATE_FINISHED &&
           (shard_owners || steps_of_run == kRunSteps) && rejoins >= size;
    s.note = absl::StrCat(
        "epoch ", epoch, ", run ",
        state == proto::RunStatus::STATE_FINISHED ? "finished"
                                                  : "did not finish",
        shard_owners
            ? absl::StrCat("; ", ReplicaChecks(cluster, others))
            : absl::StrCat(" ", steps_of_run, " of ", kRunSteps, " steps"));
    if ((!s.ok || s.resume_s > 3) && absl::GetFlag(FLAGS_logs)) {
      std::fprintf(stderr, "did not go on within 3 s:\n%s\n",
                   cluster.ServerLogs().c_str());
    }
    return s;
  }
  // The run could not go on: it failed on every survivor, explicitly; all
  // its steps are lost (no durable checkpoint yet); the next run trains.
  s.identical = true;
  s.acked_lost = std::max<int64_t>(0, steps_of_run);
  std::vector<pid_t> pids;
  const auto step = FirstStep(cluster, others, run, &pids);
  if (!step) {
    if (absl::GetFlag(FLAGS_logs)) {
      std::fprintf(stderr, "no step at N-%zu:\n%s\n", victims.size(),
                   cluster.ServerLogs().c_str());
    }
    return Failed(true, s.detect_s, -1, "no step");
  }
  s.resume_s = absl::ToDoubleSeconds(*step - t0);
  s.ok = AllExitZero(cluster, pids) && !s.hung && exited_ok == 0 &&
         state == proto::RunStatus::STATE_FAILED;
  s.note = absl::StrCat("epoch ", epoch, ", run failed after ", steps_of_run,
                        " steps; the next run trains");
  return s;
}

// kill -9 of daemon 1 of 3 during a run of parameter-server pushes: the
// lost shard from its buddy's replica, which had every push a worker was
// told was applied.
Sample KillMidRunParameterServer() {
  ClusterOptions options = Options(3);
  options.mode = "parameter_server";
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  return MidRunFault(cluster, {1}, SIGKILL, /*goes_on=*/true);
}

// kill -9 of daemon 1 of 3 during a run.
Sample KillMidRun() {
  NodeCluster cluster(Options(3));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  return MidRunFault(cluster, {1}, SIGKILL, /*goes_on=*/true);
}

// Daemon 1 of 3 killed -9 during a run, with its worker, and started
// again at once with the same flags (systemd's Restart=on-failure; its
// join may come before its loss is detected), then a worker on it: the
// coordinator drops its old self and takes the new one into the running
// run (one re-formation, or two where the loss was acted on first), the
// others send it its shard, its buddy's replica and the parameters, and
// the run finishes on all three. *detect*: a new epoch without the old
// self; *resume*: a step committed with the restarted daemon's worker
// (started once its daemon served); the note says when the restarted
// daemon served the running run again.
Sample KillAndRestartMidRun() {
  NodeCluster cluster(Options(3));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  Sample s;
  const auto workers = StartLongRun(cluster);
  if (!workers) return Failed(true, -1, -1, "setup");
  std::vector<pid_t> pids = *workers;
  const uint64_t run = CurrentRun(cluster);
  RandomPointOfAStep();
  const absl::Time t0 = absl::Now();
  cluster.Kill(cluster.daemon_pid(1), SIGKILL);
  cluster.Kill(pids[1], SIGKILL);
  cluster.Wait(cluster.daemon_pid(1), absl::Seconds(5));
  cluster.Wait(pids[1], absl::Seconds(5));
  const absl::Time restarted = absl::Now();
  cluster.StartDaemon(1, {});
  const auto detected =
      PollUntil([&] { return Job(cluster).group_epoch() >= 2; });
  if (!detected) return Failed(true, -1, -1, "not re-formed");
  s.detect_s = absl::ToDoubleSeconds(*detected - t0);
  // Back: every daemon serves the whole group, the run going on.
  uint64_t epoch = 0;
  const auto back = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    if (j.group_epoch() < 2 || j.group_size() != 3 || j.healthy_nodes() != 3 ||
        j.current_run().run_id() != run) {
      return false;
    }
    for (int d = 0; d < 3; ++d) {
      if (!Serves(cluster, d, j.group_epoch(), 3)) return false;
    }
    proto::NodeStatusReply status;
    std::string error;
    epoch = j.group_epoch();
    return cluster.NodeStatus(1, &status, &error) &&
           status.run().run_id() == run &&
           status.run().state() == proto::RunStatus::STATE_RUNNING;
  });
  if (!back) return Failed(true, s.detect_s, -1, "not taken into the run");
  pids[1] = cluster.StartWorker(1, 0, LongRunFlags());
  int64_t held = -1;
  const auto resumed = PollUntil([&] {
    proto::NodeStatusReply status;
    std::string error;
    if (!cluster.NodeStatus(1, &status, &error) ||
        status.run().run_id() != run) {
      return false;
    }
    if (held < 0) held = status.run().steps();
    return status.run().steps() > held;
  });
  if (resumed) s.resume_s = absl::ToDoubleSeconds(*resumed - t0);
  std::string first;
  int rejoins = 0;
  int exited_ok = 0;
  for (int d = 0; d < 3; ++d) {
    const ProcessResult r = cluster.Wait(pids[d], kBound);
    s.hung |= r.timed_out;
    if (d != 1) CountRejoins(r.err, &s, &rejoins);
    if (r.exit_code != 0) {
      if (absl::GetFlag(FLAGS_logs)) {
        std::fprintf(stderr, "worker of daemon %d: %s\n%s\n", d, r.err.c_str(),
                     cluster.ServerLogs().c_str());
      }
      continue;
    }
    ++exited_ok;
    SameParams(r, &first, &s);
  }
  int64_t steps_of_run = -1;
  proto::RunStatus::State state = proto::RunStatus::STATE_UNSPECIFIED;
  RunOutcome(cluster, run, &steps_of_run, &state);
  s.ok = !s.hung && exited_ok == 3 && s.resume_s >= 0 && rejoins >= 2 &&
         state == proto::RunStatus::STATE_FINISHED && steps_of_run == kRunSteps;
  s.note = absl::StrFormat(
      "epoch %d, run %s %d of %d steps on 3; the restarted daemon served the "
      "run %.2fs after its restart",
      epoch,
      state == proto::RunStatus::STATE_FINISHED ? "finished" : "did not finish",
      steps_of_run, kRunSteps, absl::ToDoubleSeconds(*back - restarted));
  return s;
}

// SIGSTOP of daemon 1 of 3 during a run (its sockets stay open), then
// SIGCONT once the group re-formed without it: it joins afresh.
Sample StopMidRun() {
  NodeCluster cluster(Options(3));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  Sample s = MidRunFault(cluster, {1}, SIGSTOP, /*goes_on=*/true);
  // Woken up, the stopped daemon finds itself dropped and joins afresh.
  const absl::Time woke = absl::Now();
  cluster.Kill(cluster.daemon_pid(1), SIGCONT);
  if (!s.ok) return s;
  const auto back = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    return j.group_epoch() >= 3 && j.group_size() == 3 &&
           j.healthy_nodes() == 3;
  });
  if (!back) {
    s.ok = false;
    s.note = "not taken back after SIGCONT";
  } else {
    s.note = absl::StrFormat("%s; back in the group %.2fs after SIGCONT",
                             s.note, absl::ToDoubleSeconds(*back - woke));
  }
  return s;
}

// Daemon 1 of 3 killed and started again at once with the same flags
// (faster than the heartbeat timeout: its join says it restarted).
Sample RestartSameFlags() {
  Sample s;
  NodeCluster cluster(Options(3));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  if (!TrainOn(cluster, {0, 1, 2})) return Failed(false, -1, -1, "setup");
  const uint64_t last_run = Job(cluster).recent_runs(0).run_id();
  const absl::Time t0 = absl::Now();
  cluster.Kill(cluster.daemon_pid(1), SIGKILL);
  cluster.Wait(cluster.daemon_pid(1), absl::Seconds(5));
  cluster.StartDaemon(1, {});
  const auto whole = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    return j.group_epoch() >= 2 && j.group_size() == 3 &&
           j.healthy_nodes() == 3;
  });
  if (!whole) return Failed(true, -1, -1, "not taken back");
  s.detect_s = absl::ToDoubleSeconds(*whole - t0);
  const uint64_t epoch = Job(cluster).group_epoch();
  if (!PollUntil([&] {
        return Serves(cluster, 0, epoch, 3) && Serves(cluster, 1, epoch, 3) &&
               Serves(cluster, 2, epoch, 3);
      })) {
    return Failed(true, s.detect_s, -1, "not serving");
  }
  std::vector<pid_t> pids;
  const auto step = FirstStep(cluster, {0, 1, 2}, last_run, &pids);
  if (!step) return Failed(true, s.detect_s, -1, "no step");
  s.resume_s = absl::ToDoubleSeconds(*step - t0);
  s.ok = AllExitZero(cluster, pids);
  s.note = absl::StrCat("epoch ", epoch, ", 3 of 3 nodes");
  return s;
}

// kill -9 of the coordinator (with --state_file) during a run, started
// again at once: the run goes on.
Sample KillCoordinatorMidRun() {
  Sample s;
  NodeCluster cluster(Options(3));
  const std::string state =
      TempPath(absl::StrCat("fault-coordinator-", ::getpid(), "-",
                            absl::ToUnixNanos(absl::Now()), ".state"));
  const std::vector<std::string> flags = {absl::StrCat("--state_file=", state)};
  pid_t coordinator = cluster.StartCoordinatorWith("coordinator", flags);
  cluster.StartDaemons();
  std::vector<pid_t> workers;
  for (int d = 0; d < 3; ++d) {
    workers.push_back(cluster.StartWorker(
        d, 0, {"--steps=300", "--step_delay=5ms", "--timeout=30s"}));
  }
  if (!PollUntil([&] {
        const proto::JobStatus j = Job(cluster);
        return j.current_run().run_id() != 0 && j.iteration() >= 20;
      })) {
    return Failed(true, -1, -1, "setup");
  }
  const uint64_t run = CurrentRun(cluster);
  const absl::Time t0 = absl::Now();
  cluster.Kill(coordinator, SIGKILL);
  cluster.Wait(coordinator, absl::Seconds(5));
  coordinator = cluster.StartCoordinatorWith("coordinator2", flags);
  const auto serving = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    return j.formed() && j.healthy_nodes() == 3;
  });
  if (!serving) return Failed(true, -1, -1, "not serving again");
  s.detect_s = absl::ToDoubleSeconds(*serving - t0);
  // The run never stopped: its next step is the resume.
  s.resume_s = s.detect_s;
  for (pid_t pid : workers) {
    const ProcessResult r = cluster.Wait(pid, kBound);
    s.hung |= r.timed_out;
    s.ok &= r.exit_code == 0;
  }
  const auto finished = PollUntil([&] {
    const proto::JobStatus job = Job(cluster);
    for (const proto::RunStatus& r : job.recent_runs()) {
      if (r.run_id() == run) {
        return r.state() == proto::RunStatus::STATE_FINISHED;
      }
    }
    return false;
  });
  s.ok &= finished.has_value();
  s.note = "run finished, 300 of 300 steps";
  return s;
}

// Daemons 1 and 3 of 4 killed together during a run: each one's buddy
// (the next rank) survives, so the run goes on at N-2.
Sample KillTwoMidRun() {
  NodeCluster cluster(Options(4));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  return MidRunFault(cluster, {1, 3}, SIGKILL, /*goes_on=*/true);
}

// Daemons 1 and 2 of 4 killed together: rank 1's only replica was on
// rank 2. The run cannot go on and ends on every survivor naming the
// shard no one holds (never wrong values); the next run trains at N-2.
Sample KillTwoBuddiesMidRun() {
  NodeCluster cluster(Options(4));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  return MidRunFault(cluster, {1, 2}, SIGKILL, /*goes_on=*/false);
}

// The same with durable checkpoints every kCheckpointEvery steps: the run
// goes on at N-2 from the newest version every daemon wrote, an explicit
// rollback (each worker told the step it goes on from; the acknowledged
// steps since the checkpoint are the updates lost), never wrong values.
constexpr int kCheckpointEvery = 20;
Sample KillTwoBuddiesWithCheckpoints() {
  NodeCluster cluster(Options(4));
  const std::string dir = TempPath(absl::StrCat(
      "fault-checkpoints-", ::getpid(), "-", absl::ToUnixNanos(absl::Now())));
  cluster.StartCoordinatorWith(
      "coordinator",
      {absl::StrCat("--checkpoint_dir=", dir),
       absl::StrCat("--checkpoint_every_steps=", kCheckpointEvery)});
  cluster.StartDaemons();
  Sample s = MidRunFault(cluster, {1, 2}, SIGKILL, /*goes_on=*/true);
  absl::StrAppend(&s.note, "; rolled back to a checkpoint (every ",
                  kCheckpointEvery, " steps)");
  std::filesystem::remove_all(dir);
  return s;
}

// The whole job killed (-9: the coordinator, every daemon and every worker)
// at a random point of a step, with durable checkpoints every
// kCheckpointEvery steps, and started again with the same flags (the
// coordinator on its --state_file): the next run goes on from the newest
// version every daemon checkpointed. detect: the group formed again after
// the restart began; resume: a step of the new run committed past the
// checkpoint; acknowledged updates lost (and rolled back): the steps the
// daemons had applied past the checkpoint when read just before the kill.
Sample KillEverythingWithCheckpoints() {
  Sample s;
  NodeCluster cluster(Options(3));
  const std::string base = TempPath(absl::StrCat(
      "fault-everything-", ::getpid(), "-", absl::ToUnixNanos(absl::Now())));
  const std::vector<std::string> flags = {
      absl::StrCat("--state_file=", base, ".state"),
      absl::StrCat("--checkpoint_dir=", base, "-checkpoints"),
      absl::StrCat("--checkpoint_every_steps=", kCheckpointEvery)};
  const pid_t coordinator = cluster.StartCoordinatorWith("coordinator", flags);
  cluster.StartDaemons();
  const auto workers = StartLongRun(cluster);
  if (!workers) return Failed(true, -1, -1, "setup");
  RandomPointOfAStep();
  int64_t applied = 0;
  for (int d = 0; d < 3; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    if (cluster.NodeStatus(d, &status, &error)) {
      applied = std::max<int64_t>(applied, status.run().steps());
    }
  }
  cluster.Kill(coordinator, SIGKILL);
  for (int d = 0; d < 3; ++d) cluster.Kill(cluster.daemon_pid(d), SIGKILL);
  for (pid_t w : *workers) cluster.Kill(w, SIGKILL);
  cluster.Wait(coordinator, kBound);
  for (int d = 0; d < 3; ++d) cluster.Wait(cluster.daemon_pid(d), kBound);
  for (pid_t w : *workers) cluster.Wait(w, kBound);
  const absl::Time t0 = absl::Now();
  cluster.StartCoordinatorWith("coordinator2", flags);
  for (int d = 0; d < 3; ++d) cluster.StartDaemon(d, {});
  const auto formed = PollUntil([&] {
    const proto::JobStatus j = Job(cluster);
    return j.formed() && j.healthy_nodes() == 3;
  });
  if (!formed) return Failed(true, -1, -1, "the group did not form again");
  s.detect_s = absl::ToDoubleSeconds(*formed - t0);
  const auto again = StartLongRun(cluster);
  if (!again) return Failed(true, s.detect_s, -1, "the next run did not go");
  size_t from = 0;
  const int64_t version =
      NumberAfter(cluster.Stderr(cluster.daemon_pid(0)),
                  "goes on from run 1's durable checkpoint of version ", &from);
  const auto stepped = PollUntil([&] {
    proto::NodeStatusReply status;
    std::string error;
    return cluster.NodeStatus(0, &status, &error) &&
           status.run().state() == proto::RunStatus::STATE_RUNNING &&
           status.run().steps() > version;
  });
  if (stepped) s.resume_s = absl::ToDoubleSeconds(*stepped - t0);
  std::string first;
  for (pid_t pid : *again) {
    const ProcessResult r = cluster.Wait(pid, kBound);
    s.hung |= r.timed_out;
    s.ok &= r.exit_code == 0;
    const size_t at = r.out.find("params=");
    const std::string params =
        at == std::string::npos ? std::string() : r.out.substr(at);
    if (first.empty()) first = params;
    s.identical &= !params.empty() && params == first;
  }
  s.ok &= version > 0 && version % kCheckpointEvery == 0;
  s.acked_lost = std::max<int64_t>(0, applied - version);
  s.rolled_back = s.acked_lost;
  s.note = absl::StrCat("run 2 went on from checkpoint version ", version, " (",
                        applied, " steps applied before the kill)");
  return s;
}

// Daemon 1 of 5 killed during a run, then daemon 3 as soon as the
// coordinator re-formed the group without 1 (while the survivors move the
// state): the run goes on at N-2 from a second re-formation.
Sample KillDuringReformation() {
  NodeCluster cluster(Options(5));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  return MidRunFault(cluster, {1}, SIGKILL, /*goes_on=*/true, {3});
}

// --- The churn run
// -------------------------------------------------------------

// Runs of --steps=kChurnSteps on every serving daemon, back to back, for
// `length`; with `every` > 0, daemon k (random) is killed (-9) every
// `every` and started again 5 s later with the same flags.
struct ChurnResult {
  int runs_finished = 0;
  int runs_failed = 0;
  int runs_went_on = 0;  // finished after a daemon was lost under them
  int hangs = 0;
  int faults = 0;
  Sample told;        // rolled back and acknowledged updates lost, from rejoins
  int64_t steps = 0;  // of the finished runs
  double seconds = 0;
};

constexpr int kChurnSteps = 200;

std::vector<std::string> ChurnFlags() {
  return {absl::StrCat("--steps=", kChurnSteps), "--step_delay=5ms",
          "--timeout=30s"};
}

// The daemons that serve the coordinator's current group (none JOINING,
// no node waiting to join); empty while the group is changing.
std::vector<int> ServingDaemons(NodeCluster& cluster) {
  const proto::JobStatus job = Job(cluster);
  if (!job.formed()) return {};
  std::vector<int> serving;
  for (const proto::NodeStatus& node : job.nodes()) {
    if (node.peer().rank() < 0) return {};  // a node waits to be taken in
    if (node.peer().health() != proto::NODE_HEALTH_HEALTHY) return {};
    const std::string host = node.peer().hostname();  // "node<d>"
    const int d = std::atoi(host.c_str() + 4);
    if (!Serves(cluster, d, job.group_epoch(), job.group_size())) return {};
    serving.push_back(d);
  }
  return serving;
}

ChurnResult Churn(NodeCluster& cluster, absl::Duration length,
                  absl::Duration every, uint32_t seed) {
  ChurnResult result;
  const int daemons = cluster.options().daemons;
  const absl::Time start = absl::Now();
  const absl::Time end = start + length;
  absl::Time next_fault =
      every > absl::ZeroDuration() ? start + every : absl::InfiniteFuture();
  int down = -1;
  int restarted = -1;  // a daemon started again, no worker on it yet
  absl::Time restart_at = absl::InfiniteFuture();
  std::vector<pid_t> batch;
  std::vector<int> batch_daemons;
  std::vector<bool> batch_lost;  // its daemon was killed during the run
  absl::Time batch_started;
  while (absl::Now() < end || !batch.empty()) {
    const absl::Time now = absl::Now();
    if (now >= next_fault && down < 0 && now < end) {
      seed = seed * 1103515245u + 12345u;
      down = static_cast<int>((seed >> 16) % daemons);
      cluster.Kill(cluster.daemon_pid(down), SIGKILL);
      cluster.Wait(cluster.daemon_pid(down), absl::Seconds(5));
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch_daemons[i] == down) batch_lost[i] = true;
      }
      restart_at = now + absl::Seconds(5);
      next_fault = now + every;
      ++result.faults;
    }
    if (down >= 0 && now >= restart_at) {
      cluster.StartDaemon(down, {});
      restarted = down;
      down = -1;
      restart_at = absl::InfiniteFuture();
    }
    if (restarted >= 0 && !batch.empty()) {
      // Taken into the running run: a worker on it too (as the job's
      // launcher restarts the node's workers).
      proto::NodeStatusReply status;
      std::string error;
      if (cluster.NodeStatus(restarted, &status, &error) &&
          status.run().state() == proto::RunStatus::STATE_RUNNING) {
        batch_daemons.push_back(restarted);
        batch_lost.push_back(false);
        batch.push_back(cluster.StartWorker(restarted, 0, ChurnFlags()));
        restarted = -1;
      }
    }
    if (!batch.empty()) {
      bool running = false;
      for (pid_t pid : batch) running |= cluster.Alive(pid);
      if (running && now - batch_started < absl::Seconds(90)) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      bool ok = !running;
      if (running) ++result.hangs;
      bool went_on = false;
      int rejoins = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        const ProcessResult r = cluster.Wait(batch[i], absl::Seconds(1));
        // A worker whose daemon was killed under it ends with it; the
        // others carry the run on.
        if (batch_lost[i]) {
          went_on = true;
          continue;
        }
        CountRejoins(r.err, &result.told, &rejoins);
        ok &= r.exit_code == 0;
      }
      if (ok) {
        ++result.runs_finished;
        result.runs_went_on += went_on ? 1 : 0;
        result.steps += kChurnSteps;
      } else {
        ++result.runs_failed;
      }
      batch.clear();
      batch_daemons.clear();
      batch_lost.clear();
      continue;
    }
    if (now >= end) break;
    const std::vector<int> serving = ServingDaemons(cluster);
    if (serving.empty()) {
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    for (int d : serving) {
      batch_daemons.push_back(d);
      batch_lost.push_back(false);
      batch.push_back(cluster.StartWorker(d, 0, ChurnFlags()));
    }
    restarted = -1;  // in this batch from its start
    batch_started = absl::Now();
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

int ChurnMain(absl::Duration length, absl::Duration every) {
  constexpr int kDaemons = 4;
  NodeCluster cluster(Options(kDaemons));
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const absl::Duration baseline_length = std::min(absl::Minutes(1), length / 6);
  const ChurnResult base =
      Churn(cluster, baseline_length, absl::ZeroDuration(), 1);
  const ChurnResult churn = Churn(cluster, length, every, 12345);
  const double base_rate = base.steps / base.seconds;
  const double rate = churn.steps / churn.seconds;
  std::string table = absl::StrFormat(
      "| run | seconds | faults | runs finished (went on after a loss) | "
      "runs failed | hangs | pushed steps rolled back (worst) | "
      "acknowledged updates lost | steps/s (finished runs) | of the "
      "fault-free rate |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n"
      "| fault-free baseline, %d daemons | %.0f | 0 | %d (%d) | %d | %d | "
      "%lld | %lld | %.1f | 100%% |\n"
      "| churn: kill -9 of a random daemon every %s, restarted 5 s later | "
      "%.0f | %d | %d (%d) | %d | %d | %lld | %lld | %.1f | %.0f%% |\n",
      kDaemons, base.seconds, base.runs_finished, base.runs_went_on,
      base.runs_failed, base.hangs,
      static_cast<long long>(base.told.rolled_back),  // NOLINT
      static_cast<long long>(base.told.acked_lost),   // NOLINT
      base_rate, absl::FormatDuration(every), churn.seconds, churn.faults,
      churn.runs_finished, churn.runs_went_on, churn.runs_failed, churn.hangs,
      static_cast<long long>(churn.told.rolled_back),  // NOLINT
      static_cast<long long>(churn.told.acked_lost),   // NOLINT
      rate, 100 * rate / base_rate);
  std::printf("\n%s", table.c_str());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) std::ofstream(out) << table;
  return 0;
}

// --- The table
// ----------------------------------------------------------------

struct Fault {
  std::string name;
  std::function<Sample()> run;
};

std::string Stat(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return x < 0; }),
          v.end());
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  const double median = v.size() % 2 == 1
                            ? v[v.size() / 2]
                            : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return absl::StrFormat("%.2f / %.2f", median, v.back());
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_churn) > absl::ZeroDuration()) {
    return ChurnMain(absl::GetFlag(FLAGS_churn),
                     absl::GetFlag(FLAGS_churn_every));
  }
  const int runs = std::max(1, absl::GetFlag(FLAGS_runs));
  const std::vector<Fault> faults = {
      {"kill -9 of a daemon between runs (3 daemons)", KillBetweenRuns},
      {"kill -9 of a daemon at a random point of a step (3 daemons)",
       KillMidRun},
      {"kill -9 of a daemon mid-run, parameter server (3 daemons)",
       KillMidRunParameterServer},
      {"SIGSTOP of a daemon mid-run, SIGCONT later (3 daemons)", StopMidRun},
      {"daemon killed between runs and restarted with the same flags "
       "(3 daemons)",
       RestartSameFlags},
      {"daemon killed mid-run with its worker, restarted at once with the same "
       "flags, a worker started on it (3 daemons)",
       KillAndRestartMidRun},
      {"kill -9 of the coordinator mid-run, restarted (--state_file)",
       KillCoordinatorMidRun},
      {"kill -9 of two daemons at once, not buddies (4 daemons)",
       KillTwoMidRun},
      {"kill -9 of a second daemon during the re-formation (5 daemons)",
       KillDuringReformation},
      {"kill -9 of two buddies at once (4 daemons): the run cannot go on",
       KillTwoBuddiesMidRun},
      {"kill -9 of two buddies at once (4 daemons), durable checkpoints "
       "every 20 steps",
       KillTwoBuddiesWithCheckpoints},
      {"kill -9 of the whole job (coordinator, 3 daemons, workers), restarted, "
       "durable checkpoints every 20 steps",
       KillEverythingWithCheckpoints},
  };
  std::string table = absl::StrCat(
      "| fault | runs | ok | hangs | detect s (median / worst) | resume s "
      "(median / worst) | pushed steps rolled back (worst) | acknowledged "
      "updates lost (all runs) | survivors bit-identical | note (last run) "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Fault& fault : faults) {
    std::vector<double> detect, resume;
    int ok = 0, hangs = 0, identical = 0;
    int64_t rolled_back = 0, acked_lost = 0;
    std::string note;
    if (fault.name.find(absl::GetFlag(FLAGS_only)) == std::string::npos) {
      continue;
    }
    for (int r = 0; r < runs; ++r) {
      const Sample s = fault.run();
      std::fprintf(stderr,
                   "%s, run %d: ok=%d hung=%d detect=%.2fs resume=%.2fs "
                   "rolled_back=%lld acked_lost=%lld identical=%d %s\n",
                   fault.name.c_str(), r + 1, s.ok, s.hung, s.detect_s,
                   s.resume_s, static_cast<long long>(s.rolled_back),
                   static_cast<long long>(s.acked_lost), s.identical,
                   s.note.c_str());
      ok += s.ok ? 1 : 0;
      hangs += s.hung ? 1 : 0;
      identical += s.identical ? 1 : 0;
      detect.push_back(s.detect_s);
      resume.push_back(s.resume_s);
      rolled_back = std::max(rolled_back, s.rolled_back);
      acked_lost += s.acked_lost;
      note = s.note;
    }
    absl::StrAppend(&table, "| ", fault.name, " | ", runs, " | ", ok, " | ",
                    hangs, " | ", Stat(detect), " | ", Stat(resume), " | ",
                    rolled_back, " | ", acked_lost, " | ", identical, " of ",
                    runs, " | ", note.empty() ? "-" : note, " |\n");
  }
  std::printf("\n%s", table.c_str());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) std::ofstream(out) << table;
  return 0;
}

}  // namespace
}  // namespace testing_node
}  // namespace starling

int main(int argc, char** argv) {
  return starling::testing_node::Main(argc, argv);
}
