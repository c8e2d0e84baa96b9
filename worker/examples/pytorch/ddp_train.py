"""LeNet on Fashion-MNIST with PyTorch's DistributedDataParallel on the
`starling` torch.distributed backend: the script a DDP user already has,
with one word changed (backend="starling") and one import.

    bazel build //client/python:starling-run
    # 4 workers on 2 daemons (starling-run sets RANK, WORLD_SIZE,
    # MASTER_ADDR, MASTER_PORT and the daemons' sockets):
    bazel-bin/client/python/starling-run -np 4 --nodes 2 \\
        /usr/bin/python3 worker/examples/pytorch/ddp_train.py
    # the same script on Gloo, for comparison:
    ... ddp_train.py --backend gloo

Under torchrun, start one starling-node per machine first (its
--local_workers = --nproc_per_node) and point the workers at its socket:

    STARLING_SOCKET=/run/starling/node.sock PYTHONPATH=<the package> \\
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 \\
        --nnodes 2 --node_rank 0 --master_addr HOST0 --master_port 29500 \\
        worker/examples/pytorch/ddp_train.py

Each worker trains on its DistributedSampler share with batch 32; DDP
all-reduces the gradients bucket by bucket during backward, through the
node daemons. Rank 0 prints the test accuracy after each epoch.
"""

import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import starling.torch  # registers the "starling" torch.distributed backend
from lenet import LeNet  # this folder's lenet.py

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--backend", default=starling.torch.distributed.BACKEND,
                    help="torch.distributed backend (starling, gloo)")
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=32, help="per worker")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--fp16_hook", action="store_true",
                    help="DDP's fp16 compression hook (gradients in 16 bits)")
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()


def load(kind):
    def read(name, offset):
        with gzip.open(os.path.join(args.data_dir, name)) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    x = read("%s-images-idx3-ubyte.gz" % kind, 16).reshape(-1, 1, 28, 28)
    y = read("%s-labels-idx1-ubyte.gz" % kind, 8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


dist.init_process_group(args.backend)  # env://: RANK, WORLD_SIZE, MASTER_*
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(args.threads)
torch.manual_seed(1)
train, test = load("train"), load("t10k")
model = DDP(LeNet())  # broadcasts rank 0's parameters to every worker
if args.fp16_hook:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
sampler = DistributedSampler(train, shuffle=True, seed=1)
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
if rank == 0:
    print("%d workers, backend %s, batch %d per worker, %d steps/epoch" %
          (world, dist.get_backend(), args.batch_size, len(loader)))
    print("%5s %10s %9s %8s" % ("epoch", "train_loss", "test_acc", "seconds"),
          flush=True)
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    model.train()
    start, loss_sum = time.perf_counter(), 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP's buckets are all-reduced while backward runs
        optimizer.step()
        loss_sum += loss.item()
    seconds = time.perf_counter() - start
    # Evaluation: each worker scores its share of the test set.
    model.eval()
    with torch.no_grad():
        x, y = test.tensors[0][rank::world], test.tensors[1][rank::world]
        correct = (model(x).argmax(1) == y).sum()
    totals = torch.tensor([loss_sum / len(loader), float(correct)])
    dist.all_reduce(totals)
    if rank == 0:
        print("%5d %10.4f %8.2f%% %8.2f" %
              (epoch + 1, totals[0] / world, 100.0 * totals[1] / len(test),
               seconds), flush=True)
dist.destroy_process_group()
