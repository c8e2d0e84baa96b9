"""Horovod's PyTorch collectives, on Starling's daemons.

    import starling.torch as hvd          # was: import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([loss]), op=hvd.Sum)
    rows = hvd.allgather(predictions)     # dim 0 may differ across workers
    handle = hvd.allreduce_async(grad, name="g")
    ...                                   # overlap
    grad = hvd.synchronize(handle)

Every operation runs through the process's `starling` torch.distributed
process group (the default group when init_process_group("starling") was
called, else one made on first use with rank() and size()), so it takes
every dtype and op that backend takes and fails the same way: an op whose
shapes differ across workers fails on every worker with the daemons' text.
Ranks are Starling's (rank(), size()). Every worker must issue the same
operations in the same order (Horovod negotiates the order by name; Starling
does not: `name` only labels errors).

What differs from Horovod, by name:
- op=Adasum raises (Starling has no Adasum); Average (the default), Sum,
  Min, Max and Product work on every tensor type.
- process_set: only the global set (None or global_process_set).
- join() is a barrier: a worker that joined does not stand in for the
  collectives others still issue (the daemons then fail those, naming both
  calls); it returns the rank that reached it last (by wall clock).
- nccl_built(), mpi_built(), gloo_built(), ddl_built(), ccl_built() are
  False: Starling runs its own collectives between its daemons.
"""

import itertools
import pickle
import time

import torch
import torch.distributed as dist

import starling


class _Op:
    """A Horovod reduction operator (hvd.Average, hvd.Sum, ...)."""

    def __init__(self, name, torch_op):
        self.name = name
        self.torch_op = torch_op

    def __repr__(self):
        return "starling.torch.%s" % self.name


Average = _Op("Average", dist.ReduceOp.SUM)
Sum = _Op("Sum", dist.ReduceOp.SUM)
Min = _Op("Min", dist.ReduceOp.MIN)
Max = _Op("Max", dist.ReduceOp.MAX)
Product = _Op("Product", dist.ReduceOp.PRODUCT)
Adasum = _Op("Adasum", None)


class _ProcessSet:
    """Horovod's process set: Starling has only the global one."""

    def __repr__(self):
        return "starling.torch.global_process_set"


global_process_set = _ProcessSet()


# --- compression ------------------------------------------------------------
class Compressor:
    """Turns a tensor into what crosses the network and back."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Sends tensors as they are."""


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32)
    and restores their type afterwards; other tensors as they are."""

    @staticmethod
    def compress(tensor):
        if tensor.is_floating_point() and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    """hvd.Compression.none and hvd.Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor


# --- the process group --------------------------------------------------------
_own_group = None


def _group():
    """The default group when it is Starling's, else the module's own."""
    global _own_group
    if (dist.is_available() and dist.is_initialized() and
            dist.get_backend() == "starling"):
        return dist.distributed_c10d._get_default_group()
    if _own_group is None:
        from starling.torch import distributed as _distributed
        _own_group = _distributed.new_process_group(starling.rank(),
                                                    starling.size())
    return _own_group


def _error(code, message):
    return starling._error(code, message)


def _check_process_set(process_set, what):
    if process_set is not None and process_set is not global_process_set:
        raise _error(
            "UNIMPLEMENTED",
            "%s: process sets other than the global one are not supported by "
            "Starling; use the global set (every worker), or torch."
            "distributed.new_group(ranks, backend='gloo') for a subset" % what)


def _resolve_op(average, op, what):
    """Horovod's rule: `average` (deprecated) and `op` exclude each other;
    the default is Average."""
    if average is not None and op is not None:
        raise ValueError("%s: give either average or op, not both" % what)
    if op is None:
        op = Sum if average is False else Average
    if op is Adasum:
        raise _error(
            "UNIMPLEMENTED",
            "%s: op=Adasum has no Starling implementation; use op=Average "
            "(the default) or op=Sum (the daemons' all-reduce)" % what)
    if not isinstance(op, _Op):
        raise ValueError("%s: op %r is not one of Average, Sum, Min, Max, "
                         "Product" % (what, op))
    return op


def _divide(tensor, n):
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.div_(n)
    else:
        tensor.copy_(torch.div(tensor, n, rounding_mode="trunc"))


# --- handles ----------------------------------------------------------------
class _Handle:

    def __init__(self, works, finish):
        self.works = works
        self.finish = finish
        self.result = None
        self.done = False


_handles = {}
_handle_ids = itertools.count(1)


