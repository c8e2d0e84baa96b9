"""Starling for PyTorch, in Horovod's shape.

    import starling.torch as st
    st.init()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * st.size())
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    st.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = st.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters())
    for x, y in shard_of_the_data:           # each worker its own samples
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()      # buckets leave as autograd fills them
        optimizer.step()                     # the reduced gradients, applied

Where the optimizer runs is the job's choice (starling-run --optimizer):
`none` (the default) all-reduces the gradients and the wrapped optimizer
runs in every worker; `sgd`, `momentum` or `adam` let the daemons own the
optimizer, each holding 1/N of its state, and step() pulls the updated
parameters. `--mode async_sgd --staleness s` makes either asynchronous
with staleness bound s. See DistributedOptimizer.

Horovod scripts switch by their import (`import starling.torch as hvd`):
the package has Horovod's names (allreduce with op=Average/Sum/Min/Max/
Product and Compression, the async forms with poll and synchronize,
allgather, reducescatter, alltoall, grouped_allreduce, join,
SyncBatchNorm, ...; starling.torch.collectives says what differs).

torch.distributed users get a backend instead: importing this package
registers "starling" (starling.torch.distributed), so that
`torch.distributed.init_process_group("starling")` runs DDP, ZeRO and the
collectives on the daemons.

A daemon lost mid-run (kill -9, a node down) does not end a sync_sgd or
parameter_server run whose daemons own the optimizer (they keep a buddy
replica of their state): step() rejoins the re-formed group and completes
there, logging it; DistributedOptimizer(on_regroup=...) is told the new
rank() and size().
"""

try:
    import torch
except ImportError as error:  # pragma: no cover - depends on the machine
    raise ImportError(
        "starling.torch needs PyTorch for /usr/bin/python3 (Debian: apt-get "
        "install python3-torch); run the script with /usr/bin/python3: %s" %
        error) from error
del torch  # only checked here; each module imports it

from starling import (StarlingError, barrier, init, is_initialized, job,
                      local_rank, local_size, node_count, node_rank, rank,
                      report, shutdown, size)
from starling.torch.functions import (broadcast_object,
                                      broadcast_optimizer_state,
                                      broadcast_parameters)
from starling.torch.collectives import (
    Adasum, Average, Compression, Max, Min, Product, Sum, allgather,
    allgather_async, allgather_object, allreduce, allreduce_, allreduce_async,
    allreduce_async_, alltoall, broadcast, broadcast_, broadcast_async,
    broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built,
    ddl_built, gloo_built, gloo_enabled, global_process_set,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, is_homogeneous, join, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, poll, reducescatter, rocm_built,
    start_timeline, stop_timeline, synchronize)
from starling.torch.sync_batch_norm import SyncBatchNorm
from starling.torch.optimizer import DistributedOptimizer, Regrouped
from starling.torch.distributed import register as _register_backend

_register_backend()  # torch.distributed's "starling" backend

__all__ = [
    "StarlingError", "init", "is_initialized", "shutdown", "rank", "size",
    "local_rank", "local_size", "node_rank", "node_count", "job", "barrier",
    "report",
    "allreduce", "allreduce_", "broadcast_", "broadcast_object",
    "broadcast_parameters", "broadcast_optimizer_state",
    "DistributedOptimizer", "Regrouped",
    # Horovod's names (starling.torch.collectives, SyncBatchNorm).
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "Compression",
    "global_process_set", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async",
    "allgather_object", "broadcast", "broadcast_async", "broadcast_async_",
    "reducescatter", "alltoall", "poll", "synchronize", "join",
    "SyncBatchNorm", "nccl_built", "mpi_built", "gloo_built", "ddl_built",
    "ccl_built", "cuda_built", "rocm_built", "mpi_enabled", "gloo_enabled",
    "mpi_threads_supported", "cross_rank", "cross_size", "is_homogeneous",
    "start_timeline", "stop_timeline"
]
