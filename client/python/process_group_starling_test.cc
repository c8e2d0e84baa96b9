// ProcessGroupStarling's ops on simulated workers (FakeCollectives: one
// process, one thread and one executor per worker), each result checked
// against a reference the test computes in int64, float64 or complex128
// and converts to the tensor's dtype. Group sizes 1-4, torch ranks in
// another order than the slots, lengths 0, 1, odd and not divisible by
// the group size.
#include "client/python/process_group_starling.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/python/collective_executor.h"
#include "client/python/fake_collectives.h"
#include "client/python/tensor_staging.h"

namespace starling {
namespace torch_backend {
namespace {

using std::chrono::milliseconds;

using Body = std::function<void(int rank, int size, ProcessGroupStarling& pg)>;

// The torch rank of the worker in slot s: reversed, so that ranks and
// slots differ.
int RankOfSlot(int slot, int size) { return size - 1 - slot; }

// Runs `body` on `size` simulated workers; a C++ exception in one fails
// the test with its text.
void OnWorkers(int size, const Body& body,
               CollectiveExecutor::Options options = {}) {
  FakeCollectives fabric(size);
  std::vector<std::thread> threads;
  for (int slot = 0; slot < size; ++slot) {
    threads.emplace_back([&, slot] {
      try {
        auto executor = std::make_shared<CollectiveExecutor>(fabric.api(slot),
                                                             nullptr, options);
        const int rank = RankOfSlot(slot, size);
        auto pg = ProcessGroupStarling::Create(executor, rank, size,
                                               milliseconds(20000));
        body(rank, size, *pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "slot " << slot << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// What rank r contributes: small integers (exact in every dtype), some
// negative (wrapping in uint8), different per rank and element.
at::Tensor Input(int rank, int64_t length, at::ScalarType dtype) {
  at::Tensor values = at::arange(length, at::kLong)
                          .remainder(5)
                          .add(1)
                          .mul(rank + 1)
                          .remainder(7)
                          .sub(2);
  if (at::isComplexType(dtype)) {
    return at::complex(values.to(at::kDouble), values.flip(0).to(at::kDouble))
        .to(dtype);
  }
  return values.to(dtype);
}

at::Tensor Reference(int size, int64_t length, at::ScalarType dtype,
                     c10d::ReduceOp::RedOpType op) {
  const at::ScalarType wide = at::isComplexType(dtype)    ? at::kComplexDouble
                              : at::isFloatingType(dtype) ? at::kDouble
                                                          : at::kLong;
  at::Tensor result = Input(0, length, dtype).to(wide);
  for (int r = 1; r < size; ++r) {
    const at::Tensor x = Input(r, length, dtype).to(wide);
    switch (op) {
      case c10d::ReduceOp::MIN:
        result = at::minimum(result, x);
        break;
      case c10d::ReduceOp::MAX:
        result = at::maximum(result, x);
        break;
      case c10d::ReduceOp::PRODUCT:
        result = result * x;
        break;
      default:
        result = result + x;
    }
  }
  if (op == c10d::ReduceOp::AVG) {
    result = wide == at::kLong ? at::div(result, size, "trunc")
                               : result / static_cast<double>(size);
  }
  return result.to(dtype);
}

// Floating-point results may differ from the reference by the rounding of
// the division of AVG (one rounding in the dtype): half an ulp, relative.
void ExpectMatches(const at::Tensor& got, const at::Tensor& want,
                   const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  if (!at::isFloatingType(got.scalar_type()) &&
      !at::isComplexType(got.scalar_type())) {
    EXPECT_TRUE(at::equal(got, want))
        << what << "\ngot " << got << "\nwant " << want;
    return;
  }
  double eps = 1.0 / (1 << 23);
  if (got.scalar_type() == at::kHalf) eps = 1.0 / (1 << 10);
  if (got.scalar_type() == at::kBFloat16) eps = 1.0 / (1 << 7);
  if (got.scalar_type() == at::kDouble ||
      got.scalar_type() == at::kComplexDouble) {
    eps = 1.0 / (int64_t{1} << 52);
  }
  const at::Tensor diff =
      (got.to(at::kComplexDouble) - want.to(at::kComplexDouble)).abs();
  const at::Tensor bound = want.to(at::kComplexDouble).abs() * eps;
  EXPECT_TRUE(diff.le(bound).all().item<bool>())
      << what << "\ngot " << got << "\nwant " << want;
}

const std::vector<at::ScalarType> kReducedTypes = {
    at::kFloat, at::kDouble, at::kHalf,        at::kBFloat16,
    at::kInt,   at::kLong,   at::kBool,        at::kByte,
    at::kChar,  at::kShort,  at::kComplexFloat};

const std::vector<c10d::ReduceOp::RedOpType> kOps = {
    c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::PRODUCT,
    c10d::ReduceOp::MIN, c10d::ReduceOp::MAX};

bool Defined(at::ScalarType dtype, c10d::ReduceOp::RedOpType op) {
  if (at::isComplexType(dtype)) {
    return op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG;
  }
  return !(dtype == at::kBool && op == c10d::ReduceOp::AVG);
}

TEST(ProcessGroupStarling, AllReduceMatchesReferenceForEveryTypeAndOp) {
  for (int size : {1, 2, 3, 4}) {
    OnWorkers(size, [](int rank, int size, ProcessGroupStarling& pg) {
      for (at::ScalarType dtype : kReducedTypes) {
        for (c10d::ReduceOp::RedOpType op : kOps) {
          if (!Defined(dtype, op)) continue;
          for (int64_t length : {0, 1, 7, 33}) {
            std::vector<at::Tensor> t = {Input(rank, length, dtype)};
            c10d::AllreduceOptions opts;
            opts.reduceOp = op;
            pg.allreduce(t, opts)->wait();
            ExpectMatches(t[0], Reference(size, length, dtype, op),
                          "allreduce " + DtypeName(dtype) + " op " +
                              std::to_string(op) + " length " +
                              std::to_string(length) + " size " +
                              std::to_string(size));
          }
        }
      }
    });
  }
}

// Large all-reduces (11 MiB, a DDP bucket's size) one after another, in
// flight together, each in its own scratch region: every element sums
// exactly, for 2-byte, 4-byte and widened types, and a large transposed
// view (staged) too.
TEST(ProcessGroupStarling, LargeAllReducesInFlightTogetherStayExact) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    const int64_t length = (int64_t{11} << 20) / 4 + 3;  // 11 MiB of floats
    for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kShort}) {
      for (c10d::ReduceOp::RedOpType op :
           {c10d::ReduceOp::SUM, c10d::ReduceOp::MAX}) {
        std::vector<at::Tensor> t = {Input(rank, length, dtype)};
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        // Two in a row: the second's pieces queue behind the first's.
        std::vector<at::Tensor> u = {Input(rank, length / 2, dtype)};
        auto first = pg.allreduce(t, opts);
        auto second = pg.allreduce(u, opts);
        first->wait();
        second->wait();
        ExpectMatches(t[0], Reference(size, length, dtype, op),
                      "large allreduce " + DtypeName(dtype));
        ExpectMatches(u[0], Reference(size, length / 2, dtype, op),
                      "second large allreduce " + DtypeName(dtype));
      }
    }
    at::Tensor matrix = Input(rank, 3 << 20, at::kFloat).view({3, 1 << 20});
    std::vector<at::Tensor> v = {matrix.t()};
    pg.allreduce(v, c10d::AllreduceOptions())->wait();
    ExpectMatches(matrix.view({-1}),
                  Reference(size, 3 << 20, at::kFloat, c10d::ReduceOp::SUM),
                  "large transposed");
  });
}

TEST(ProcessGroupStarling, AllReduceOfViewsAndCoalescedTensors) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    // A transposed (non-contiguous) tensor is staged and written back.
    at::Tensor matrix = Input(rank, 12, at::kFloat).view({3, 4});
    std::vector<at::Tensor> t = {matrix.t()};
    pg.allreduce(t, c10d::AllreduceOptions())->wait();
    ExpectMatches(matrix.view({-1}),
                  Reference(size, 12, at::kFloat, c10d::ReduceOp::SUM),
                  "transposed");
    std::vector<at::Tensor> many = {Input(rank, 5, at::kLong),
                                    Input(rank, 0, at::kLong),
                                    Input(rank, 3, at::kLong)};
    c10d::AllreduceCoalescedOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    pg.allreduce_coalesced(many, opts)->wait();
    for (size_t i = 0; i < many.size(); ++i) {
      ExpectMatches(
          many[i],
          Reference(size, many[i].numel(), at::kLong, c10d::ReduceOp::MAX),
          "coalesced " + std::to_string(i));
    }
  });
}

// Ops on one tensor stay in order although ops run while others are in
// flight: an all-reduce of a tensor sees the broadcast into it submitted
// before, and a broadcast from it the all-reduce's result.
TEST(ProcessGroupStarling, OpsOnOneTensorSeeTheResultsOfTheOnesBefore) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    for (int round = 0; round < 20; ++round) {
      std::vector<at::Tensor> t = {at::full({1000}, rank + 1.0, at::kFloat)};
      std::vector<at::Tensor> other = {at::full({10}, rank, at::kFloat)};
      c10d::BroadcastOptions from_last;
      from_last.rootRank = size - 1;
      const c10d::AllreduceOptions sum;
      c10d::BroadcastOptions from_first;
      // t = size everywhere, then size * size, then unchanged; `other`
      // beside them.
      const std::vector<c10::intrusive_ptr<c10d::Work>> works = {
          pg.broadcast(t, from_last), pg.allreduce(other, sum),
          pg.allreduce(t, sum), pg.broadcast(t, from_first)};
      for (const auto& work : works) work->wait();
      ExpectMatches(t[0], at::full({1000}, 1.0 * size * size, at::kFloat),
                    "round " + std::to_string(round));
      ExpectMatches(other[0],
                    at::full({10}, size * (size - 1) / 2.0, at::kFloat),
                    "beside, round " + std::to_string(round));
    }
  });
}

