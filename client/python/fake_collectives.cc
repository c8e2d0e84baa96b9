#include "client/python/fake_collectives.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace torch_backend {

struct FakeCollectives::Member {
  FakeCollectives* fabric = nullptr;
  int slot = 0;
  StarlingCollectiveApi api{};
  absl::Mutex mu;
  int64_t started ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::unique_ptr<std::byte[]>> allocations ABSL_GUARDED_BY(mu);
};

namespace {

at::ScalarType Wire(int dtype) {
  switch (dtype) {
    case STARLING_FLOAT64:
      return at::kDouble;
    case STARLING_FLOAT16:
      return at::kHalf;
    case STARLING_BFLOAT16:
      return at::kBFloat16;
    case STARLING_INT32:
      return at::kInt;
    case STARLING_INT64:
      return at::kLong;
    default:
      return at::kFloat;
  }
}

at::Tensor View(std::byte* data, size_t bytes, int dtype) {
  const at::ScalarType type = Wire(dtype);
  return at::from_blob(data,
                       {static_cast<int64_t>(bytes / at::elementSize(type))},
                       at::TensorOptions().dtype(type));
}

// op over `parts`, element-wise, as the daemons define it.
at::Tensor Reduce(const std::vector<at::Tensor>& parts, int op) {
  at::Tensor result = parts[0].clone();
  for (size_t i = 1; i < parts.size(); ++i) {
    switch (op) {
      case STARLING_MIN:
        result = at::minimum(result, parts[i]);
        break;
      case STARLING_MAX:
        result = at::maximum(result, parts[i]);
        break;
      case STARLING_PRODUCT:
        result.mul_(parts[i]);
        break;
      default:
        result.add_(parts[i]);
    }
  }
  if (op == STARLING_AVERAGE) {
    const int64_t n = static_cast<int64_t>(parts.size());
    if (at::isIntegralType(result.scalar_type(), /*includeBool=*/false)) {
      result = at::div(result, n, "trunc");
    } else {
      result.div_(static_cast<double>(n));
    }
  }
  return result;
}

}  // namespace

FakeCollectives::FakeCollectives(int workers) : workers_(workers) {
  for (int s = 0; s < workers; ++s) {
    auto member = std::make_unique<Member>();
    member->fabric = this;
    member->slot = s;
    member->api.version = STARLING_COLLECTIVE_API_VERSION;
    member->api.client = member.get();
    member->api.total_workers = &FakeCollectives::TotalWorkers;
    member->api.slot = &FakeCollectives::Slot;
    member->api.allocate = &FakeCollectives::Allocate;
    member->api.start = &FakeCollectives::Start;
    members_.push_back(std::move(member));
  }
}

FakeCollectives::~FakeCollectives() = default;

const StarlingCollectiveApi* FakeCollectives::api(int slot) {
  return &members_[slot]->api;
}

int64_t FakeCollectives::rounds_completed() {
  absl::MutexLock lock(&mu_);
  return completed_;
}

int FakeCollectives::TotalWorkers(void* member) {
  return static_cast<Member*>(member)->fabric->workers_;
}

int FakeCollectives::Slot(void* member) {
  return static_cast<Member*>(member)->slot;
}

void* FakeCollectives::Allocate(void* member, size_t bytes, char*, size_t) {
  Member& m = *static_cast<Member*>(member);
  absl::MutexLock lock(&m.mu);
  m.allocations.push_back(std::make_unique<std::byte[]>(bytes + 64));
  std::memset(m.allocations.back().get(), 0, bytes + 64);
  return m.allocations.back().get();
}

