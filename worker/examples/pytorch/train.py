"""Data-parallel training of LeNet (or an MLP) on Fashion-MNIST with Starling.

    bazel build //client/python:starling-run
    bazel-bin/client/python/starling-run -np 4 --nodes 2 \
        /usr/bin/python3 worker/examples/pytorch/train.py

Every worker trains on its own 1/size() of each epoch's samples; the
gradients are averaged across workers by the Starling daemons. With
`starling-run --optimizer none` (the default) the wrapped torch optimizer
steps in every worker on the averaged gradients; with `--optimizer momentum
--learning_rate LR` the daemons apply SGD with momentum 0.9 themselves
(the torch optimizer built here then matches theirs and is not stepped).
"""

import argparse
import gzip
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import starling.torch as st
from lenet import LeNet  # this folder's lenet.py

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--model", choices=["lenet", "mlp"], default="lenet")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch_size", type=int, default=32, help="per worker")
parser.add_argument("--lr", type=float, default=0.05,
                    help="SGD momentum 0.9, cosine decay over the epochs (when the "
                    "daemons step: starling-run's --learning_rate, constant)")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
parser.add_argument("--timing", action="store_true", help="print per-step timings")
args = parser.parse_args()


def load(kind):
    """(images [N, 1, 28, 28] float32 normalised, labels [N] int64)."""
    def read(name, offset):
        with gzip.open(os.path.join(args.data_dir, name)) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    x = read("%s-images-idx3-ubyte.gz" % kind, 16).reshape(-1, 1, 28, 28)
    y = read("%s-labels-idx1-ubyte.gz" % kind, 8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def mlp():  # the C++ reference worker's --model mlp: 784-256-128-10
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


st.init()  # connects to this worker's daemon (starling-run sets the environment)
torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
train_x, train_y = load("train")
test_x, test_y = load("t10k")
model = LeNet() if args.model == "lenet" else mlp()

# When the daemons own the optimizer (starling-run --optimizer sgd, momentum
# or adam), the torch optimizer must describe the same update at their rate.
job = st.job()
lr = args.lr if job["optimizer"] == "none" else job["learning_rate"]
if job["optimizer"] == "adam":
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
else:
    momentum = 0.0 if job["optimizer"] == "sgd" else 0.9
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

# Every worker starts from rank 0's parameters and optimizer state, then
# the wrapper averages the gradients across workers in each step().
st.broadcast_parameters(model.state_dict(), root_rank=0)
st.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = st.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

# Each worker's shard: the same permutation everywhere (seeded per epoch),
# cut into size() equal parts; worker rank() takes part rank().
shard = len(train_x) // st.size()
steps = (shard + args.batch_size - 1) // args.batch_size
if st.rank() == 0:
    where = ("in the workers" if job["optimizer"] == "none" else
             "in the daemons (--optimizer %s)" % job["optimizer"])
    print("%d workers on %d daemons, %s, batch %d per worker, %d steps/epoch, "
          "%s lr %g %s" % (st.size(), st.node_count(), args.model, args.batch_size,
                           steps, type(optimizer).__name__, lr, where))
    print("%5s %10s %9s %8s %10s" % ("epoch", "train_loss", "test_acc",
                                     "seconds", "samples/s"), flush=True)

timings = []  # per step: (step, forward + backward, optimizer.step()) seconds
for epoch in range(args.epochs):
    order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
        args.seed * 1000 + epoch))
    mine = order[st.rank() * shard:(st.rank() + 1) * shard]
    if job["optimizer"] == "none":  # cosine decay (the daemons' rate is fixed)
        for group in optimizer.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * epoch / args.epochs))
    model.train()
    loss_sum, start = 0.0, time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        idx = mine[i * args.batch_size:(i + 1) * args.batch_size]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        loss.backward()  # gradient buckets leave for the daemons as they fill
        t1 = time.perf_counter()
        optimizer.step()  # waits for the averaged gradients (or new parameters)
        t2 = time.perf_counter()
        loss_sum += loss.item()
        # For the daemons' metrics (training dashboard); sent with the next push.
        st.report(samples=len(idx), loss=loss.item())
        if epoch > 0 or args.epochs == 1:  # the first epoch is the warm-up
            timings.append((t2 - t0, t1 - t0, t2 - t1))
    seconds = time.perf_counter() - start

    # Evaluation: each worker scores its share of the test set, then the
    # counts are summed across workers.
    model.eval()
    part = slice(st.rank() * len(test_x) // st.size(),
                 (st.rank() + 1) * len(test_x) // st.size())
    with torch.no_grad():
        correct = (model(test_x[part]).argmax(1) == test_y[part]).sum().item()
    totals = st.allreduce(torch.tensor([loss_sum / steps, correct]), average=False)
    st.report(accuracy=float(totals[1]) / len(test_x))
    if st.rank() == 0:
        print("%5d %10.4f %8.2f%% %8.2f %10.1f" % (
            epoch + 1, totals[0] / st.size(), 100.0 * totals[1] / len(test_x),
            seconds, shard * st.size() / seconds), flush=True)

if args.timing:
    # Medians and means over this worker's steps after the first epoch,
    # averaged over the workers; compute = forward + backward, step() = the
    # wait for the averaged gradients (or the daemons' new parameters).
    columns = list(zip(*timings))
    ms = ([1000 * statistics.median(c) for c in columns] +
          [1000 * statistics.mean(c) for c in columns])
    t = st.allreduce(torch.tensor(ms)).tolist()
    if st.rank() == 0:
        print("timing: %d steps/worker, median step %.3f ms, compute %.3f ms, "
              "optimizer.step() %.3f ms; mean step %.3f ms, compute %.3f ms, "
              "optimizer.step() %.3f ms" % (len(timings), *t))