TEST(ProcessGroupStarling, ReduceLeavesOthersAsTheyWere) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    std::vector<at::Tensor> t = {Input(rank, 9, at::kDouble)};
    c10d::ReduceOptions opts;
    opts.rootRank = 1;
    opts.reduceOp = c10d::ReduceOp::PRODUCT;
    pg.reduce(t, opts)->wait();
    ExpectMatches(t[0],
                  rank == 1
                      ? Reference(size, 9, at::kDouble, c10d::ReduceOp::PRODUCT)
                      : Input(rank, 9, at::kDouble),
                  "reduce");
  });
}

TEST(ProcessGroupStarling, BroadcastMovesAnyTypeFromEveryRoot) {
  OnWorkers(4, [](int rank, int size, ProcessGroupStarling& pg) {
    for (int root = 0; root < size; ++root) {
      for (at::ScalarType dtype :
           {at::kBool, at::kShort, at::kComplexDouble, at::kHalf, at::kByte}) {
        for (int64_t length : {0, 1, 5, 17}) {
          std::vector<at::Tensor> t = {Input(rank, length, dtype)};
          c10d::BroadcastOptions opts;
          opts.rootRank = root;
          pg.broadcast(t, opts)->wait();
          EXPECT_TRUE(at::equal(t[0], Input(root, length, dtype)))
              << "root " << root << " " << DtypeName(dtype) << " " << length;
        }
      }
    }
  });
}