void FakeCollectives::Start(void* member, int kind, void* data, size_t bytes,
                            int dtype, int op, int root, StarlingDone done,
                            void* arg) {
  Member& m = *static_cast<Member*>(member);
  int64_t round;
  {
    absl::MutexLock lock(&m.mu);
    round = m.started++;
  }
  Call call;
  call.slot = m.slot;
  call.kind = kind;
  call.data = static_cast<std::byte*>(data);
  call.bytes = kind == STARLING_BARRIER ? 0 : bytes;
  call.dtype = kind == STARLING_BARRIER ? 0 : dtype;
  call.op =
      kind == STARLING_ALL_REDUCE || kind == STARLING_REDUCE_SCATTER ? op : 0;
  call.root = kind == STARLING_BROADCAST ? root : 0;
  call.done = done;
  call.arg = arg;
  m.fabric->Add(call, round);
}

void FakeCollectives::Add(Call call, int64_t round) {
  std::vector<Call> calls;
  {
    absl::MutexLock lock(&mu_);
    std::vector<Call>& pending = rounds_[round];
    pending.push_back(call);
    if (static_cast<int>(pending.size()) < workers_) return;
    calls = std::move(pending);
    rounds_.erase(round);
    ++completed_;
  }
  std::string message;
  const int code = Run(calls, message);
  for (const Call& c : calls) c.done(c.arg, code, message.c_str());
}

int FakeCollectives::Run(std::vector<Call>& calls, std::string& message) {
  const Call& first = calls[0];
  for (const Call& c : calls) {
    if (c.kind != first.kind || c.bytes != first.bytes ||
        c.dtype != first.dtype || c.op != first.op || c.root != first.root) {
      message = absl::StrCat(
          "fake collectives: slot ", first.slot, " called kind ", first.kind,
          " on ", first.bytes, " bytes of type ", first.dtype, " (op ",
          first.op, ", root ", first.root, "), slot ", c.slot, " kind ", c.kind,
          " on ", c.bytes, " bytes of type ", c.dtype, " (op ", c.op, ", root ",
          c.root, ")");
      return static_cast<int>(absl::StatusCode::kInvalidArgument);
    }
  }
  const int n = static_cast<int>(calls.size());
  std::vector<Call> by_slot(n);
  for (const Call& c : calls) by_slot[c.slot] = c;
  const size_t bytes = first.bytes;
  const bool blocked = first.kind == STARLING_ALL_GATHER ||
                       first.kind == STARLING_REDUCE_SCATTER;
  if (blocked && bytes % n != 0) {
    message = absl::StrCat("fake collectives: ", bytes,
                           " bytes do not divide into ", n, " blocks");
    return static_cast<int>(absl::StatusCode::kInvalidArgument);
  }
  const size_t block = blocked ? bytes / n : 0;
  switch (first.kind) {
    case STARLING_ALL_REDUCE: {
      std::vector<at::Tensor> parts;
      for (const Call& c : by_slot) {
        parts.push_back(View(c.data, bytes, c.dtype));
      }
      const at::Tensor result = Reduce(parts, first.op);
      for (at::Tensor& p : parts) p.copy_(result);
      break;
    }
    case STARLING_BROADCAST:
      for (const Call& c : by_slot) {
        if (c.slot != first.root && bytes > 0) {
          std::memcpy(c.data, by_slot[first.root].data, bytes);
        }
      }
      break;
    case STARLING_ALL_GATHER:
      for (const Call& to : by_slot) {
        for (const Call& from : by_slot) {
          if (to.slot == from.slot || block == 0) continue;
          std::memcpy(to.data + block * from.slot,
                      from.data + block * from.slot, block);
        }
      }
      break;
    case STARLING_REDUCE_SCATTER:
      for (const Call& owner : by_slot) {
        std::vector<at::Tensor> parts;
        for (const Call& c : by_slot) {
          parts.push_back(
              View(c.data + block * owner.slot, block, first.dtype));
        }
        View(owner.data + block * owner.slot, block, first.dtype)
            .copy_(Reduce(parts, first.op));
      }
      break;
    default:
      break;
  }
  return 0;
}

}  // namespace torch_backend
}  // namespace starling
