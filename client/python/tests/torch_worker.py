"""One worker of a starling.torch test case, run by starling-run (or, for
goes_on, by torch_regroup_test.py's own daemons).

    starling-run -np 4 --nodes 2 /usr/bin/python3 torch_worker.py CASE [--out DIR]

Each case asserts what a user relies on and exits non-zero (an exception)
when it does not hold; it prints `PARAMS <sha256>` of the final parameters
so that the driver (torch_test.py) can check every worker ended alike, and
with --out writes them to DIR/params.<rank>.pt for comparisons across runs.
"""

import argparse
import hashlib
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import starling
import starling.torch as st

# Equal shards of a fixed full batch: the mean of the shards' gradients is
# the full batch's, so the workers' run must match one process's.
FULL_BATCH = 64
STEPS = 10
LR = 0.1


def small_model(seed, hidden=16):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 3))


def fixed_data():
    g = torch.Generator().manual_seed(1234)
    return (torch.randn(FULL_BATCH, 10, generator=g),
            torch.randint(0, 3, (FULL_BATCH,), generator=g))


def params_hash(model):
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def shard(x):
    n = x.shape[0] // st.size()
    return x[st.rank() * n:(st.rank() + 1) * n]


def train_shards(model, optimizer, steps=STEPS):
    x, y = fixed_data()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        optimizer.step()


def reference(seed, momentum, steps=STEPS, dtype=torch.float32):
    """Plain single-process PyTorch on the full batch."""
    model = small_model(seed).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum)
    x, y = fixed_data()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(dtype)), y).backward()
        optimizer.step()
    return model


def max_diff(a, b):
    return max(float((p - q).abs().max())
               for p, q in zip(a.parameters(), b.parameters()))


def job_optimizer(model, momentum, lr=LR):
    """SGD as the job wants it: the daemons' learning rate when they step."""
    job = st.job()
    lr = job["learning_rate"] if job["optimizer"] != "none" else lr
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def train_and_compare(model, optimizer, momentum):
    """Sharded training, then the difference from single-process PyTorch
    (float32 sums in another order: a few ulps per step)."""
    train_shards(model, optimizer)
    diff = max_diff(model, reference(0, momentum))
    print("MAXDIFF %.3g placement %s" % (diff, optimizer.placement))
    assert diff <= 2e-6, "differs from single-process PyTorch by %g" % diff
    return model


# --- cases --------------------------------------------------------------------
def case_matches_single_process(args):
    """Workers start from different initialisations; broadcast_parameters
    makes them rank 0's, and sharded training equals the full batch's."""
    momentum = 0.9
    model = small_model(seed=st.rank())  # a different init on every worker
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    rank0 = small_model(seed=0)
    for p, q in zip(model.parameters(), rank0.parameters()):
        assert torch.equal(p, q), "broadcast_parameters: not rank 0's values"
    optimizer = job_optimizer(model, momentum)
    st.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = st.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters())
    return train_and_compare(model, optimizer, momentum)


def case_daemon_matches_worker(args):
    """The same SGD run, to compare across placements (--out)."""
    model = small_model(seed=0)
    optimizer = st.DistributedOptimizer(job_optimizer(model, 0.0),
                                        named_parameters=model.named_parameters())
    return train_and_compare(model, optimizer, 0.0)


def case_fixed_parameter_count(args):
    """The job fixes --parameter_count: a broadcast cannot open the first
    run (it would hold no tensors) and says so; created first, the
    optimizer declares the model and everything works as usual."""
    model = small_model(seed=st.rank())
    try:
        st.broadcast_parameters(model.state_dict(), root_rank=0)
    except st.StarlingError as e:
        print("BROADCAST_FIRST_ERROR", e)
        assert e.code == "FAILED_PRECONDITION", e.code
        assert "--parameter_count" in str(e), str(e)
    else:
        raise AssertionError("a broadcast opened a run with no tensors")
    optimizer = st.DistributedOptimizer(job_optimizer(model, 0.9),
                                        named_parameters=model.named_parameters())
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    return train_and_compare(model, optimizer, 0.9)


