"""One worker of the torch.distributed backend's tests
(torch_backend_test.py), run by starling-run or torchrun:

    /usr/bin/python3 torch_backend_worker.py CASE [--init file:PATH]
        [--reverse_ranks]

Cases print `KEY value` lines the driver reads; every check is an assert
here, against a reference this file computes (int64, float64 or
complex128, converted to the tensor's dtype), so a wrong result fails the
worker. The inputs are small integers, exact in every dtype.
"""

import argparse
import datetime
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

import starling.torch  # noqa: F401 (registers the "starling" backend)

OPS = {
    "SUM": dist.ReduceOp.SUM,
    "AVG": dist.ReduceOp.AVG,
    "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN,
    "MAX": dist.ReduceOp.MAX,
}
REDUCED_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                 torch.int32, torch.int64, torch.bool, torch.uint8, torch.int8,
                 torch.int16, torch.complex64]
# One unit in the last place, relative: how far the daemons' rounding of an
# average (through float32) may put a result from the reference's single
# rounding of the exact value.
ULP = {torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52,
       torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7,
       torch.complex64: 2.0 ** -23}

CHECKS = [0]

# all_reduce_coalesced and all_gather_coalesced "will be deprecated".
warnings.filterwarnings("ignore", message=".*will be deprecated")


def check(condition, message):
    assert condition, "rank %d: %s" % (dist.get_rank(), message)
    CHECKS[0] += 1


def init(args):
    """init_process_group("starling"): env:// (starling-run, torchrun), or
    file:// with the ranks given here (reversed: torch ranks unlike the
    daemons' slots)."""
    if args.init.startswith("file:"):
        slot = int(os.environ["STARLING_RANK"])
        size = int(os.environ["STARLING_SIZE"])
        rank = size - 1 - slot if args.reverse_ranks else slot
        dist.init_process_group("starling",
                                init_method="file://" + args.init[5:],
                                rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=60))
        if args.reverse_ranks:
            group = dist.distributed_c10d._get_default_group()
            check(list(group.slot_of_rank) == list(range(size))[::-1],
                  "slot_of_rank %s" % list(group.slot_of_rank))
    else:
        dist.init_process_group("starling")
    check(dist.get_backend() == "starling", dist.get_backend())


# --- inputs and references -----------------------------------------------------
def data(rank, length, dtype):
    """Rank `rank`'s tensor: small integers in -2..4, some negative."""
    values = (torch.arange(length) % 5 + 1) * (rank + 1) % 7 - 2
    if dtype.is_complex:
        return torch.complex(values.double(), values.flip(0).double()).to(dtype)
    return values.to(dtype)


def wide(dtype):
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else torch.int64


def reference(size, length, dtype, op):
    result = data(0, length, dtype).to(wide(dtype))
    for r in range(1, size):
        x = data(r, length, dtype).to(wide(dtype))
        if op == "MIN":
            result = torch.minimum(result, x)
        elif op == "MAX":
            result = torch.maximum(result, x)
        elif op == "PRODUCT":
            result = result * x
        else:
            result = result + x
    if op == "AVG":
        result = (torch.div(result, size, rounding_mode="trunc")
                  if wide(dtype) == torch.int64 else result / size)
    return result.to(dtype)


def same(got, want, what):
    check(got.dtype == want.dtype and got.shape == want.shape,
          "%s: %s %s, want %s %s" % (what, got.dtype, tuple(got.shape),
                                     want.dtype, tuple(want.shape)))
    if want.dtype in ULP:
        diff = (got.to(torch.complex128) - want.to(torch.complex128)).abs()
        bound = want.to(torch.complex128).abs() * ULP[want.dtype]
        check(bool((diff <= bound).all()),
              "%s: got %s, want %s" % (what, got, want))
    else:
        check(torch.equal(got, want), "%s: got %s, want %s" % (what, got, want))


def defined(dtype, op):
    if dtype.is_complex:
        return op in ("SUM", "AVG")
    return not (dtype == torch.bool and op == "AVG")