TEST(ProcessGroupStarling, AllGathersAreOrderedByRank) {
  for (int size : {1, 2, 3}) {
    OnWorkers(size, [](int rank, int size, ProcessGroupStarling& pg) {
      for (int64_t length : {0, 1, 3}) {
        std::vector<at::Tensor> in = {Input(rank, length, at::kChar)};
        std::vector<std::vector<at::Tensor>> out(1);
        for (int r = 0; r < size; ++r) {
          out[0].push_back(at::full({length}, 9, at::kChar));
        }
        pg.allgather(out, in, c10d::AllgatherOptions())->wait();
        for (int r = 0; r < size; ++r) {
          EXPECT_TRUE(at::equal(out[0][r], Input(r, length, at::kChar)))
              << "allgather from " << r;
        }
        at::Tensor flat = at::zeros({size * length}, at::kChar);
        pg._allgather_base(flat, in[0], c10d::AllgatherOptions())->wait();
        for (int r = 0; r < size; ++r) {
          EXPECT_TRUE(at::equal(flat.narrow(0, r * length, length),
                                Input(r, length, at::kChar)))
              << "_allgather_base from " << r;
        }
      }
      // Coalesced: two inputs of other types and lengths.
      std::vector<at::Tensor> in = {Input(rank, 3, at::kFloat),
                                    Input(rank, 2, at::kBool)};
      std::vector<std::vector<at::Tensor>> out;
      for (int r = 0; r < size; ++r) {
        out.push_back({at::zeros({3}, at::kFloat), at::zeros({2}, at::kBool)});
      }
      pg.allgather_coalesced(out, in, c10d::AllgatherOptions())->wait();
      for (int r = 0; r < size; ++r) {
        EXPECT_TRUE(at::equal(out[r][0], Input(r, 3, at::kFloat)));
        EXPECT_TRUE(at::equal(out[r][1], Input(r, 2, at::kBool)));
      }
    });
  }
}

