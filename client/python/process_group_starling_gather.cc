// ProcessGroupStarling: the gathers, scatter, reduce-scatter and
// all-to-all (the rest is in process_group_starling.cc).
//
// Terms: a "block" is one worker's part of an all-gather, reduce-scatter
// or scatter buffer, all blocks the same size; the daemons order blocks by
// slot, so rank r's block is at slot_of_rank()[r] (scatter's, which only
// the root fills, by rank). Data moves as raw bytes padded to whole int32
// elements (tensor_staging.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/python/process_group_starling.h"
#include "client/python/starling_work.h"
#include "client/python/tensor_staging.h"

namespace starling {
namespace torch_backend {
namespace {

using Context = CollectiveExecutor::Context;

// Throws unless `tensor` has the dtype and number of elements of `like`.
void CheckLike(const std::string& op, const std::string& what,
               const at::Tensor& tensor, const at::Tensor& like,
               const std::string& like_what) {
  CheckDense(op, tensor);
  if (tensor.scalar_type() != like.scalar_type() ||
      tensor.numel() != like.numel()) {
    ThrowError(absl::StrCat(op, ": ", what, " is ", Describe(tensor), " but ",
                            like_what, " is ", Describe(like),
                            " (same dtype and number of elements needed)"));
  }
}

// Checks that `lists` is one list of `size` tensors like `like` and stages
// them: as outputs, or (`in`) as inputs.
std::vector<Staged> StageList(const std::string& op, const std::string& what,
                              const std::vector<std::vector<at::Tensor>>& lists,
                              int size, const at::Tensor& like,
                              const std::string& like_what, bool in) {
  if (lists.size() != 1 || static_cast<int>(lists[0].size()) != size) {
    ThrowError(absl::StrCat(op, ": takes one list of world_size (", size, ") ",
                            what, " tensors, not ",
                            lists.empty() ? 0 : lists[0].size()));
  }
  std::vector<Staged> staged;
  for (int r = 0; r < size; ++r) {
    CheckLike(op, absl::StrCat(what, " tensor ", r), lists[0][r], like,
              like_what);
    staged.push_back(in ? StageIn(lists[0][r]) : StageOut(lists[0][r]));
  }
  return staged;
}

std::vector<at::Tensor> Users(const std::vector<Staged>& staged) {
  std::vector<at::Tensor> users;
  for (const Staged& s : staged) users.push_back(s.user);
  return users;
}

// Every worker's `block` (bytes) gathered, slot by slot: returns the
// buffer of total_workers() blocks.
absl::StatusOr<absl::Span<std::byte>> GatherBlocks(
    Context& context, int slot, size_t block_bytes,
    const std::function<void(std::byte*)>& fill) {
  absl::StatusOr<absl::Span<std::byte>> scratch =
      context.Scratch(block_bytes * context.total_workers());
  if (!scratch.ok()) return scratch.status();
  fill(scratch->data() + block_bytes * slot);
  absl::Status status =
      context.Collective(STARLING_ALL_GATHER, *scratch, STARLING_INT32);
  if (!status.ok()) return status;
  return scratch;
}

// allgather's and gather's all-gather of `in` (one block per worker, at its
// slot `slots[r]` for rank r), unpacked into `out` in rank order (none: the
// blocks are only sent).
absl::Status GatherInto(Context& context, const Staged& in,
                        const std::vector<Staged>& out, int slot,
                        const std::vector<int>& slots) {
  const size_t block = PaddedBytes(in.host.nbytes());
  absl::StatusOr<absl::Span<std::byte>> blocks = GatherBlocks(
      context, slot, block, [&](std::byte* to) { PackBytes(in.host, to); });
  if (!blocks.ok()) return blocks.status();
  for (size_t r = 0; r < out.size(); ++r) {
    UnpackBytes(blocks->data() + block * slots[r], out[r].host);
    WriteBack(out[r]);
  }
  return absl::OkStatus();
}

std::vector<int64_t> EqualSplits(const std::string& op, const char* what,
                                 int64_t rows, int size) {
  if (rows % size != 0) {
    ThrowError(absl::StrCat(op, ": the ", what, "'s first dimension (", rows,
                            ") does not divide into world_size (", size,
                            ") equal parts; pass split sizes"));
  }
  return std::vector<int64_t>(size, rows / size);
}

void CheckSplits(const std::string& op, const char* what,
                 const std::vector<int64_t>& splits, int64_t rows, int size) {
  int64_t sum = 0;
  for (int64_t s : splits) {
    if (s < 0) ThrowError(absl::StrCat(op, ": negative ", what, " split size"));
    sum += s;
  }
  if (static_cast<int>(splits.size()) != size || sum != rows) {
    ThrowError(absl::StrCat(op, ": ", splits.size(), " ", what,
                            " split sizes adding up to ", sum, "; need ", size,
                            " adding up to the first dimension, ", rows));
  }
}

int64_t RowBytes(const at::Tensor& t) {
  int64_t elements = 1;
  for (int64_t d = 1; d < t.dim(); ++d) elements *= t.size(d);
  return elements * static_cast<int64_t>(t.element_size());
}

// The all-gather of every rank's row (`values`, the same length on every
// rank) of a table of int64: returns table[rank][i].
absl::StatusOr<std::vector<std::vector<int64_t>>> ExchangeTable(
    Context& context, int slot, const std::vector<int>& slot_of_rank,
    const std::vector<int64_t>& values) {
  const size_t row_bytes = values.size() * sizeof(int64_t);
  absl::StatusOr<absl::Span<std::byte>> scratch =
      context.Scratch(row_bytes * slot_of_rank.size());
  if (!scratch.ok()) return scratch.status();
  std::memcpy(scratch->data() + row_bytes * slot, values.data(), row_bytes);
  absl::Status status =
      context.Collective(STARLING_ALL_GATHER, *scratch, STARLING_INT64);
  if (!status.ok()) return status;
  std::vector<std::vector<int64_t>> table(slot_of_rank.size(),
                                          std::vector<int64_t>(values.size()));
  for (size_t r = 0; r < slot_of_rank.size(); ++r) {
    std::memcpy(table[r].data(), scratch->data() + row_bytes * slot_of_rank[r],
                row_bytes);
  }
  return table;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = OnlyTensor("allgather", inputs);
  std::vector<Staged> out = StageList("allgather", "output", outputs, size_,
                                      input, "the input", /*in=*/false);
  const Staged in = StageIn(input);
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(c10d::OpType::ALLGATHER,
                 absl::StrCat("allgather (", Describe(input), ")"), Users(out),
                 opts.timeout, [in, out, slot, slots](Context& context) {
                   return GatherInto(context, in, out, slot, slots);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const std::string op = "_allgather_base (all_gather_into_tensor)";
  CheckDense(op, input);
  CheckDense(op, output);
  if (output.scalar_type() != input.scalar_type() ||
      output.numel() != input.numel() * size_) {
    ThrowError(absl::StrCat(op, ": the output is ", Describe(output),
                            "; for the input ", Describe(input),
                            " it must hold world_size (", size_,
                            ") x its elements, of its dtype"));
  }
  const Staged in = StageIn(input);
  const Staged out = StageOut(output);
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::_ALLGATHER_BASE,
      absl::StrCat("_allgather_base (", Describe(input), ")"), {output},
      opts.timeout, [in, out, slot, slots](Context& context) {
        const size_t bytes = in.host.nbytes();
        const size_t block = PaddedBytes(bytes);
        absl::StatusOr<absl::Span<std::byte>> blocks =
            GatherBlocks(context, slot, block,
                         [&](std::byte* to) { PackBytes(in.host, to); });
        if (!blocks.ok()) return blocks.status();
        for (size_t r = 0; r < slots.size(); ++r) {
          if (bytes == 0) break;
          std::memcpy(BytesOf(out.host) + bytes * r,
                      blocks->data() + block * slots[r], bytes);
        }
        WriteBack(out);
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const std::string op = "allgather_coalesced";
  if (inputs.empty()) ThrowError(op + ": no input tensors");
  if (static_cast<int>(outputs.size()) != size_) {
    ThrowError(absl::StrCat(op, ": takes world_size (", size_,
                            ") output lists, not ", outputs.size()));
  }
  std::vector<Staged> in;
  for (const at::Tensor& t : inputs) {
    CheckDense(op, t);
    in.push_back(StageIn(t));
  }
  std::vector<std::vector<Staged>> out(size_);
  std::vector<at::Tensor> users;
  for (int r = 0; r < size_; ++r) {
    if (outputs[r].size() != inputs.size()) {
      ThrowError(absl::StrCat(op, ": output list ", r, " holds ",
                              outputs[r].size(), " tensors, not ",
                              inputs.size(), " like the inputs"));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckLike(op, absl::StrCat("output ", r, "/", i), outputs[r][i],
                inputs[i], absl::StrCat("input ", i));
      out[r].push_back(StageOut(outputs[r][i]));
      users.push_back(outputs[r][i]);
    }
  }
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(c10d::OpType::ALLGATHER_COALESCED,
                 absl::StrCat(op, " (", inputs.size(), " tensors)"), users,
                 opts.timeout, [in, out, slot, slots](Context& context) {
                   size_t block = 0;
                   for (const Staged& t : in)
                     block += PaddedBytes(t.host.nbytes());
                   absl::StatusOr<absl::Span<std::byte>> blocks =
                       GatherBlocks(context, slot, block, [&](std::byte* to) {
                         for (const Staged& t : in) {
                           PackBytes(t.host, to);
                           to += PaddedBytes(t.host.nbytes());
                         }
                       });
                   if (!blocks.ok()) return blocks.status();
                   for (size_t r = 0; r < out.size(); ++r) {
                     const std::byte* from = blocks->data() + block * slots[r];
                     for (const Staged& t : out[r]) {
                       UnpackBytes(from, t.host);
                       WriteBack(t);
                       from += PaddedBytes(t.host.nbytes());
                     }
                   }
                   return absl::OkStatus();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor& input = OnlyTensor("gather", inputs);
  CheckRoot("gather", opts.rootRank);
  const bool root = opts.rootRank == rank_;
  std::vector<Staged> out;
  if (root) {
    out = StageList("gather", "output", outputs, size_, input, "the input",
                    /*in=*/false);
  }
  const Staged in = StageIn(input);
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::GATHER,
      absl::StrCat("gather (", Describe(input), ", root ", opts.rootRank, ")"),
      Users(out), opts.timeout, [in, out, slot, slots](Context& context) {
        // An all-gather: every worker receives what the root keeps.
        return GatherInto(context, in, out, slot, slots);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& output = OnlyTensor("scatter", outputs);
  CheckRoot("scatter", opts.rootRank);
  const bool root = opts.rootRank == rank_;
  std::vector<Staged> in;
  if (root) {
    in = StageList("scatter", "input", inputs, size_, output, "the output",
                   /*in=*/true);
  }
  const Staged out = StageOut(output);
  const int rank = rank_;
  const int size = size_;
  const int root_slot = slot_of_rank_[opts.rootRank];
  return Enqueue(c10d::OpType::SCATTER,
                 absl::StrCat("scatter (", Describe(output), ", root ",
                              opts.rootRank, ")"),
                 {output}, opts.timeout,
                 [in, out, rank, size, root_slot](Context& context) {
                   // A broadcast of the root's list, block r for rank r.
                   const size_t block = PaddedBytes(out.host.nbytes());
                   absl::StatusOr<absl::Span<std::byte>> scratch =
                       context.Scratch(block * size);
                   if (!scratch.ok()) return scratch.status();
                   for (size_t r = 0; r < in.size(); ++r) {
                     PackBytes(in[r].host, scratch->data() + block * r);
                   }
                   absl::Status status = context.Collective(
                       STARLING_BROADCAST, *scratch, STARLING_INT32,
                       STARLING_SUM, root_slot);
                   if (!status.ok()) return status;
                   UnpackBytes(scratch->data() + block * rank, out.host);
                   WriteBack(out);
                   return absl::OkStatus();
                 });
}

namespace {

// The reduce-scatter of `blocks` (one per rank, in rank order: the block
// reduced into rank r's result) into `out`.
absl::Status ReduceScatterBlocks(Context& context, int slot,
                                 const std::vector<int>& slots,
                                 const std::vector<at::Tensor>& blocks,
                                 const ReductionPlan& plan, const Staged& out) {
  const size_t block = ReductionBytes(out.host, plan);
  absl::StatusOr<absl::Span<std::byte>> scratch =
      context.Scratch(block * slots.size());
  if (!scratch.ok()) return scratch.status();
  for (size_t r = 0; r < blocks.size(); ++r) {
    PackReduction(blocks[r], plan, scratch->data() + block * slots[r]);
  }
  absl::Status status =
      context.Collective(STARLING_REDUCE_SCATTER, *scratch, plan.type, plan.op);
  if (!status.ok()) return status;
  UnpackReduction(scratch->data() + block * slot, plan, out.host);
  WriteBack(out);
  return absl::OkStatus();
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = OnlyTensor("reduce_scatter", outputs);
  const ReductionPlan plan =
      PlanOrThrow("reduce_scatter", output.scalar_type(), opts.reduceOp);
  const std::vector<Staged> in =
      StageList("reduce_scatter", "input", inputs, size_, output, "the output",
                /*in=*/true);
  std::vector<at::Tensor> blocks = Users(in);
  for (size_t r = 0; r < in.size(); ++r) blocks[r] = in[r].host;
  const Staged out = StageOut(output);
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::REDUCE_SCATTER,
      absl::StrCat("reduce_scatter (", Describe(output), ")"), {output},
      opts.timeout, [blocks, out, plan, slot, slots](Context& context) {
        return ReduceScatterBlocks(context, slot, slots, blocks, plan, out);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  const std::string op = "_reduce_scatter_base (reduce_scatter_tensor)";
  CheckDense(op, input);
  CheckDense(op, output);
  if (output.scalar_type() != input.scalar_type() ||
      input.numel() != output.numel() * size_) {
    ThrowError(absl::StrCat(op, ": the input is ", Describe(input),
                            "; for the output ", Describe(output),
                            " it must hold world_size (", size_,
                            ") x its elements, of its dtype"));
  }
  const ReductionPlan plan =
      PlanOrThrow(op, output.scalar_type(), opts.reduceOp);
  const Staged in = StageIn(input);
  const int64_t n = output.numel();
  std::vector<at::Tensor> blocks;
  for (int r = 0; r < size_; ++r) {
    blocks.push_back(in.host.view({-1}).narrow(0, n * r, n));
  }
  const Staged out = StageOut(output);
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE,
      absl::StrCat("_reduce_scatter_base (", Describe(input), ")"), {output},
      opts.timeout, [blocks, out, plan, slot, slots](Context& context) {
        return ReduceScatterBlocks(context, slot, slots, blocks, plan, out);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  const std::string op = "alltoall_base (all_to_all_single)";
  CheckDense(op, input);
  CheckDense(op, output);
  if (input.dim() == 0 || output.dim() == 0 ||
      input.scalar_type() != output.scalar_type() ||
      RowBytes(input) != RowBytes(output)) {
    ThrowError(absl::StrCat(op, ": the input ", Describe(input),
                            " and the output ", Describe(output),
                            " need one dtype, a first dimension and the same "
                            "size of the others"));
  }
  // Equal splits when none are given: the daemons' length check is the
  // only exchange needed.
  const bool equal = input_split_sizes.empty() && output_split_sizes.empty();
  std::vector<int64_t> in_splits = input_split_sizes;
  std::vector<int64_t> out_splits = output_split_sizes;
  if (in_splits.empty()) {
    in_splits = EqualSplits(op, "input", input.size(0), size_);
  }
  if (out_splits.empty()) {
    out_splits = EqualSplits(op, "output", output.size(0), size_);
  }
  CheckSplits(op, "input", in_splits, input.size(0), size_);
  CheckSplits(op, "output", out_splits, output.size(0), size_);
  const Staged in = StageIn(input);
  const Staged out = StageOut(output);
  const int64_t row = RowBytes(input);
  const int rank = rank_;
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::ALLTOALL_BASE,
      absl::StrCat(op, " (", Describe(input), " -> ", Describe(output), ")"),
      {output}, opts.timeout, [=](Context& context) -> absl::Status {
        const int n = static_cast<int>(slots.size());
        // table[r]: rank r's input splits, then its output splits.
        std::vector<std::vector<int64_t>> table(n);
        if (equal) {
          for (auto& entry : table) {
            entry = in_splits;
            entry.insert(entry.end(), out_splits.begin(), out_splits.end());
          }
        } else {
          std::vector<int64_t> mine = in_splits;
          mine.insert(mine.end(), out_splits.begin(), out_splits.end());
          mine.push_back(row);
          absl::StatusOr<std::vector<std::vector<int64_t>>> exchanged =
              ExchangeTable(context, slot, slots, mine);
          if (!exchanged.ok()) return exchanged.status();
          table = *std::move(exchanged);
          // Every rank sees the same table, so every rank fails alike.
          for (int r = 0; r < n; ++r) {
            if (table[r][2 * n] != row) {
              return absl::InvalidArgumentError(
                  absl::StrCat("rank ", r, "'s rows are ", table[r][2 * n],
                               " bytes, rank ", rank, "'s ", row));
            }
            for (int q = 0; q < n; ++q) {
              if (table[r][q] != table[q][n + r]) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "rank ", r, " sends ", table[r][q], " rows to rank ", q,
                    ", which expects ", table[q][n + r],
                    " from it (input_split_sizes vs output_split_sizes)"));
              }
            }
          }
        }
        int64_t block = 0;
        for (int r = 0; r < n; ++r) {
          int64_t rows = 0;
          for (int q = 0; q < n; ++q) rows += table[r][q];
          block = std::max<int64_t>(block, PaddedBytes(rows * row));
        }
        absl::StatusOr<absl::Span<std::byte>> blocks =
            GatherBlocks(context, slot, block,
                         [&](std::byte* to) { PackBytes(in.host, to); });
        if (!blocks.ok()) return blocks.status();
        int64_t written = 0;
        for (int r = 0; r < n; ++r) {
          int64_t skip = 0;
          for (int q = 0; q < rank; ++q) skip += table[r][q];
          const int64_t bytes = table[r][rank] * row;
          if (bytes > 0) {
            std::memcpy(BytesOf(out.host) + written,
                        blocks->data() + block * slots[r] + skip * row, bytes);
          }
          written += bytes;
        }
        WriteBack(out);
        return absl::OkStatus();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  const std::string op = "alltoall (all_to_all)";
  if (static_cast<int>(inputs.size()) != size_ ||
      static_cast<int>(outputs.size()) != size_) {
    ThrowError(absl::StrCat(op, ": takes world_size (", size_,
                            ") input and output tensors, not ", inputs.size(),
                            " and ", outputs.size()));
  }
  std::vector<Staged> in;
  std::vector<Staged> out;
  for (int r = 0; r < size_; ++r) {
    CheckDense(op, inputs[r]);
    CheckDense(op, outputs[r]);
    in.push_back(StageIn(inputs[r]));
    out.push_back(StageOut(outputs[r]));
  }
  const int rank = rank_;
  const int slot = slot_of_rank_[rank_];
  const std::vector<int> slots = slot_of_rank_;
  return Enqueue(
      c10d::OpType::ALLTOALL, absl::StrCat(op, " (", size_, " tensors)"),
      outputs, opts.timeout, [=](Context& context) -> absl::Status {
        const int n = static_cast<int>(slots.size());
        // Each rank's input bytes per destination, then output bytes per
        // source.
        std::vector<int64_t> mine;
        for (const Staged& t : in) mine.push_back(t.host.nbytes());
        for (const Staged& t : out) mine.push_back(t.host.nbytes());
        absl::StatusOr<std::vector<std::vector<int64_t>>> table =
            ExchangeTable(context, slot, slots, mine);
        if (!table.ok()) return table.status();
        int64_t block = 0;
        for (int r = 0; r < n; ++r) {
          int64_t bytes = 0;
          for (int q = 0; q < n; ++q) {
            if ((*table)[r][q] != (*table)[q][n + r]) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "rank ", r, " sends ", (*table)[r][q], " bytes to rank ", q,
                  ", whose output tensor ", r, " holds ", (*table)[q][n + r]));
            }
            bytes += PaddedBytes((*table)[r][q]);
          }
          block = std::max(block, bytes);
        }
        absl::StatusOr<absl::Span<std::byte>> blocks =
            GatherBlocks(context, slot, block, [&](std::byte* to) {
              for (const Staged& t : in) {
                PackBytes(t.host, to);
                to += PaddedBytes(t.host.nbytes());
              }
            });
        if (!blocks.ok()) return blocks.status();
        for (int r = 0; r < n; ++r) {
          const std::byte* from = blocks->data() + block * slots[r];
          for (int q = 0; q < rank; ++q) from += PaddedBytes((*table)[r][q]);
          UnpackBytes(from, out[r].host);
          WriteBack(out[r]);
        }
        return absl::OkStatus();
      });
}

}  // namespace torch_backend
}  // namespace starling