# --- cases -----------------------------------------------------------------
def case_collectives(args):
    """Every collective against its reference."""
    init(args)
    rank, size = dist.get_rank(), dist.get_world_size()
    for dtype in REDUCED_TYPES:
        for op in OPS:
            if not defined(dtype, op):
                continue
            for length in (0, 1, 7, 33):
                t = data(rank, length, dtype)
                dist.all_reduce(t, op=OPS[op])
                same(t, reference(size, length, dtype, op),
                     "all_reduce %s %s length %d" % (dtype, op, length))
    # Asynchronous, several in flight, one of them a non-contiguous view.
    matrix = data(rank, 12, torch.float32).view(3, 4)
    tensors = [data(rank, n, torch.int64) for n in (5, 3, 8)]
    works = [dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
             for t in tensors]
    works.append(dist.all_reduce(matrix.t(), async_op=True))
    for work in works:
        work.wait()
    for t in tensors:
        same(t, reference(size, t.numel(), torch.int64, "MAX"), "async MAX")
    same(matrix.reshape(-1), reference(size, 12, torch.float32, "SUM"),
         "transposed")
    coalesced = [data(rank, n, torch.float64) for n in (4, 0, 9)]
    dist.all_reduce_coalesced(coalesced)
    for t in coalesced:
        same(t, reference(size, t.numel(), torch.float64, "SUM"), "coalesced")
    # reduce: the root gets the result, the others keep their tensor.
    root = size - 1
    t = data(rank, 9, torch.float64)
    dist.reduce(t, dst=root, op=dist.ReduceOp.PRODUCT)
    same(t, reference(size, 9, torch.float64, "PRODUCT") if rank == root else
         data(rank, 9, torch.float64), "reduce")
    # broadcast from every root: bytes of any dtype, odd lengths.
    for src in range(size):
        for dtype in (torch.bool, torch.int16, torch.complex128, torch.float16,
                      torch.uint8):
            for length in (0, 1, 5, 17):
                t = data(rank, length, dtype)
                dist.broadcast(t, src=src)
                same(t, data(src, length, dtype),
                     "broadcast %s from %d" % (dtype, src))
    # all_gather: ordered by rank.
    for dtype in (torch.int8, torch.float64):
        for length in (0, 1, 3):
            out = [torch.full((length,), 9, dtype=dtype) for _ in range(size)]
            dist.all_gather(out, data(rank, length, dtype))
            for r in range(size):
                same(out[r], data(r, length, dtype), "all_gather from %d" % r)
            flat = torch.zeros(size * length, dtype=dtype)
            dist.all_gather_into_tensor(flat, data(rank, length, dtype))
            same(flat, torch.cat([data(r, length, dtype) for r in range(size)]),
                 "all_gather_into_tensor")
    lists = [[torch.zeros(3), torch.zeros(2)] for _ in range(size)]
    dist.all_gather_coalesced(lists, [data(rank, 3, torch.float32),
                                      data(rank, 2, torch.float32)])
    for r in range(size):
        same(lists[r][0], data(r, 3, torch.float32), "coalesced gather")
        same(lists[r][1], data(r, 2, torch.float32), "coalesced gather 2")
    # gather and scatter at every root.
    for root in range(size):
        out = ([torch.zeros(5, dtype=torch.int16) for _ in range(size)]
               if rank == root else None)
        dist.gather(data(rank, 5, torch.int16), out, dst=root)
        for r in range(size if rank == root else 0):
            same(out[r], data(r, 5, torch.int16), "gather")
        pieces = ([data(10 * root + r, 3, torch.float64) for r in range(size)]
                  if rank == root else None)
        mine = torch.zeros(3, dtype=torch.float64)
        dist.scatter(mine, pieces, src=root)
        same(mine, data(10 * root + rank, 3, torch.float64), "scatter")
    # reduce_scatter: rank q's block for rank r is data(q + 10 r).
    for dtype in (torch.float32, torch.uint8, torch.bfloat16, torch.int64):
        blocks = [data(rank + 10 * r, 4, dtype) for r in range(size)]
        want = sum(data(q + 10 * rank, 4, dtype).to(wide(dtype))
                   for q in range(size)).to(dtype)
        out = torch.zeros(4, dtype=dtype)
        dist.reduce_scatter(out, blocks)
        same(out, want, "reduce_scatter %s" % dtype)
        out = torch.zeros(4, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat(blocks))
        same(out, want, "reduce_scatter_tensor %s" % dtype)
    # all_to_all_single, equal and uneven splits; row k of rank q's input
    # is 100 q + k, rows of 2.
    def rows(q, first, count):
        return (torch.arange(first, first + count) + 100 * q).unsqueeze(
            1).repeat(1, 2).to(torch.int16)
    out = torch.zeros(2 * size, 2, dtype=torch.int16)
    dist.all_to_all_single(out, rows(rank, 0, 2 * size))
    same(out, torch.cat([rows(q, 2 * rank, 2) for q in range(size)]),
         "all_to_all_single")
    # Rank q sends q + r + 1 rows to rank r.
    in_splits = [rank + r + 1 for r in range(size)]
    out_splits = [q + rank + 1 for q in range(size)]
    out = torch.zeros(sum(out_splits), 2, dtype=torch.int16)
    dist.all_to_all_single(out, rows(rank, 0, sum(in_splits)), out_splits,
                           in_splits)
    want = torch.cat([rows(q, sum(q + r + 1 for r in range(rank)),
                           q + rank + 1) for q in range(size)])
    same(out, want, "all_to_all_single uneven")
    ins = [torch.full((r + 1,), 10 * rank + r) for r in range(size)]
    outs = [torch.zeros(rank + 1, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for q in range(size):
        same(outs[q], torch.full((rank + 1,), 10 * q + rank), "all_to_all")
    dist.barrier()
    # Objects (pickles through all_gather and broadcast of bytes).
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank})
    check(objects == [{"rank": r, "text": "x" * r} for r in range(size)],
          "all_gather_object %s" % objects)
    box = [("root", 0, [1.5])] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    check(box == [("root", 0, [1.5])], "broadcast_object_list %s" % box)
    # A second group over every rank shares the session.
    group = dist.new_group()
    t = data(rank, 6, torch.int32)
    dist.all_reduce(t, group=group)
    same(t, reference(size, 6, torch.int32, "SUM"), "new_group()")
    print("CHECKS %d" % CHECKS[0])