TEST(ProcessGroupStarling, GatherAndScatterAtEveryRoot) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    for (int root = 0; root < size; ++root) {
      std::vector<at::Tensor> in = {Input(rank, 5, at::kShort)};
      std::vector<std::vector<at::Tensor>> out;
      if (rank == root) {
        out.emplace_back();
        for (int r = 0; r < size; ++r) {
          out[0].push_back(at::zeros({5}, at::kShort));
        }
      }
      c10d::GatherOptions gather;
      gather.rootRank = root;
      pg.gather(out, in, gather)->wait();
      for (int r = 0; rank == root && r < size; ++r) {
        EXPECT_TRUE(at::equal(out[0][r], Input(r, 5, at::kShort)));
      }
      // Scatter: piece r (root's Input(10 * root + r)) goes to rank r.
      std::vector<std::vector<at::Tensor>> pieces;
      if (rank == root) {
        pieces.emplace_back();
        for (int r = 0; r < size; ++r) {
          pieces[0].push_back(Input(10 * root + r, 3, at::kDouble));
        }
      }
      std::vector<at::Tensor> mine = {at::zeros({3}, at::kDouble)};
      c10d::ScatterOptions scatter;
      scatter.rootRank = root;
      pg.scatter(mine, pieces, scatter)->wait();
      EXPECT_TRUE(at::equal(mine[0], Input(10 * root + rank, 3, at::kDouble)));
    }
  });
}

TEST(ProcessGroupStarling, ReduceScatterGivesEachRankItsBlock) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    for (at::ScalarType dtype : {at::kFloat, at::kByte, at::kBFloat16}) {
      // Rank q's block for rank r: Input(q + 10 r, 4).
      std::vector<std::vector<at::Tensor>> in(1);
      for (int r = 0; r < size; ++r) {
        in[0].push_back(Input(rank + 10 * r, 4, dtype));
      }
      std::vector<at::Tensor> out = {at::zeros({4}, dtype)};
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      pg.reduce_scatter(out, in, opts)->wait();
      at::Tensor want = at::zeros({4}, at::kDouble);
      for (int q = 0; q < size; ++q) {
        want += Input(q + 10 * rank, 4, dtype).to(at::kDouble);
      }
      ExpectMatches(out[0], want.to(dtype), "reduce_scatter");
      at::Tensor flat = at::cat(in[0]);
      at::Tensor base = at::zeros({4}, dtype);
      pg._reduce_scatter_base(base, flat, opts)->wait();
      ExpectMatches(base, want.to(dtype), "_reduce_scatter_base");
    }
  });
}

