// CoCoA / CoCoA+ rounds with W simulated workers in one process.
#include "worker/svm/cocoa.h"

#include <cmath>
#include <random>
#include <thread>  // NOLINT(build/c++11)
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/svm/dcd.h"

namespace starling {
namespace svm {
namespace {

// A random dense problem and its strided parts.
struct Data {
  int d;
  std::vector<float> x;
  std::vector<int8_t> y;
  std::vector<std::vector<float>> part_x;
  std::vector<std::vector<int8_t>> part_y;

  Data(int n, int d, uint32_t seed) : d(d) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int i = 0; i < n; ++i) {
      y.push_back(i % 3 == 0 ? 1 : -1);
      for (int j = 0; j < d; ++j) {
        x.push_back(normal(gen) + (j < 3 ? 0.7f * y.back() : 0.0f));
      }
    }
  }
  Problem whole() const {
    Problem p;
    p.features = d;
    p.x = x;
    p.y = y;
    return p;
  }
  std::vector<Problem> Parts(int workers) {
    part_x.assign(workers, {});
    part_y.assign(workers, {});
    for (size_t i = 0; i < y.size(); ++i) {
      part_x[i % workers].insert(part_x[i % workers].end(), x.begin() + i * d,
                                 x.begin() + (i + 1) * d);
      part_y[i % workers].push_back(y[i]);
    }
    std::vector<Problem> parts;
    for (int k = 0; k < workers; ++k) {
      Problem p;
      p.features = d;
      p.x = part_x[k];
      p.y = part_y[k];
      parts.push_back(p);
    }
    return parts;
  }
};

TEST(Cocoa, OneWorkerIsPlainDcd) {
  Data data(300, 5, 2);
  CocoaOptions o;
  o.dcd.eps = 1e-5;
  absl::StatusOr<DcdResult> serial = SolveDcd(data.whole(), o.dcd);
  ASSERT_TRUE(serial.ok());
  for (Combine combine : {Combine::kAdd, Combine::kAverage}) {
    o.combine = combine;
    absl::StatusOr<std::vector<CocoaResult>> r =
        SimulateCocoa(data.Parts(1), o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (size_t j = 0; j < serial->w.size(); ++j) {
      EXPECT_NEAR((*r)[0].w[j], serial->w[j], 1e-9) << CombineName(combine);
    }
    for (size_t i = 0; i < serial->alpha.size(); ++i) {
      EXPECT_NEAR((*r)[0].alpha[i], serial->alpha[i], 1e-9);
    }
    EXPECT_EQ((*r)[0].passes, serial->passes);
    EXPECT_EQ((*r)[0].touched, serial->touched);
  }
}

TEST(Cocoa, FourWorkersReachTheSerialOptimumWithTheSameWeights) {
  Data data(400, 6, 7);
  const Problem whole = data.whole();
  for (Loss loss : {Loss::kL1, Loss::kL2}) {
    CocoaOptions o;
    o.dcd.loss = loss;
    o.dcd.c = 0.5;
    o.dcd.eps = 1e-3;
    o.dcd.max_passes = 50000;
    absl::StatusOr<DcdResult> serial = SolveDcd(whole, o.dcd);
    ASSERT_TRUE(serial.ok());
    absl::StatusOr<std::vector<CocoaResult>> r =
        SimulateCocoa(data.Parts(4), o);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string what = LossName(loss);
    for (const CocoaResult& worker : *r) {
      EXPECT_TRUE(worker.converged) << what;
      EXPECT_EQ(worker.w, (*r)[0].w) << what;
      EXPECT_EQ(worker.passes, (*r)[0].passes) << what;
    }
    // The summed objectives agree with a direct evaluation, and the
    // solution is as good as the serial one.
    const double primal = PrimalObjective(whole, o.dcd, (*r)[0].w);
    EXPECT_NEAR((*r)[0].primal, primal, 1e-9 * primal) << what;
    const double best = PrimalObjective(whole, o.dcd, serial->w);
    EXPECT_NEAR(primal, best, 1e-3 * best) << what;
    EXPECT_GE((*r)[0].gap(), -1e-9) << what;
    EXPECT_LE((*r)[0].gap(), 1e-3 * best) << what;
  }
}

TEST(Cocoa, AveragingApproachesTheOptimumButMissesTheStoppingRule) {
  // See cocoa.h: averaged a_i never land on the box's bounds.
  Data data(400, 6, 7);
  CocoaOptions o;
  o.dcd.eps = 1e-2;
  o.dcd.max_passes = 3000;
  o.combine = Combine::kAverage;
  absl::StatusOr<DcdResult> serial = SolveDcd(data.whole(), o.dcd);
  absl::StatusOr<std::vector<CocoaResult>> r = SimulateCocoa(data.Parts(4), o);
  ASSERT_TRUE(serial.ok() && r.ok());
  EXPECT_FALSE((*r)[0].converged);
  for (const CocoaResult& worker : *r) EXPECT_EQ(worker.w, (*r)[0].w);
  const double best = PrimalObjective(data.whole(), o.dcd, serial->w);
  EXPECT_NEAR(PrimalObjective(data.whole(), o.dcd, (*r)[0].w), best,
              1e-2 * best);
  for (const CocoaResult& worker : *r) {
    for (double a : worker.alpha) {
      EXPECT_GE(a, 0);
      EXPECT_LE(a, o.dcd.c);
    }
  }
}

TEST(Cocoa, EliminationIsGlobalAndSavesVisits) {
  Data data(800, 6, 9);
  CocoaOptions o;
  o.dcd.eps = 1e-2;
  o.dcd.max_passes = 50000;
  o.dcd.elimination = false;
  absl::StatusOr<std::vector<CocoaResult>> full =
      SimulateCocoa(data.Parts(4), o);
  o.dcd.elimination = true;
  int rounds_reported = 0;
  o.on_round = [&](const RoundStats&) { ++rounds_reported; };
  absl::StatusOr<std::vector<CocoaResult>> shrunk =
      SimulateCocoa(data.Parts(4), o);
  ASSERT_TRUE(full.ok() && shrunk.ok());
  ASSERT_TRUE((*full)[0].converged && (*shrunk)[0].converged);
  EXPECT_LT((*shrunk)[0].touched, (*full)[0].touched);
  EXPECT_EQ(rounds_reported, (*shrunk)[0].passes);  // worker 0 reports
  // The last round visited every sample and nothing was out.
  const RoundStats& last = (*shrunk)[0].history.back();
  EXPECT_EQ(last.pass.touched, 800);
  EXPECT_EQ(last.pass.inactive, 0);
  const double pf = PrimalObjective(data.whole(), o.dcd, (*full)[0].w);
  const double ps = PrimalObjective(data.whole(), o.dcd, (*shrunk)[0].w);
  EXPECT_NEAR(ps, pf, 1e-2 * pf);
}

TEST(Cocoa, WorkersWithOtherOptionsAreRefusedByName) {
  Data data(40, 3, 1);
  std::vector<Problem> parts = data.Parts(3);
  InProcessAllReduce reducer(3, absl::Seconds(30));
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      CocoaOptions o;
      o.workers = 3;
      o.worker_id = k;
      if (k == 2) o.dcd.c = 2;
      status[k] = RunCocoaWorker(parts[k], o, [&](absl::Span<double> v) {
                    return reducer.Reduce(k, v);
                  }).status();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status[0].message().find("workers 2 run with other options"),
            absl::string_view::npos)
      << status[0];
  EXPECT_NE(status[2].message().find("workers 0, 1 run with other options"),
            absl::string_view::npos)
      << status[2];
}

TEST(Cocoa, EveryWorkerRunsTheSameNumberOfAllReduces) {
  Data data(200, 4, 4);
  std::vector<Problem> parts = data.Parts(2);
  InProcessAllReduce reducer(2, absl::Seconds(30));
  std::vector<int> calls(2, 0);
  std::vector<absl::StatusOr<CocoaResult>> results(2, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      CocoaOptions o;
      o.workers = 2;
      o.worker_id = k;
      results[k] = RunCocoaWorker(parts[k], o, [&](absl::Span<double> v) {
        ++calls[k];
        return reducer.Reduce(k, v);
      });
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  EXPECT_EQ(calls[0], calls[1]);
  EXPECT_EQ(calls[0], results[0]->passes + 2);  // handshake + rounds + final
  EXPECT_EQ(reducer.calls(), calls[0]);
}

TEST(InProcessAllReduce, NamesTheWorkersThatDidNotArrive) {
  InProcessAllReduce reducer(3, absl::Milliseconds(50));
  std::vector<double> v = {1, 2};
  const absl::Status s = reducer.Reduce(1, absl::MakeSpan(v));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("workers 0, 2 did not arrive"),
            absl::string_view::npos)
      << s;
}

TEST(Cocoa, RejectsABadWorkerId) {
  Data data(10, 2, 1);
  CocoaOptions o;
  o.workers = 2;
  o.worker_id = 2;
  const absl::Status s =
      RunCocoaWorker(data.whole(), o, [](absl::Span<double>) {
        return absl::OkStatus();
      }).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseCombine("sum").ok());
}

}  // namespace
}  // namespace svm
}  // namespace starling