class Net(torch.nn.Module):
    """10 -> 16 -> 3, and a head used only in even steps when asked
    (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 16)
        self.fc2 = torch.nn.Linear(16, 3)
        self.extra = torch.nn.Linear(16, 3)

    def forward(self, x, use_extra=True):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h) + (self.extra(h) if use_extra else 0)


def batches(steps, samples=64):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(samples, 10, generator=g),
             torch.randint(0, 3, (samples,), generator=g))
            for _ in range(steps)]


def train(variant, size, rank, steps=4):
    """Trains Net on this rank's shard (DistributedSampler) under DDP in
    `variant`, and the same objective in one process (the mean over ranks
    of each rank's loss); returns both models' parameters and the initial
    ones."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.utils.data import DistributedSampler, TensorDataset
    torch.manual_seed(rank)  # different on every rank: DDP broadcasts rank 0's
    local = Net()
    torch.manual_seed(0)
    single = Net()
    unused = variant == "find_unused_parameters"
    options = {"bucket_cap_mb": 0.0005}  # several buckets of 256+ bytes
    if unused:
        options["find_unused_parameters"] = True
    if variant == "static_graph":
        options["static_graph"] = True
    model = torch.nn.parallel.DistributedDataParallel(local, **options)
    if variant == "fp16_compress_hook":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    with torch.no_grad():  # the single process starts from rank 0's values
        for ours, broadcast in zip(single.parameters(),
                                   model.module.parameters()):
            ours.copy_(broadcast)
    start = [p.detach().clone() for p in single.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    micro = 2 if variant == "no_sync" else 1
    for step, (x, y) in enumerate(batches(steps)):
        dataset = TensorDataset(x, y)
        use_extra = not unused or step % 2 == 1
        opt.zero_grad()
        shards = {}
        for r in range(size):
            sampler = DistributedSampler(dataset, num_replicas=size, rank=r,
                                         shuffle=False)
            shards[r] = list(sampler)
        xs, ys = x[shards[rank]], y[shards[rank]]
        parts = list(zip(xs.chunk(micro), ys.chunk(micro)))
        for i, (xm, ym) in enumerate(parts):
            loss = F.cross_entropy(model(xm, use_extra), ym)
            if i < len(parts) - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        opt.step()
        ref_opt.zero_grad()
        total = 0
        for r in range(size):
            for xm, ym in zip(x[shards[r]].chunk(micro),
                              y[shards[r]].chunk(micro)):
                total = total + F.cross_entropy(single(xm, use_extra), ym)
        (total / size).backward()
        ref_opt.step()
    return list(model.module.parameters()), list(single.parameters()), start


def case_training(args):
    """DDP (variants) and ZeroRedundancyOptimizer equal single-process
    training on the same objective."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    init(args)
    rank, size = dist.get_rank(), dist.get_world_size()
    # Float32 gradients averaged in another order than one process sums
    # them: each element within a few ulps (2^-24 relative) of |g| <= 10
    # times the 64 samples; 4 steps of lr 0.1 with momentum (<= 4x): at
    # most 4 x 0.1 x 4 x 10 x 64 x 2^-24 = 6e-5, and in practice far less.
    # fp16_compress_hook rounds each averaged gradient to float16 (2^-11
    # relative, twice): 4 x 0.1 x 4 x 10 x 2^-10 = 0.016.
    bounds = {"fp16_compress_hook": 0.016}
    for variant in ("plain", "no_sync", "find_unused_parameters",
                    "static_graph", "fp16_compress_hook"):
        mine, ref, start = train(variant, size, rank)
        diff = max(float((a - b).abs().max()) for a, b in zip(mine, ref))
        moved = max(float((a - b).abs().max()) for a, b in zip(mine, start))
        check(diff < bounds.get(variant, 6e-5),
              "%s: max abs diff %g" % (variant, diff))
        check(moved > 1e-3, "%s: parameters did not move" % variant)
        flat = torch.cat([p.detach().reshape(-1) for p in mine])
        everyone = [torch.zeros_like(flat) for _ in range(size)]
        dist.all_gather(everyone, flat)
        check(all(torch.equal(e, flat) for e in everyone),
              "%s: ranks hold different parameters" % variant)
        print("DDP %s maxdiff %.3g" % (variant, diff))
    # ZeRO: each rank steps 1/size of the parameters, then broadcasts them.
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    torch.manual_seed(0)
    single = Net()
    zero = ZeroRedundancyOptimizer(model.parameters(),
                                   optimizer_class=torch.optim.SGD, lr=0.1,
                                   momentum=0.9)
    plain = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(4):
        shard = slice(rank * (64 // size), (rank + 1) * (64 // size))
        zero.zero_grad()
        F.cross_entropy(model(x[shard]), y[shard]).backward()
        zero.step()
        plain.zero_grad()
        F.cross_entropy(single(x), y).backward()
        plain.step()
    diff = max(float((a - b).abs().max())
               for a, b in zip(model.module.parameters(), single.parameters()))
    check(diff < 6e-5, "ZeRO: max abs diff %g" % diff)
    zero.consolidate_state_dict(to=0)
    if rank == 0:
        state = zero.state_dict()
        check(len(state["state"]) == len(list(single.parameters())),
              "ZeRO state_dict holds %d entries" % len(state["state"]))
    print("ZERO maxdiff %.3g" % diff)
    print("CHECKS %d" % CHECKS[0])


def expect_error(call, *texts):
    """Runs call(); returns its RuntimeError's text, which must hold every
    one of `texts`."""
    try:
        call()
    except RuntimeError as error:
        message = str(error)
        for text in texts:
            check(text in message, "%r not in %r" % (text, message))
        return message
    raise AssertionError("rank %d: no error from %s" % (dist.get_rank(), call))


def case_errors(args):
    """Every worker fails alike, with a message naming the op: first the
    errors found at the call, then shapes that differ across workers,
    which the daemons fail on every worker (and which ends their run)."""
    init(args)
    rank, size = dist.get_rank(), dist.get_world_size()
    expect_error(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32),
                                         op=dist.ReduceOp.BXOR),
                 "allreduce", "ReduceOp.BXOR", "not supported")
    expect_error(lambda: dist.send(torch.ones(1), dst=(rank + 1) % size),
                 "starling send", "collectives only")
    expect_error(lambda: dist.recv(torch.ones(1), src=(rank + 1) % size),
                 "starling recv", "collectives only")
    expect_error(lambda: dist.new_group([0, 1]), "not support subsets",
                 'new_group(ranks, backend="gloo")')
    gloo = dist.new_group([0, 1], backend="gloo")
    if rank < 2:
        t = torch.ones(1)
        dist.all_reduce(t, group=gloo)
        same(t, torch.full((1,), 2.0), "gloo subgroup")
    from starling.torch import distributed as backend
    expect_error(lambda: backend.new_process_group(rank, size + 1),
                 "world_size is %d" % (size + 1), "has %d workers" % size)
    t = torch.ones(2)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(size)), "before the mismatch")
    # Shapes that differ: the daemons fail the op on every worker.
    t = torch.ones(3 if rank == 0 else 4)
    message = expect_error(lambda: dist.all_reduce(t), "starling allreduce")
    print("MISMATCH %s" % message.replace("\n", " "))
    # That ended the daemons' run: the next op fails too, without waiting.
    start = time.monotonic()
    message = expect_error(lambda: dist.all_reduce(torch.ones(2)),
                           "starling allreduce")
    print("AFTER %.1f %s" % (time.monotonic() - start,
                             message.replace("\n", " ")))
    print("CHECKS %d" % CHECKS[0])
    sys.stdout.flush()
    os._exit(0)  # the run failed: no finish() at exit


def case_dead_rank(args):
    """Rank 1 leaves; the others' next collective raises in time."""
    init(args)
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    if rank == 1:
        sys.stdout.flush()
        os._exit(0)
    start = time.monotonic()
    message = expect_error(lambda: dist.all_reduce(torch.ones(4)),
                           "starling allreduce")
    elapsed = time.monotonic() - start
    print("DEAD %.1f %s" % (elapsed, message.replace("\n", " ")))
    sys.stdout.flush()
    os._exit(0)  # no finish(): the run cannot end normally


def case_torchrun(args):
    """Under torchrun: env:// from torchrun, the worker index from
    LOCAL_RANK."""
    check("STARLING_WORKER_INDEX" not in os.environ, "STARLING_WORKER_INDEX")
    init(args)
    rank, size = dist.get_rank(), dist.get_world_size()
    check(starling.torch.local_rank() == int(os.environ["LOCAL_RANK"]),
          "worker index %d" % starling.torch.local_rank())
    t = data(rank, 7, torch.float32)
    dist.all_reduce(t)
    same(t, reference(size, 7, torch.float32, "SUM"), "all_reduce")
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(out, torch.tensor([rank]))
    check([int(o) for o in out] == list(range(size)), "ranks %s" % out)
    mine, ref, _ = train("plain", size, rank, steps=2)
    diff = max(float((a - b).abs().max()) for a, b in zip(mine, ref))
    check(diff < 6e-5, "DDP under torchrun: max abs diff %g" % diff)
    print("TORCHRUN rank %d slot %d CHECKS %d" %
          (rank, starling.torch.rank(), CHECKS[0]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--init", default="env://")
    parser.add_argument("--reverse_ranks", action="store_true")
    args = parser.parse_args()
    globals()["case_" + args.case](args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