def _register(works, finish):
    handle = next(_handle_ids)
    _handles[handle] = _Handle(works, finish)
    return handle


def drain():
    """Waits until every asynchronous operation started here has reached the
    daemons' answer (their results stay for synchronize(), errors too).
    Starling's own ops that go to the client directly (DistributedOptimizer's
    buckets, the broadcasts of starling.torch.functions) call it first, so
    that every worker's ops reach its daemon in the same order whatever the
    timing of this module's background thread."""
    for h in list(_handles.values()):
        if h.done:
            continue
        for work in h.works:
            try:
                work.wait()
            except RuntimeError:
                pass  # raised again by synchronize(handle)


def poll(handle):
    """True once the asynchronous operation `handle` finished (its result
    is then ready for synchronize())."""
    h = _handles.get(handle)
    if h is None:
        raise ValueError("poll: %r is not a handle of a pending operation" %
                         (handle,))
    return h.done or all(w.is_completed() for w in h.works)


def synchronize(handle):
    """Waits for the asynchronous operation `handle` and returns its result
    (raising the daemons' error if it failed)."""
    h = _handles.pop(handle, None)
    if h is None:
        raise ValueError(
            "synchronize: %r is not a handle of a pending operation" %
            (handle,))
    if not h.done:
        for work in h.works:
            _wait(work)
        h.result = h.finish()
        h.done = True
    return h.result


# absl::StatusCode names, as the daemons' texts begin.
_STATUS_CODES = frozenset((
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"))


def _wait(work):
    """work.wait(), its failure raised as a StarlingError (the daemons'
    text; `code` the status code's name where the text starts with one)."""
    try:
        work.wait()
    except starling.StarlingError:
        raise
    except RuntimeError as error:
        text = str(error)
        head = text.split(":", 1)[0].strip()
        tail = text.rstrip()
        tail = tail[tail.rfind("(") + 1:-1] if tail.endswith(")") else ""
        code = (head if head in _STATUS_CODES else
                tail if tail in _STATUS_CODES else "UNKNOWN")
        raise _error(code, text) from None


# --- allreduce ----------------------------------------------------------------
def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    """Starts an in-place all-reduce of `tensor`; returns a handle for
    poll() and synchronize() (which returns `tensor`)."""
    what = "allreduce%s" % ("" if name is None else " '%s'" % name)
    op = _resolve_op(average, op, what)
    _check_process_set(process_set, what)
    with torch.no_grad():
        if prescale_factor != 1.0:
            tensor.mul_(prescale_factor)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op.torch_op
        work = _group().allreduce([tensor], opts)

    def finish():
        with torch.no_grad():
            if op is Average:
                _divide(tensor, starling.size())
            if postscale_factor != 1.0:
                tensor.mul_(postscale_factor)
        return tensor

    return _register([work], finish)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    """As allreduce_async_, on a copy: `tensor` is left as it is."""
    return allreduce_async_(tensor.detach().clone(), average, name, op,
                            prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    """All-reduces `tensor` in place (op over every worker's; Average by
    default) and returns it."""
    return synchronize(
        allreduce_async_(tensor, average, name, op, prescale_factor,
                         postscale_factor, process_set))


class _AllreduceFunction(torch.autograd.Function):
    """allreduce with a gradient: the all-reduce (same op) of the
    gradients."""

    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale):
        ctx.args = (op, name, prescale, postscale)
        return allreduce_(tensor.detach().clone(), None, name, op, prescale,
                          postscale)

    @staticmethod
    def backward(ctx, grad):
        op, name, prescale, postscale = ctx.args
        if op not in (Average, Sum):
            raise _error(
                "UNIMPLEMENTED",
                "allreduce: no gradient through op=%s (Average or Sum have "
                "one)" % op.name)
        return (allreduce_(grad.detach().clone(), None, name, op, prescale,
                           postscale), None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=None):
    """A new tensor: op over every worker's `tensor` (Average by default),
    sent through `compression`. Differentiable for Average and Sum."""
    what = "allreduce%s" % ("" if name is None else " '%s'" % name)
    op = _resolve_op(average, op, what)
    _check_process_set(process_set, what)
    compressed, ctx = compression.compress(tensor)
    if compressed.requires_grad:
        reduced = _AllreduceFunction.apply(compressed, op, name,
                                           prescale_factor, postscale_factor)
    else:
        reduced = allreduce_(compressed.detach().clone(), None, name, op,
                             prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None):
    """Starts in-place all-reduces of every tensor of `tensors`; one handle
    whose synchronize() returns the list."""
    handles = [
        allreduce_async_(t, average, name, op, prescale_factor,
                         postscale_factor, process_set) for t in tensors
    ]
    works = [w for h in handles for w in _handles[h].works]
    return _register(works, lambda: [synchronize(h) for h in handles])


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    return grouped_allreduce_async_([t.detach().clone() for t in tensors],
                                    average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return synchronize(
        grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                 postscale_factor, process_set))


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=None):
    """New tensors: each of `tensors` all-reduced (one handle for all)."""
    packed = [compression.compress(t) for t in tensors]
    reduced = grouped_allreduce_([c.detach().clone() for c, _ in packed],
                                 average, name, op, prescale_factor,
                                 postscale_factor, process_set)
    return [compression.decompress(r, ctx) for r, (_, ctx) in
            zip(reduced, packed)]


# --- allgather ------------------------------------------------------------------
def _gather_rows(tensor, what):
    """Every worker's `tensor` (dim 0 may differ), in rank order."""
    group = _group()
    n = starling.size()
    t = tensor.detach()
    if t.dim() == 0:
        raise ValueError("%s: a 0-dimensional tensor; give it a first "
                         "dimension (tensor.reshape(1))" % what)
    t = t.contiguous()
    rows = torch.tensor([t.shape[0]], dtype=torch.int64)
    all_rows = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    _wait(group.allgather([all_rows], [rows]))
    counts = [int(r.item()) for r in all_rows]
    most = max(counts)
    padded = t
    if t.shape[0] < most:
        padded = torch.cat(
            [t, t.new_zeros((most - t.shape[0],) + tuple(t.shape[1:]))])
    outputs = [torch.empty_like(padded) for _ in range(n)]
    _wait(group.allgather([outputs], [padded]))
    return [o[:c] for o, c in zip(outputs, counts)], counts


class _AllgatherFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, tensor, name):
        parts, counts = _gather_rows(tensor, "allgather")
        ctx.counts = counts
        ctx.name = name
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        summed = allreduce_(grad.detach().clone(), None, ctx.name, Sum)
        start = sum(ctx.counts[:starling.rank()])
        return summed[start:start + ctx.counts[starling.rank()]], None


