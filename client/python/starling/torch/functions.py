"""Collectives on torch tensors: all-reduce and broadcasts.

Both go through the daemons' all-reduce, which sums float32. A broadcast
is an all-reduce in which the root contributes its values and every other
worker -0.0 (the identity of IEEE addition, also for +0.0, infinities and
NaN), so the root's float32 values arrive bit for bit. Tensors of any other
dtype (float16, bfloat16, float64, integers, bool) travel as their bytes,
16 bits per float32 element (integers below 2^16 add exactly), so they too
arrive bit for bit. Every worker must make the same calls in the same order.
"""

import hashlib
import pickle

import torch

import starling
from starling.torch import collectives

# Floats per all-reduce when a broadcast is cut into pieces (64 MiB).
_CHUNK_FLOATS = 16 << 20


def _session():
    return starling.session()


def _all_reduce(session, flat):
    """Sums the float32 pool tensor `flat` over every worker, in place."""
    collectives.drain()
    session.all_reduce_async(flat.data_ptr(), flat.numel()).wait()
    session.check_size()


def _scratch(session, floats):
    buffer = session.scratch(floats * 4)
    return torch.frombuffer(buffer, dtype=torch.float32, count=floats)


# --- broadcast ---------------------------------------------------------------
def _floats_of(tensor):
    """float32 elements `tensor` takes on the wire."""
    if tensor.dtype == torch.float32:
        return tensor.numel()
    return (tensor.numel() * tensor.element_size() + 1) // 2


def _pack(tensor, out):
    """Writes `tensor` into the float32 range `out`."""
    if tensor.dtype == torch.float32:
        out.copy_(tensor.detach().reshape(-1))
        return
    raw = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    if raw.numel() % 2:
        raw = torch.cat([raw, raw.new_zeros(1)])
    out.copy_(raw.view(torch.int16).to(torch.int32).bitwise_and(0xFFFF))


def _unpack(flat, tensor):
    """Copies the float32 range `flat` back into `tensor` (its dtype)."""
    with torch.no_grad():
        if tensor.dtype == torch.float32:
            tensor.copy_(flat.view(tensor.shape))
            return
        nbytes = tensor.numel() * tensor.element_size()
        raw = flat.to(torch.int32).to(torch.int16).view(torch.uint8)[:nbytes]
        tensor.copy_(raw.view(tensor.dtype).reshape(tensor.shape))


def _digest(entry):
    """Four 12-bit integers from (name, shape, dtype): exact in float32 sums
    of up to 4096 workers."""
    name, tensor = entry
    text = "%s|%s|%s" % (name, tuple(tensor.shape), tensor.dtype)
    h = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=6).digest(),
                       "little")
    return [float((h >> (12 * i)) & 0xFFF) for i in range(4)]


def _describe(tensor):
    return "shape %s, %s" % (list(tensor.shape),
                             str(tensor.dtype).replace("torch.", ""))


def check_same_entries(session, entries, root_rank, what):
    """Raises StarlingError naming the first entry (name, shape, dtype) that
    differs between root_rank and some worker. Three small all-reduces."""
    me = starling.rank()
    is_root = me == root_rank
    count = _scratch(session, 1)
    count.fill_(float(len(entries)) if is_root else 0.0)
    _all_reduce(session, count)
    root_count = int(count.item())
    digests = _scratch(session, 4 * root_count + 1)[:4 * root_count]
    if is_root:
        for i, entry in enumerate(entries):
            digests[4 * i:4 * i + 4] = torch.tensor(_digest(entry))
    else:
        digests.zero_()
    if root_count:
        _all_reduce(session, digests)
    root_digests = [digests[4 * i:4 * i + 4].tolist()
                    for i in range(root_count)]
    # flags[k]: workers whose entry k differs from root's; flags[-1]: workers
    # with another number of entries.
    flags = _scratch(session, root_count + 1)
    flags.zero_()
    for k in range(root_count):
        if k >= len(entries) or _digest(entries[k]) != root_digests[k]:
            flags[k] = 1.0
    if len(entries) != root_count:
        flags[root_count] = 1.0
    _all_reduce(session, flags)
    bad = [k for k in range(root_count + 1) if flags[k].item() > 0]
    if not bad:
        return
    k = bad[0]
    workers = int(flags[k].item())
    if k == root_count:
        raise starling._error(
            "INVALID_ARGUMENT",
            "%s: %d of %d workers hold another number of tensors than root "
            "rank %d (%d); this worker (rank %d) holds %d" %
            (what, workers, starling.size(), root_rank, root_count, me,
             len(entries)))
    if k < len(entries):
        what_k = "'%s' (tensor #%d)" % (entries[k][0], k)
        here = "%s, %s" % (entries[k][0], _describe(entries[k][1]))
    else:
        what_k, here = "tensor #%d" % k, "no tensor #%d" % k
    raise starling._error(
        "INVALID_ARGUMENT",
        "%s: %s differs across workers: %d of %d workers do not hold root "
        "rank %d's tensor #%d; this worker (rank %d) holds %s. Every worker "
        "must build the same model (names, shapes, dtypes)." %
        (what, what_k, workers, starling.size(), root_rank, k, me, here))