class BranchyNet(torch.nn.Module):
    """BatchNorm (buffers) and a branch used only on even steps."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.even = torch.nn.Linear(16, 3)
        self.odd = torch.nn.Linear(16, 3)
        self.frozen = torch.nn.Linear(3, 3)
        self.frozen.requires_grad_(False)

    def forward(self, x, step):
        h = torch.relu(self.bn(self.fc1(x)))
        head = self.even if step % 2 == 0 else self.odd
        return self.frozen(head(h))


def case_buffers_and_unused(args):
    torch.manual_seed(st.rank())
    model = BranchyNet()
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR),
        named_parameters=model.named_parameters())
    x, y = fixed_data()
    for step in range(6):
        before_odd = model.odd.weight.detach().clone()
        optimizer.zero_grad()
        F.cross_entropy(model(shard(x), step), shard(y)).backward()
        optimizer.step()
        if step % 2 == 0:
            # No worker used `odd`: its averaged gradient is zero.
            assert torch.equal(model.odd.weight, before_odd), step
        else:
            assert not torch.equal(model.odd.weight, before_odd), step
    # Buffers are each worker's own (as in Horovod) until broadcast.
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    return model


def case_model_differs(args):
    """Rank 1 builds fc2 with another shape: both the broadcast and the
    optimizer fail on every worker, naming the parameter."""
    hidden = 17 if st.rank() == 1 else 16
    model = small_model(seed=0, hidden=hidden)
    try:
        st.broadcast_parameters(model.state_dict(), root_rank=0)
    except st.StarlingError as e:
        print("BROADCAST_ERROR", e)
        assert e.code == "INVALID_ARGUMENT", e.code
        assert "'0.weight'" in str(e) or "'0.bias'" in str(e), str(e)
    else:
        raise AssertionError("broadcast_parameters accepted different models")
    try:
        optimizer = st.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR),
            named_parameters=model.named_parameters())
        model(fixed_data()[0]).sum().backward()
        optimizer.step()
    except st.StarlingError as e:
        print("OPTIMIZER_ERROR", e)
        assert e.code == "INVALID_ARGUMENT", e.code
        assert "'0.weight'" in str(e) or "'0.bias'" in str(e), str(e)
    else:
        raise AssertionError("DistributedOptimizer accepted different models")
    return None


def finish_failed_run():
    """shutdown() after a failed run raises, naming the failure."""
    try:
        st.shutdown()
    except st.StarlingError as e:
        assert "failed" in str(e), str(e)
    else:
        raise AssertionError("finish succeeded after the run failed")


def load_fashion(limit_train, limit_test):
    root = os.environ.get("FASHION_MNIST_DIR",
                          "/usr/share/datasets/fashion-mnist")

    def read(name, offset):
        with gzip.open(os.path.join(root, name)) as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

    x = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:limit_train]
    y = read("train-labels-idx1-ubyte.gz", 8)[:limit_train]
    tx = read("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:limit_test]
    ty = read("t10k-labels-idx1-ubyte.gz", 8)[:limit_test]
    norm = lambda a: torch.from_numpy((a.astype(np.float32) / 255.0 - 0.286) /
                                      0.353)
    return (norm(x), torch.from_numpy(y.astype(np.int64)), norm(tx),
            torch.from_numpy(ty.astype(np.int64)))


def case_fashion(args):
    """An MLP on 12,000 Fashion-MNIST images, 3 epochs, batch 32 per worker,
    in whatever mode and placement the job says; rank 0 reports accuracy."""
    torch.set_num_threads(1)
    x, y, tx, ty = load_fashion(12000, 2000)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    if args.dtype != "float32":
        model = model.to(getattr(torch, args.dtype))
    optimizer = st.DistributedOptimizer(
        job_optimizer(model, args.momentum, args.lr),
        named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(7)
    batch = 32
    for epoch in range(3):
        order = torch.randperm(x.shape[0], generator=g)
        mine = order[st.rank()::st.size()]
        for i in range(0, mine.numel() - batch + 1, batch):
            idx = mine[i:i + batch]
            optimizer.zero_grad()
            out = model(x[idx].to(next(model.parameters()).dtype))
            F.cross_entropy(out.float(), y[idx]).backward()
            optimizer.step()
    with torch.no_grad():
        pred = model(tx.to(next(model.parameters()).dtype)).argmax(1)
    accuracy = float((pred == ty).float().mean())
    print("ACCURACY %.4f placement %s staleness %d" %
          (accuracy, optimizer.placement, optimizer.staleness))
    assert accuracy >= args.min_accuracy, (accuracy, args.min_accuracy)
    return model


def case_errors(args):
    """A failing op raises StarlingError with the C++ status text."""
    model = small_model(0)
    n = 5 if st.rank() == 1 else 4
    try:
        st.allreduce(torch.ones(n))
    except st.StarlingError as e:
        print("ALLREDUCE_ERROR", e.code, e)
        assert "all_reduce" in str(e), str(e)
    else:
        raise AssertionError("all-reduces of different lengths succeeded")
    finish_failed_run()
    return model


class HalfLinear(torch.nn.Module):
    """16-bit parameters (CPU PyTorch has no 16-bit matmul: computed in
    float32, so gradients arrive in the parameters' dtype)."""

    def __init__(self, n_in, n_out, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(
            (torch.randn(n_out, n_in) * 0.3).to(dtype))
        self.bias = torch.nn.Parameter(torch.zeros(n_out, dtype=dtype))

    def forward(self, x):
        return x @ self.weight.float().t() + self.bias.float()


def case_half(args):
    """float16 / bfloat16 parameters: training lowers the loss and every
    worker ends with the same parameters (checked by the driver)."""
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    model = torch.nn.Sequential(HalfLinear(10, 16, dtype), torch.nn.Tanh(),
                                HalfLinear(16, 3, dtype))
    optimizer = st.DistributedOptimizer(job_optimizer(model, 0.0),
                                        named_parameters=model.named_parameters())
    x, y = fixed_data()
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(shard(x)), shard(y))
        loss.backward()
        optimizer.step()
        losses.append(float(st.allreduce(loss.detach())))
    print("LOSS first %.4f last %.4f" % (losses[0], losses[-1]))
    assert losses[-1] < 0.9 * losses[0], losses
    for p in model.parameters():
        assert p.dtype == dtype and p.grad.dtype == dtype, (p.dtype, dtype)
    return model


def case_goes_on(args):
    """Momentum SGD for --steps steps (the daemons' when the job names one,
    else the workers' own), each worker on its rank's shard of the fixed
    batch (re-sharded by rank() and size() as they are at each step);
    torch_regroup_test.py kills a daemon mid-run: step() rejoins the
    re-formed group and the run goes on. Prints STEP lines (every 10
    steps), REGROUPED for each callback."""
    model = small_model(0)
    job = st.job()
    if job["optimizer"] == "none":
        lr, momentum = LR, 0.9
    else:
        lr = job["learning_rate"]
        momentum = starling_daemon_momentum(job["optimizer"])
    optimizer = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
        named_parameters=model.named_parameters(),
        on_regroup=lambda r: print("REGROUPED", r, flush=True))
    x, y = fixed_data()
    # Follows the group's step: worker-side, a step only this worker took
    # is dropped when the group re-forms, one another worker applied
    # counts as taken, so the workers' own step() counts may differ by one.
    t = 0
    while t < args.steps:
        optimizer.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        optimizer.step()
        if t % 10 == 0:
            print("STEP", t, flush=True)
        t = optimizer.next_step
        time.sleep(0.002)
    print("STEPS", args.steps, "size", st.size(), file=sys.stderr)
    return model


def starling_daemon_momentum(optimizer):
    return starling._starling.DAEMON_OPTIMIZERS[optimizer].get("momentum", 0.0)


CASES = {
    "goes_on": case_goes_on,
    "half": case_half,
    "matches_single_process": case_matches_single_process,
    "daemon_matches_worker": case_daemon_matches_worker,
    "fixed_parameter_count": case_fixed_parameter_count,
    "buffers_and_unused": case_buffers_and_unused,
    "model_differs": case_model_differs,
    "fashion": case_fashion,
    "errors": case_errors,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--out", help="directory for params.<rank>.pt")
    parser.add_argument("--min_accuracy", type=float, default=0.0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    st.init()
    model = CASES[args.case](args)
    if model is not None:
        print("PARAMS", params_hash(model))
        if args.out:
            torch.save(model.state_dict(),
                       os.path.join(args.out, "params.%d.pt" % st.rank()))


if __name__ == "__main__":
    main()