def allgather(tensor, name=None, process_set=None):
    """Every worker's `tensor` concatenated along dim 0, in rank order (the
    other dimensions must agree; dim 0 may differ). Differentiable."""
    _check_process_set(process_set, "allgather")
    if tensor.requires_grad:
        return _AllgatherFunction.apply(tensor, name)
    parts, _ = _gather_rows(tensor, "allgather")
    return torch.cat(parts)


def allgather_async(tensor, name=None, process_set=None):
    """allgather, as a handle (it runs at once; synchronize() returns the
    result)."""
    result = allgather(tensor, name, process_set)
    return _register([], lambda: result)


def allgather_object(obj, name=None, process_set=None):
    """Every worker's `obj` (anything pickle takes), as a list in rank
    order."""
    _check_process_set(process_set, "allgather_object")
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    parts, _ = _gather_rows(data, "allgather_object")
    return [pickle.loads(p.numpy().tobytes()) for p in parts]


# --- broadcast ------------------------------------------------------------------
def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Starts replacing `tensor` by worker `root_rank`'s, in place."""
    _check_process_set(process_set, "broadcast")
    opts = dist.BroadcastOptions()
    opts.rootRank = int(root_rank)
    opts.rootTensor = 0
    with torch.no_grad():
        work = _group().broadcast([tensor], opts)
    return _register([work], lambda: tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.detach().clone(), root_rank, name,
                            process_set)


def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor: worker `root_rank`'s `tensor`."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensors, root_rank=0, name=None, process_set=None):
    """Horovod's broadcast_(tensor, root_rank): `tensor` becomes worker
    `root_rank`'s, in place, and is returned. Also takes Starling's list of
    (name, tensor) entries (starling.torch.functions.broadcast_), checked
    to be the same on every worker."""
    if torch.is_tensor(tensors):
        return synchronize(broadcast_async_(tensors, root_rank, name,
                                            process_set))
    _check_process_set(process_set, "broadcast_")
    from starling.torch import functions
    return functions.broadcast_(tensors, root_rank, name or "broadcast")


# --- reducescatter and alltoall ---------------------------------------------------
def _split_rows(rows, n):
    """Horovod's split of `rows` over n workers: the first rows % n get one
    more."""
    base, extra = divmod(rows, n)
    return [base + (1 if r < extra else 0) for r in range(n)]


