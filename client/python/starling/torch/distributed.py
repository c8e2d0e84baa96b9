"""torch.distributed over Starling: the "starling" backend.

    import starling.torch                        # registers the backend
    import torch.distributed as dist
    dist.init_process_group("starling")          # env:// or init_method="file://..."
    model = torch.nn.parallel.DistributedDataParallel(model)

The collectives run on the Starling node daemons, which the worker reaches
through its daemon's socket (starling.init(): STARLING_SOCKET,
STARLING_WORKER_INDEX); torch's store (env:// or file://) only serves
torch's own rendezvous. DistributedDataParallel (with no_sync,
find_unused_parameters, static_graph and communication hooks such as
fp16_compress_hook), ZeroRedundancyOptimizer, DistributedSampler and the
object collectives work on it.

Launching:

- starling-run -np N [--nodes K] /usr/bin/python3 train.py: starts the
  daemons and sets, besides STARLING_*, RANK, WORLD_SIZE, LOCAL_RANK,
  LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (unless
  MASTER_ADDR/MASTER_PORT are set), so env:// works as under torchrun.
- torchrun next to running daemons (one starling-node per machine, started
  with --local_workers equal to --nproc_per_node): set STARLING_SOCKET to
  the daemon's --worker_socket; STARLING_WORKER_INDEX defaults to torchrun's
  LOCAL_RANK when unset.

Ranks and slots: the daemons number workers by slot (daemon rank x local
workers + worker index), torch by rank; they may differ (torchrun numbers
nodes its own way). The group learns every rank's slot when it is created,
and results ordered by rank (all_gather, gather, all_to_all) follow torch's
ranks. world_size must be the job's number of workers.

Ops: all_reduce (SUM, AVG, PRODUCT, MIN, MAX on floating point, integer,
bool and complex tensors; BAND, BOR, BXOR and PREMUL_SUM raise), reduce,
broadcast, all_gather, all_gather_into_tensor, gather, scatter,
reduce_scatter, reduce_scatter_tensor, all_to_all(_single) (built on an
all-gather: every worker receives every worker's input), barrier. Every
op is asynchronous: ops run in call order on one background thread per
process, and the returned Work (and its future) completes when the daemons
are done, so DDP's bucket all-reduces overlap backward. A failed op (e.g.
shapes that differ across workers, which the daemons fail on every worker)
raises RuntimeError naming the op with the daemon's text; an op that does
not end within STARLING_TIMEOUT (default 60 s) plus 2 s raises, and so do
all later ops of the process.

Not supported: send/recv (the daemons run collectives only: use broadcast
or all_gather, or a gloo group), new_group over a subset of the ranks (use
new_group(ranks, backend="gloo")); new_group over every rank works and
shares the process's Starling session; monitored_barrier (PyTorch allows it
on gloo only).

CUDA tensors are staged through host memory (copied at the call on the
current stream, written back before the work completes).
"""

import functools
import inspect
import os

import torch.distributed as dist

import starling

BACKEND = "starling"

try:
    from starling.torch import _backend
except ImportError as error:  # pragma: no cover - a build problem
    _backend = None
    _IMPORT_ERROR = error


def _executor(session):
    """The process's one executor, made with its session and stopped before
    the session's client closes."""
    executor = getattr(session, "_torch_executor", None)
    if executor is None:
        executor = _backend.Executor(session.client, session.timeout)
        session._torch_executor = executor
        session.on_close(executor.shutdown)
    return executor


def _worker_index():
    """STARLING_WORKER_INDEX, else torchrun's LOCAL_RANK, else None (0)."""
    if os.environ.get("STARLING_WORKER_INDEX"):
        return None  # starling.init reads it
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank:
        try:
            return int(local_rank)
        except ValueError:
            raise RuntimeError("starling: LOCAL_RANK=%r is not an integer" %
                               local_rank) from None
    return None


def _subset_error(size, world):
    return RuntimeError(
        "starling: a process group over %d of the %d ranks: the starling "
        "backend does not support subsets of the ranks yet (its collectives "
        "span every worker of the Starling job); create the subgroup with "
        "new_group(ranks, backend=\"gloo\"), or use new_group() over every "
        "rank" % (size, world))


def create_process_group(store, rank, size, timeout):
    """torch.distributed's constructor of "starling" process groups
    (Backend.register_backend): joins the process's Starling session
    (starling.init() unless done), checks that `size` is the job's number
    of workers and returns a ProcessGroupStarling. `store` is not used: the
    daemons are the rendezvous."""
    del store
    if dist.is_initialized() and size != dist.get_world_size():
        raise _subset_error(size, dist.get_world_size())
    if not starling.is_initialized():
        starling.init(worker_index=_worker_index())
    return _make_group(rank, size, timeout.total_seconds())


def new_process_group(rank=None, size=None, timeout=None):
    """A starling process group outside torch.distributed's registry (not
    its default group), for code that calls a group's collectives itself
    (starling.torch.collectives). rank and size default to starling.rank()
    and starling.size() (Starling's numbering); timeout (a timedelta, how
    long Work.wait() waits when not told) to torch's default, 30 minutes.
    starling.init() first. Blocks until every worker created its group."""
    starling.session()  # raises unless starling.init() was called
    rank = starling.rank() if rank is None else rank
    size = starling.size() if size is None else size
    seconds = (dist.default_pg_timeout if timeout is None else
               timeout).total_seconds()
    return _make_group(rank, size, seconds)


def _make_group(rank, size, timeout_s):
    if _backend is None:
        raise RuntimeError(
            "starling: the torch.distributed backend's extension module "
            "starling/torch/_backend.so is missing or does not load (build "
            "//client/python:starling): %s" % _IMPORT_ERROR)
    session = starling.session()
    client = session.client
    workers = client.group_size * client.local_workers
    if size != workers:
        # Before the barrier, which would wait for workers that never come.
        raise RuntimeError(
            "starling: torch.distributed's world_size is %d but the Starling "
            "job has %d workers (%d daemons x %d local workers, starling-node "
            "--local_workers): start one torch process per worker of the "
            "job (starling-run -np %d, or torchrun with --nproc_per_node "
            "equal to --local_workers on every daemon's machine)" %
            (size, workers, client.group_size, client.local_workers, workers))
    session.data_op()  # the group's barrier begins a run
    group = _backend.ProcessGroupStarling(_executor(session), rank, size,
                                          timeout_s)
    session.check_size()
    return group


def _guard_new_group(new_group):
    """new_group, refusing subsets of the ranks on the starling backend on
    every rank (torch would create the group on its members only, and the
    others would wait in torch's store barrier until the timeout)."""
    signature = inspect.signature(new_group)

    @functools.wraps(new_group)
    def guarded(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs).arguments
        ranks = arguments.get("ranks")
        backend = arguments.get("backend")
        if ranks is not None and dist.is_initialized():
            uses_starling = (str(backend).lower() == BACKEND if backend else
                             dist.get_backend() == BACKEND)
            world = dist.get_world_size()
            if uses_starling and sorted(set(ranks)) != list(range(world)):
                raise _subset_error(len(set(ranks)), world)
        return new_group(*args, **kwargs)

    guarded._starling_guard = True
    return guarded


def register():
    """Registers the "starling" backend with torch.distributed (done by
    `import starling.torch`); a second call does nothing."""
    if not dist.is_available():
        return
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_process_group)
    c10d = dist.distributed_c10d
    if not getattr(c10d.new_group, "_starling_guard", False):
        c10d.new_group = _guard_new_group(c10d.new_group)
    if dist.new_group is not c10d.new_group:
        dist.new_group = c10d.new_group


register()
