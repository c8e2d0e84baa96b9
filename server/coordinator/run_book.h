// RunBook: the job's runs as the coordinator records them. Runs follow one
// another on the same daemons (DESIGN.md "Lifetimes"): a run begins when
// every member asked BeginRun (Begin decides that round) and ends when
// every member reported it finished, or one reported it failed (End), or
// the coordinator failed it for a lost member (FailCurrent). The book keeps
// the current run and the last kRecentRuns that ended, and knows which
// failures each rank has yet to hear of.
//
// Run ids are numbered from 1 and never reused; after a coordinator
// restart, Adopt() moves the next id above every id a node reports.
//
// Thread-compatible: the Coordinator calls it under its own mutex.
#ifndef STARLING_SERVER_COORDINATOR_RUN_BOOK_H_
#define STARLING_SERVER_COORDINATOR_RUN_BOOK_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/coordinator_state.pb.h"

namespace starling {
namespace coordinator {

class RunBook {
 public:
  static constexpr int kRecentRuns = 8;

  // `parameter_count`: the coordinator's --parameter_count; 0 lets every
  // run take whatever its tables add up to.
  explicit RunBook(uint64_t parameter_count);

  // Decides a BeginRun round in which every member asked: `requests`,
  // index = rank. Returns the answer every rank gets and starts that run
  // (ending the current one as FINISHED if it still runs: every rank began
  // a new one), or the error every rank gets, starting nothing:
  //   InvalidArgument  a rank sent an error (that error, first by rank);
  //                    a table is malformed or differs from rank 0's
  //                    (naming the tensor, both declarations, both ranks);
  //                    the tables do not add up to --parameter_count.
  // REQUIRES: !requests.empty().
  absl::StatusOr<proto::BeginRunResponse> Begin(
      const std::vector<proto::BeginRunRequest>& requests, absl::Time now);

  struct Ended {
    // This report failed the run (its first failure)...
    bool failed_now = false;
    // ...or was the last member's FINISHED.
    bool finished_now = false;
    // The run's error once failed ("rank 1 (...) step 7: why").
    std::string error;
  };
  // Records that `rank` (`who` in messages, one of `group_size`) ended
  // request.run_id(). A later failure of a failed run keeps the first
  // error; a run the book does not know (ended before a coordinator
  // restart) is recorded as reported.
  // REQUIRES: request.state() is STATE_FINISHED or STATE_FAILED.
  Ended End(int rank, absl::string_view who, int group_size,
            const proto::EndRunRequest& request, absl::Time now);

  // Fails the current run, if one runs, for a cause the coordinator found
  // (`rank` lost: `error`). Returns whether a run failed now.
  bool FailCurrent(int rank, const std::string& error, absl::Time now);

  // The current run goes on in a re-formed group of `group_size` ranks and
  // `total_workers` workers (none of which finished it yet).
  void CarryOn(int group_size, int total_workers);

  // Steps of run `run_id` as a heartbeat reported them (highest kept).
  void NoteSteps(uint64_t run_id, int64_t steps);

  // Failed recent runs that `rank` has not reported ended itself, given the
  // run it reported last (`reported`): it still runs them or has not
  // noticed. Oldest first.
  std::vector<proto::RunFailure> FailuresFor(
      int rank, const proto::RunStatus& reported) const;

  // After a coordinator restart: a re-registering node's current run (a
  // RUNNING one becomes the current run of `group_size` ranks) and the
  // highest run id it saw; new ids continue above both.
  void Adopt(const proto::RunStatus& run, uint64_t highest_run_id,
             int group_size);

  // The book as the coordinator persists it (proto/coordinator_state.proto),
  // and back: a restarted coordinator continues the numbering, the current
  // run and the failures each rank has yet to hear of.
  proto::RunBookState Save() const;
  void Restore(const proto::RunBookState& state);

  // The current run (RUNNING), or nullptr between runs.
  const proto::RunStatus* current() const;
  // Ended runs, newest first, at most kRecentRuns.
  std::vector<proto::RunStatus> Recent() const;
  uint64_t next_run_id() const { return next_run_id_; }

 private:
  struct Run {
    proto::RunStatus status;
    int failed_rank = -1;
    int64_t failed_step = -1;
    // Index = rank: reported FINISHED.
    std::vector<bool> finished;
  };

  // Moves the current run to the recent ones.
  void RetireCurrent();
  void Remember(Run run);
  Run* Find(uint64_t run_id);

  const uint64_t parameter_count_;
  uint64_t next_run_id_ = 1;
  std::optional<Run> current_;
  // Newest first.
  std::deque<Run> recent_;
  // Rank -> highest run id it reported ended.
  std::map<int, uint64_t> last_ended_;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_RUN_BOOK_H_
