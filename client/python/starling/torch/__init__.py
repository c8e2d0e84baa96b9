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
from starling.torch.functions import (allreduce, allreduce_, broadcast_,
                                      broadcast_object,
                                      broadcast_optimizer_state,
                                      broadcast_parameters)
from starling.torch.optimizer import DistributedOptimizer, Regrouped

__all__ = [
    "StarlingError", "init", "is_initialized", "shutdown", "rank", "size",
    "local_rank", "local_size", "node_rank", "node_count", "job", "barrier",
    "report",
    "allreduce", "allreduce_", "broadcast_", "broadcast_object",
    "broadcast_parameters", "broadcast_optimizer_state",
    "DistributedOptimizer", "Regrouped"
]