def broadcast_(tensors, root_rank=0, name="broadcast"):
    """Overwrites each tensor (in place) with root_rank's, bit for bit.

    tensors: a list of tensors or of (name, tensor) pairs, the same on
    every worker (names, shapes and dtypes are checked first: a difference
    raises StarlingError naming the tensor on every worker).
    """
    session = _session()
    entries = [t if isinstance(t, tuple) else ("#%d" % i, t)
               for i, t in enumerate(tensors)]
    if not 0 <= root_rank < starling.size():
        raise starling._error(
            "INVALID_ARGUMENT", "%s: root_rank %d is not a rank (0 .. %d)" %
            (name, root_rank, starling.size() - 1))
    check_same_entries(session, entries, root_rank, name)
    is_root = starling.rank() == root_rank
    # Pack entries into chunks of at most _CHUNK_FLOATS floats (an entry
    # larger than a chunk gets chunks of its own).
    pending = []
    used = 0

    def flush():
        nonlocal pending, used
        if not pending:
            return
        flat = _scratch(session, used)
        offset = 0
        for _, tensor, floats in pending:
            part = flat[offset:offset + floats]
            if is_root:
                _pack(tensor, part)
            else:
                part.fill_(-0.0)
            offset += floats
        _all_reduce(session, flat)
        if not is_root:
            offset = 0
            for _, tensor, floats in pending:
                _unpack(flat[offset:offset + floats], tensor)
                offset += floats
        pending, used = [], 0

    for entry_name, tensor in entries:
        floats = _floats_of(tensor)
        if floats > _CHUNK_FLOATS:
            flush()
            _broadcast_large(session, tensor, is_root)
            continue
        if used + floats > _CHUNK_FLOATS:
            flush()
        pending.append((entry_name, tensor, floats))
        used += floats
    flush()


def _broadcast_large(session, tensor, is_root):
    """A tensor above one chunk, as its bytes in chunks."""
    floats = _floats_of(tensor)
    whole = torch.empty(floats, dtype=torch.float32)
    if is_root:
        _pack(tensor, whole)
    for start in range(0, floats, _CHUNK_FLOATS):
        n = min(_CHUNK_FLOATS, floats - start)
        flat = _scratch(session, n)
        if is_root:
            flat.copy_(whole[start:start + n])
        else:
            flat.fill_(-0.0)
        _all_reduce(session, flat)
        whole[start:start + n] = flat
    if not is_root:
        _unpack(whole, tensor)


def broadcast_parameters(params, root_rank=0):
    """Every worker's parameters (and buffers) become root_rank's.

    params: model.state_dict(), model.named_parameters() or a list of
    (name, tensor) pairs. Tensors are overwritten in place, bit for bit;
    a model that differs across workers raises StarlingError naming the
    tensor.
    """
    if isinstance(params, dict):
        entries = sorted(params.items())
    else:
        entries = list(params)
        if entries and not isinstance(entries[0], tuple):
            entries = [("#%d" % i, t) for i, t in enumerate(entries)]
        entries = sorted(entries, key=lambda e: e[0])
    entries = [(n, t.data if isinstance(t, torch.nn.Parameter) else t)
               for n, t in entries if t is not None]
    broadcast_(entries, root_rank, name="broadcast_parameters")


