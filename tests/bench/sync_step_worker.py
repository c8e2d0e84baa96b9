"""The Python twin of sync_step_worker.cc, for tests/bench/binding_bench.sh.

Trains f_w(x) = 0.5 |x - t_w|^2 with synchronous SGD applied by the daemons,
through starling.torch's DistributedOptimizer (the path PyTorch users take):
per step the gradient x - t_w is written into x.grad (one pass, no autograd,
as the C++ worker computes it) and optimizer.step() pushes it and pulls the
updated x. t_w is the C++ worker's per-worker hash of the element index, so
both twins compute the same values: the final parameters' FNV-1a hash must
equal the C++ worker's (a check that the binding moves the same bytes).

Prints, like the C++ worker: rank, index, the medians over the timed steps
of the step (gradient + optimizer.step()) and of the gradient pass in ms,
and the hash.
"""

import argparse
import statistics
import time

import numpy as np
import torch

import starling.torch as st


def target(worker, dim):
    """sync_step_worker.cc's Target(worker, i) for i in [0, dim)."""
    with np.errstate(over="ignore"):
        i = np.arange(dim, dtype=np.uint64)
        h = ((i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)) ^ (
            np.uint64(worker + 1) * np.uint64(0xC2B2AE3D27D4EB4F))
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    t = (h >> np.uint64(40)).astype(np.float32) / np.float32(1 << 23)
    return torch.from_numpy(t - np.float32(1.0))


def fnv1a(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, default=235146)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    st.init()
    job = st.job()
    if job["optimizer"] != "sgd" or job["mode"] != "sync_sgd":
        raise SystemExit("sync_step_worker.py: run the job with --mode "
                         "sync_sgd --optimizer sgd")
    x = torch.nn.Parameter(torch.zeros(args.dim))
    optimizer = st.DistributedOptimizer(
        torch.optim.SGD([x], lr=job["learning_rate"]),
        named_parameters=[("x", x)])
    t = target(st.rank(), args.dim)
    step_ms, grad_ms = [], []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.sub(x, t, out=x.grad)
        t1 = time.perf_counter()
        optimizer.step()
        t2 = time.perf_counter()
        if step >= args.warmup:
            step_ms.append(1e3 * (t2 - t0))
            grad_ms.append(1e3 * (t1 - t0))
    digest = fnv1a(x.detach().numpy().tobytes())
    print("rank=%d index=%d step_ms=%.3f grad_ms=%.3f params_fnv=%016x "
          "x0=%s" % (st.node_rank(), st.local_rank(),
                     statistics.median(step_ms), statistics.median(grad_ms),
                     digest, float(x[0]).hex()))


if __name__ == "__main__":
    main()