def reducescatter(tensor, op=Average, name=None, process_set=None):
    """op over every worker's `tensor`, of which this worker keeps its part
    of dim 0 (split as evenly as possible, the first workers taking one row
    more)."""
    what = "reducescatter%s" % ("" if name is None else " '%s'" % name)
    op = _resolve_op(None, op, what)
    _check_process_set(process_set, what)
    n = starling.size()
    me = starling.rank()
    t = tensor.detach().contiguous()
    if t.dim() == 0:
        raise ValueError("%s: a 0-dimensional tensor has no rows to scatter"
                         % what)
    counts = _split_rows(t.shape[0], n)
    most = max(counts)
    rest = tuple(t.shape[1:])
    blocks = list(torch.split(t, counts))
    padded = torch.cat([
        torch.cat([b, b.new_zeros((most - b.shape[0],) + rest)])
        if b.shape[0] < most else b for b in blocks
    ])
    out = t.new_empty((most,) + rest)
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = op.torch_op
    _wait(_group()._reduce_scatter_base(out, padded, opts))
    out = out[:counts[me]].clone()
    if op is Average:
        _divide(out, n)
    return out


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Worker r sends rows splits[k] of `tensor` (dim 0, in order) to worker
    k; returns (the rows received, concatenated in rank order, and how many
    came from each worker). splits default to an equal split."""
    what = "alltoall%s" % ("" if name is None else " '%s'" % name)
    _check_process_set(process_set, what)
    n = starling.size()
    t = tensor.detach().contiguous()
    if splits is None:
        if t.shape[0] % n:
            raise ValueError("%s: %d rows do not split evenly over %d workers;"
                             " pass splits" % (what, t.shape[0], n))
        splits = [t.shape[0] // n] * n
    splits = [int(s) for s in (splits.tolist() if torch.is_tensor(splits)
                               else splits)]
    if len(splits) != n or sum(splits) != t.shape[0] or min(splits) < 0:
        raise ValueError("%s: splits %s must be %d counts >= 0 adding up to "
                         "the %d rows" % (what, splits, n, t.shape[0]))
    mine = torch.tensor(splits, dtype=torch.int64)
    every = [torch.zeros(n, dtype=torch.int64) for _ in range(n)]
    group = _group()
    _wait(group.allgather([every], [mine]))
    me = starling.rank()
    received = [int(every[k][me].item()) for k in range(n)]
    rest = tuple(t.shape[1:])
    out = t.new_empty((sum(received),) + rest)
    _wait(group.alltoall_base(out, t, received, splits,
                              dist.AllToAllOptions()))
    return out, torch.tensor(received, dtype=torch.int32)


# --- the rest -----------------------------------------------------------------
def join(device=-1):
    """A barrier at which every worker arrives once it has no more data;
    returns the rank that arrived last (by wall clock). Unlike Horovod's, a
    worker that joined does not take part in the collectives others still
    issue: the daemons fail those on every worker, naming both calls."""
    arrived = torch.tensor([time.time()], dtype=torch.float64)
    times = [torch.zeros(1, dtype=torch.float64)
             for _ in range(starling.size())]
    _wait(_group().allgather([times], [arrived]))
    return max(range(len(times)), key=lambda r: times[r].item())


def nccl_built():
    """False: Starling does not run NCCL; its daemons run the collectives."""
    return False


def mpi_built():
    """False: Starling does not use MPI."""
    return False


def gloo_built():
    """False: Starling does not use Gloo (torch.distributed's gloo backend
    is PyTorch's, not Starling's)."""
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True where PyTorch has CUDA: CUDA tensors are staged through host
    memory to the daemons."""
    return torch.cuda.is_available()


def rocm_built():
    return False


def mpi_enabled():
    return False


def gloo_enabled():
    return False


def mpi_threads_supported():
    """False: no MPI."""
    return False


def cross_rank():
    """The rank of this worker's daemon (Horovod: the node's index)."""
    return starling.node_rank()


def cross_size():
    """Daemons in the group (Horovod: the number of nodes)."""
    return starling.node_count()


def is_homogeneous():
    """True: every daemon has as many workers (Starling requires it)."""
    return True


def start_timeline(file_path, mark_cycles=False):
    raise _error(
        "UNIMPLEMENTED",
        "start_timeline: Starling has no Horovod timeline; its daemons "
        "export per-collective metrics to Prometheus (README 'Metrics') and "
        "starlingctl status shows the group")


def stop_timeline():
    start_timeline(None)