TEST(ProcessGroupStarling, AllToAllWithEqualAndUnevenSplits) {
  OnWorkers(3, [](int rank, int size, ProcessGroupStarling& pg) {
    // Row k of rank q's input is 100 q + k; rows of 2 int16.
    auto rows = [](int q, int64_t first, int64_t count) {
      return at::arange(first, first + count, at::kShort)
          .add(100 * q)
          .unsqueeze(1)
          .repeat({1, 2});
    };
    at::Tensor in = rows(rank, 0, 6);
    at::Tensor out = at::zeros({6, 2}, at::kShort);
    std::vector<int64_t> none;
    pg.alltoall_base(out, in, none, none, c10d::AllToAllOptions())->wait();
    for (int q = 0; q < size; ++q) {
      EXPECT_TRUE(at::equal(out.narrow(0, 2 * q, 2), rows(q, 2 * rank, 2)))
          << "equal splits, from rank " << q;
    }
    // Uneven: rank q sends q + r + 1 rows to rank r.
    std::vector<int64_t> in_splits;
    std::vector<int64_t> out_splits;
    int64_t in_rows = 0;
    int64_t out_rows = 0;
    for (int r = 0; r < size; ++r) {
      in_splits.push_back(rank + r + 1);
      out_splits.push_back(r + rank + 1);
      in_rows += rank + r + 1;
      out_rows += r + rank + 1;
    }
    in = rows(rank, 0, in_rows);
    out = at::zeros({out_rows, 2}, at::kShort);
    pg.alltoall_base(out, in, out_splits, in_splits, c10d::AllToAllOptions())
        ->wait();
    int64_t at_row = 0;
    for (int q = 0; q < size; ++q) {
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += q + r + 1;
      EXPECT_TRUE(at::equal(out.narrow(0, at_row, q + rank + 1),
                            rows(q, first, q + rank + 1)))
          << "uneven splits, from rank " << q;
      at_row += q + rank + 1;
    }
    // List form: rank q sends r + 1 elements of value 10 q + r to rank r.
    std::vector<at::Tensor> ins;
    std::vector<at::Tensor> outs;
    for (int r = 0; r < size; ++r) {
      ins.push_back(at::full({r + 1}, 10 * rank + r, at::kLong));
      outs.push_back(at::zeros({rank + 1}, at::kLong));
    }
    pg.alltoall(outs, ins, c10d::AllToAllOptions())->wait();
    for (int q = 0; q < size; ++q) {
      EXPECT_TRUE(
          at::equal(outs[q], at::full({rank + 1}, 10 * q + rank, at::kLong)));
    }
  });
}

TEST(ProcessGroupStarling, UnevenSplitsThatDisagreeFailOnEveryRank) {
  OnWorkers(2, [](int rank, int, ProcessGroupStarling& pg) {
    at::Tensor in = at::zeros({3}, at::kFloat);
    at::Tensor out = at::zeros({3}, at::kFloat);
    std::vector<int64_t> in_splits = {1, 2};
    std::vector<int64_t> out_splits =
        rank == 0 ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 2};
    auto work = pg.alltoall_base(out, in, out_splits, in_splits,
                                 c10d::AllToAllOptions());
    try {
      work->wait();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("which expects"), std::string::npos)
          << e.what();
    }
  });
}

TEST(ProcessGroupStarling, MismatchedShapesFailOnEveryRankWithTheDaemonsText) {
  OnWorkers(3, [](int rank, int, ProcessGroupStarling& pg) {
    std::vector<at::Tensor> t = {at::ones({rank == 0 ? 3 : 4}, at::kFloat)};
    auto work = pg.allreduce(t, c10d::AllreduceOptions());
    try {
      work->wait();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const std::exception& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("starling allreduce"), std::string::npos) << text;
      EXPECT_NE(text.find("fake collectives: slot"), std::string::npos) << text;
      EXPECT_NE(text.find("INVALID_ARGUMENT"), std::string::npos) << text;
    }
    // The group goes on.
    std::vector<at::Tensor> ok = {at::ones({2}, at::kFloat)};
    pg.allreduce(ok, c10d::AllreduceOptions())->wait();
    EXPECT_TRUE(at::equal(ok[0], at::full({2}, 3.0f)));
    // The future carries the error too.
    auto failed = pg.allreduce(t, c10d::AllreduceOptions())->getFuture();
    failed->wait();
    EXPECT_TRUE(failed->hasError());
  });
}