def broadcast_object(obj, root_rank=0, name="broadcast_object"):
    """root_rank's picklable `obj`, on every worker."""
    session = _session()
    is_root = starling.rank() == root_rank
    payload = pickle.dumps(obj) if is_root else b""
    size = _scratch(session, 2)
    size[0] = float(len(payload) & 0xFFFFFF) if is_root else 0.0
    size[1] = float(len(payload) >> 24) if is_root else 0.0
    _all_reduce(session, size)
    nbytes = int(size[0].item()) + (int(size[1].item()) << 24)
    data = torch.zeros(nbytes, dtype=torch.uint8)
    if is_root and nbytes:
        data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    if nbytes:
        broadcast_([("object", data)], root_rank, name=name)
    return obj if is_root else pickle.loads(data.numpy().tobytes())


def broadcast_optimizer_state(optimizer, root_rank=0):
    """The optimizer's state and hyper-parameters become root_rank's.

    Tensors of the state (momentum buffers, Adam moments) are broadcast in
    place; a worker whose state is still empty (no step taken) gets root's
    structure first. Hyper-parameters (lr, momentum, ...) follow root's.
    """
    state_dict = optimizer.state_dict()
    # Structure and scalars from root (tensors replaced by their shape and
    # dtype), then every tensor in place.
    skeleton = {
        "param_groups": state_dict["param_groups"],
        "state": {
            k: {n: (("tensor", tuple(v.shape), str(v.dtype))
                    if torch.is_tensor(v) else v)
                for n, v in s.items()}
            for k, s in state_dict["state"].items()
        },
    }
    root = broadcast_object(skeleton, root_rank,
                            name="broadcast_optimizer_state")
    if starling.rank() != root_rank:
        new_state = {}
        for k, s in root["state"].items():
            entry = {}
            for n, v in s.items():
                if isinstance(v, tuple) and len(v) == 3 and v[0] == "tensor":
                    mine = state_dict["state"].get(k, {}).get(n)
                    dtype = getattr(torch, v[2].replace("torch.", ""))
                    if (torch.is_tensor(mine) and tuple(mine.shape) == v[1]
                            and mine.dtype == dtype):
                        entry[n] = mine
                    else:
                        entry[n] = torch.zeros(v[1], dtype=dtype)
                else:
                    entry[n] = v
            new_state[k] = entry
        optimizer.load_state_dict({
            "param_groups": root["param_groups"],
            "state": new_state
        })
        state_dict = optimizer.state_dict()
    tensors = []
    for k in sorted(state_dict["state"].keys()):
        for n in sorted(state_dict["state"][k].keys()):
            v = state_dict["state"][k][n]
            if torch.is_tensor(v):
                tensors.append(("state.%s.%s" % (k, n), v))
    if tensors:
        broadcast_(tensors, root_rank, name="broadcast_optimizer_state")


def allreduce_(tensor, average=True, name="allreduce"):
    """Sums (or averages) a float tensor over every worker, in place."""
    session = _session()
    if not tensor.is_floating_point():
        raise starling._error(
            "INVALID_ARGUMENT",
            "%s: a %s tensor; all-reduce sums floating-point tensors" %
            (name, str(tensor.dtype).replace("torch.", "")))
    flat = _scratch(session, max(tensor.numel(), 1))[:tensor.numel()]
    with torch.no_grad():
        flat.copy_(tensor.reshape(-1))
        if tensor.numel():
            _all_reduce(session, flat)
        if average:
            flat.div_(starling.size())
        tensor.copy_(flat.view(tensor.shape))
    return tensor


def allreduce(tensor, average=True, name="allreduce"):
    """A new tensor: the sum (or mean) of `tensor` over every worker."""
    return allreduce_(tensor.detach().clone(), average, name)