TEST(ProcessGroupStarling, UnsupportedOpsNameThemselves) {
  OnWorkers(1, [](int, int, ProcessGroupStarling& pg) {
    std::vector<at::Tensor> t = {at::ones({2}, at::kInt)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::BXOR;
    EXPECT_THROW(
        {
          try {
            pg.allreduce(t, opts);
          } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("ReduceOp.BXOR"),
                      std::string::npos);
            throw;
          }
        },
        std::runtime_error);
    opts.reduceOp = c10d::makeNCCLPreMulSum(2.0);
    EXPECT_THROW(pg.allreduce(t, opts), std::runtime_error);
    std::vector<at::Tensor> z = {at::ones({2}, at::kComplexFloat)};
    opts.reduceOp = c10d::ReduceOp::MAX;
    EXPECT_THROW(pg.allreduce(z, opts), std::runtime_error);
    for (const char* op : {"send", "recv"}) {
      try {
        if (std::string(op) == "send") {
          pg.send(t, 0, 0);
        } else {
          pg.recv(t, 0, 0);
        }
        ADD_FAILURE() << op << " did not throw";
      } catch (const std::runtime_error& e) {
        const std::string text = e.what();
        EXPECT_EQ(text.find(std::string("starling ") + op + ":"), 0u) << text;
        EXPECT_NE(text.find("collectives only"), std::string::npos) << text;
      }
    }
  });
}

TEST(ProcessGroupStarling, ACollectiveThatNeverEndsFailsInTimeAndSticks) {
  CollectiveExecutor::Options options;
  options.collective_timeout = absl::Milliseconds(300);
  OnWorkers(
      2,
      [](int rank, int, ProcessGroupStarling& pg) {
        if (rank == 0) return;  // a worker that leaves
        std::vector<at::Tensor> t = {at::ones({2}, at::kFloat)};
        const auto start = std::chrono::steady_clock::now();
        try {
          pg.allreduce(t, c10d::AllreduceOptions())->wait();
          ADD_FAILURE() << "no error";
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("DEADLINE_EXCEEDED"),
                    std::string::npos)
              << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start,
                  std::chrono::seconds(5));
        try {
          pg.barrier(c10d::BarrierOptions())->wait();
          ADD_FAILURE() << "no error";
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("an earlier collective"),
                    std::string::npos)
              << e.what();
        }
      },
      options);
}

TEST(ProcessGroupStarling, WaitHonoursItsTimeout) {
  CollectiveExecutor::Options options;
  options.collective_timeout = absl::Seconds(2);
  OnWorkers(
      2,
      [](int rank, int, ProcessGroupStarling& pg) {
        if (rank == 0) return;
        auto work = pg.barrier(c10d::BarrierOptions());
        try {
          work->wait(milliseconds(50));
          ADD_FAILURE() << "no error";
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("starling barrier"),
                    std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("50 ms"), std::string::npos)
              << e.what();
        }
        EXPECT_THROW(work->wait(), std::runtime_error);  // then the deadline
      },
      options);
}

TEST(ProcessGroupStarling, CreationChecksSizeAndRanks) {
  for (const bool wrong_size : {true, false}) {
    FakeCollectives fabric(2);
    std::vector<std::thread> threads;
    for (int slot = 0; slot < 2; ++slot) {
      threads.emplace_back([&, slot] {
        auto executor = std::make_shared<CollectiveExecutor>(
            fabric.api(slot), nullptr, CollectiveExecutor::Options());
        try {
          // Both claim rank 0, or a world of 3.
          ProcessGroupStarling::Create(executor, wrong_size ? slot : 0,
                                       wrong_size ? 3 : 2, milliseconds(1000));
          ADD_FAILURE() << "slot " << slot << ": no error";
        } catch (const std::runtime_error& e) {
          const std::string text = e.what();
          if (wrong_size) {
            EXPECT_NE(text.find("world_size is 3"), std::string::npos) << text;
            EXPECT_NE(text.find("has 2 workers"), std::string::npos) << text;
          } else {
            EXPECT_NE(text.find("rank 0 is claimed by slots 0, 1"),
                      std::string::npos)
                << text;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
}

}  // namespace
}  // namespace torch_backend
}  // namespace starling
