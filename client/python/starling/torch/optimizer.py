"""DistributedOptimizer: a torch optimizer whose gradients cross Starling.

Two placements of the optimizer, chosen by the job (starling-coordinator
--optimizer, starling-run --optimizer):

* Worker-side (`none`, the default). Gradients are averaged over every
  worker by the daemons' all-reduce, bucket by bucket as autograd
  produces them, and the wrapped optimizer runs in each worker on the
  averaged gradients: every worker applies the same update.
* Daemon-side (`sgd`, `momentum`, `adam`). The daemons own the optimizer
  (DESIGN.md's sharded update: each holds 1/N of its state). Gradients are
  pushed bucket by bucket; step() pulls the updated parameters. The
  wrapped optimizer must be the same update (checked) and is not stepped.

Staleness s (`--mode async_sgd --staleness s`, or the `staleness`
argument in worker-side placement): step t applies the gradients of step
t - s, so communication overlaps s steps of compute; no worker is ever
more than s steps ahead of the slowest. Worker-side, every worker applies
the same delayed mean gradient (the parameters stay identical);
daemon-side, the daemons' stale synchronous parallel bound holds (a pull
for step t includes every update before t - s).

Memory: CPU float32 parameters (and, daemon-side, float16 and bfloat16
ones) have their gradients, and daemon-side their values, placed in the
client's shared-memory pool (param.data and param.grad become views of it),
so the daemon reads and writes them with no copy. Other tensors (CUDA,
non-contiguous, 16-bit ones worker-side) are staged through pool memory.
"""

import os
import sys
import time

import torch

import starling
from starling.torch import collectives, functions
from starling.torch.pool import (DTYPES, PoolBlock, check_dtype, dtype_name,
                                 tensor_arg)

# The daemon-side optimizers and the torch hyper-parameters they equal
# (the daemons' own, from the C++ module).
_DAEMON_OPTIMIZERS = tuple(starling._starling.DAEMON_OPTIMIZERS)

# The codes of an op cut short by a lost daemon's group re-forming ("run R
# stopped at step S: ...; reconnect to resume"): step() rejoins.
_REJOIN_CODES = ("ABORTED", "UNAVAILABLE")
# The modes whose runs go on in a re-formed group with the daemons owning
# the optimizer: the synchronous step (from the last committed step) and
# the parameter server (each shard as its owner or its buddy held it).
_REJOIN_MODES = ("sync_sgd", "parameter_server")
# Worker-side placement (--optimizer none) in these modes: the daemons hold
# no state (their runs go on whoever was lost); the workers agree on the
# newest update any of them applied and take that worker's parameters and
# optimizer state.
_WORKER_SIDE_REJOIN_MODES = ("sync_sgd", "async_sgd")


def _force_staging():
    return os.environ.get("STARLING_TORCH_STAGE", "") not in ("", "0")


class _Slot:
    """One parameter: where its gradient (and value) live in the pool."""

    def __init__(self, index, name, param):
        self.index = index
        self.name = name
        self.param = param
        self.bucket = None
        self.hook_calls = 0  # backward passes seen this step
        self.ready = False  # gradient handed over for this step
        self.grad = []  # per gradient set: the pool tensor
        self.value = None  # daemon-side: the pool tensor of the parameter
        self.zero_copy = False


class _Bucket:

    def __init__(self, index, slots):
        self.index = index
        self.slots = slots
        self.pending = len(slots)
        self.blocks = []  # per gradient set (worker-side): PoolBlock
        # per gradient set, with Compression.fp16: the float16 PoolBlock
        # that crosses instead of `blocks`
        self.halves = []
        self.grad_args = []  # per gradient set (daemon-side): push tuples


class _DistributedBase:
    """Mixed in before the wrapped optimizer's class (see
    DistributedOptimizer)."""

    # --- set-up -----------------------------------------------------------
    def _starling_setup(self, named_parameters, staleness,
                        backward_passes_per_step, bucket_bytes, on_regroup,
                        rejoins, compress16=False):
        self._session = starling.session()
        # Compression.fp16 (worker-side): each bucket crosses as float16.
        self._compress16 = compress16
        self._summed = False  # op=Sum: the gradients are not averaged
        self._predivide = 1.0  # gradient_predivide_factor
        self._skip_synchronize = False
        self._reduced = None  # the step synchronize() reduced into .grad
        self._on_regroup = on_regroup
        self._rejoins = max(0, int(rejoins))
        client = self._session.client
        job = client.job()
        self._job = job
        self._daemon_side = job["optimizer"] in _DAEMON_OPTIMIZERS
        if job["optimizer"] not in _DAEMON_OPTIMIZERS + ("none",):
            raise starling._error(
                "FAILED_PRECONDITION",
                "DistributedOptimizer: the job's optimizer is '%s' (mode %s);"
                " PyTorch workers run with --optimizer none (the workers "
                "step) or sgd, momentum, adam (the daemons step)" %
                (job["optimizer"], job["mode"]))
        if job["mode"] not in ("sync_sgd", "async_sgd", "parameter_server"):
            raise starling._error(
                "FAILED_PRECONDITION",
                "DistributedOptimizer: the job's mode is '%s'; PyTorch "
                "workers train in sync_sgd, async_sgd or parameter_server" %
                job["mode"])
        if compress16 and self._daemon_side:
            raise starling._error(
                "INVALID_ARGUMENT",
                "DistributedOptimizer: compression=Compression.fp16 needs "
                "worker-side placement (--optimizer none); the daemons own "
                "the optimizer here (--optimizer %s) and take the gradients "
                "in the parameters' type (a float16 model's cross in 16 "
                "bits)" % job["optimizer"])
        if job["mode"] == "parameter_server" and not self._daemon_side:
            raise starling._error(
                "FAILED_PRECONDITION",
                "DistributedOptimizer: parameter_server mode applies "
                "gradients on the daemons: start the job with --optimizer "
                "sgd, momentum or adam")
        if staleness is None:
            staleness = job["staleness"] if job["mode"] == "async_sgd" else 0
        if staleness < 0:
            raise starling._error("INVALID_ARGUMENT",
                                  "DistributedOptimizer: staleness %d < 0" %
                                  staleness)
        if self._daemon_side and staleness != job["staleness"]:
            raise starling._error(
                "INVALID_ARGUMENT",
                "DistributedOptimizer: staleness=%d, but the daemons own the "
                "optimizer and enforce the job's bound (%d, starling-run "
                "--staleness)" % (staleness, job["staleness"]))
        if backward_passes_per_step < 1:
            raise starling._error(
                "INVALID_ARGUMENT",
                "DistributedOptimizer: backward_passes_per_step must be >= 1")
        self._staleness = staleness
        self._passes = backward_passes_per_step
        # Gradient sets: a step's gradients stay in theirs until the daemons
        # read them, while the following steps' backward fill the others.
        if not self._daemon_side:
            self._sets = staleness + 1
        elif job["mode"] == "sync_sgd":
            self._sets = 1  # step() pulls t + 1: every push was read
        else:
            self._sets = max(2, job["staleness"] + 1)
        if bucket_bytes is None:
            bucket_bytes = starling._env_int("STARLING_BUCKET_BYTES", 256 << 10)
        self._bucket_bytes = bucket_bytes
        self._slots = self._collect(named_parameters)
        if self._daemon_side:
            self._check_daemon_optimizer()
        self._world = starling.size()
        self._step_index = 0
        # Worker-side: updates applied (inner steps), step() calls, and
        # gradients dropped by re-formations; the first step whose gradient
        # a (re-started) pipeline applies.
        self._applied = 0
        self._computed = 0
        self._dropped = 0
        self._pipeline_start = 0
        self._futures = {}  # step -> futures of its pushes / all-reduces
        self._next_bucket = 0
        self._last_step_end = time.monotonic()
        self._declare()
        self._place()
        self._hooks = []
        with torch.enable_grad():
            for slot in self._slots:
                self._hooks.append(self._register_hook(slot))

    def _collect(self, named_parameters):
        in_optimizer = [p for g in self.param_groups for p in g["params"]]
        ids = {id(p) for p in in_optimizer}
        if named_parameters is not None:
            named = list(named_parameters)
            names = [n for n, _ in named]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise starling._error(
                    "INVALID_ARGUMENT",
                    "DistributedOptimizer: parameter names %s appear more "
                    "than once in named_parameters" % duplicates)
            by_id = {id(p): n for n, p in named}
            missing = [i for i, p in enumerate(in_optimizer)
                       if id(p) not in by_id]
            if missing:
                raise starling._error(
                    "INVALID_ARGUMENT",
                    "DistributedOptimizer: %d of the optimizer's parameters "
                    "are not in named_parameters (pass "
                    "model.named_parameters() of the model the optimizer "
                    "was built for)" % len(missing))
            named = [(n, p) for n, p in named if id(p) in ids]
        else:
            named = [("param.%d" % i, p) for i, p in enumerate(in_optimizer)]
        slots = []
        for name, param in named:
            if not param.requires_grad:
                continue
            check_dtype(name, param)
            slots.append(_Slot(len(slots), name, param))
        return slots

    def _check_daemon_optimizer(self):
        """The wrapped optimizer must be the daemons' update."""
        job = self._job
        want = job["optimizer"]
        lr = job["learning_rate"]
        base = type(self).__mro__[2]
        problems = []
        if want in ("sgd", "momentum"):
            if not issubclass(base, torch.optim.SGD):
                problems.append("it is %s, not torch.optim.SGD" %
                                base.__name__)
            wanted_momentum = starling._starling.DAEMON_OPTIMIZERS[want][
                "momentum"]
            for g in self.param_groups:
                momentum = g.get("momentum", 0.0)
                if momentum != wanted_momentum:
                    problems.append("momentum %g, the daemons' %s uses %g" %
                                    (momentum, want, wanted_momentum))
                if (g.get("weight_decay") or g.get("nesterov") or
                        g.get("dampening")):
                    problems.append("weight_decay/nesterov/dampening are "
                                    "not applied by the daemons")
        elif want == "adam":
            if not issubclass(base, torch.optim.Adam):
                problems.append("it is %s, not torch.optim.Adam" %
                                base.__name__)
            betas = starling._starling.DAEMON_OPTIMIZERS["adam"]["betas"]
            for g in self.param_groups:
                if tuple(g.get("betas", ())) != betas:
                    problems.append("betas %s, the daemons use %s" %
                                    (g.get("betas"), betas))
        for g in self.param_groups:
            g_lr = g.get("lr")
            if g_lr is None or abs(g_lr - lr) > 1e-6 * max(1.0, abs(lr)):
                problems.append("lr %s, the daemons use %g (starling-run "
                                "--learning_rate)" % (g_lr, lr))
        if problems:
            raise starling._error(
                "INVALID_ARGUMENT",
                "DistributedOptimizer: the daemons apply '%s' (the job's "
                "--optimizer) but the wrapped optimizer differs: %s. Make "
                "them agree, or run the job with --optimizer none to step "
                "the wrapped optimizer in the workers." %
                (want, "; ".join(sorted(set(problems)))))

    def _declare(self):
        session = self._session
        # Every worker must hand over the same parameters: checked first
        # through the all-reduce, so that a model that differs fails on
        # every worker, naming the parameter (the daemons' declaration check
        # would stop only the workers that declared last). Before any run,
        # that takes a run of its own, with no tensors: not possible when
        # the job fixes the parameter count; the daemons' checks remain.
        if session.running or not self._job["parameter_count"]:
            functions.check_same_entries(
                session, [(s.name, s.param) for s in self._slots], 0,
                "DistributedOptimizer")
        session.begin_declarations()
        for slot in self._slots:
            session.declare_tensor(slot.name, list(slot.param.shape),
                                   dtype_name(slot.param.dtype))

    def _place(self):
        """Buckets (last parameter first, as backward produces them) and the
        pool memory of gradients and, daemon-side, parameters."""
        session = self._session
        element = lambda s: (4 if not self._daemon_side else
                             DTYPES[s.param.dtype][1])
        buckets, current, current_bytes = [], [], 0
        for slot in reversed(self._slots):
            nbytes = slot.param.numel() * element(slot)
            if current and current_bytes + nbytes > self._bucket_bytes > 0:
                buckets.append(current)
                current, current_bytes = [], 0
            current.append(slot)
            current_bytes += nbytes
        if current:
            buckets.append(current)
        self._buckets = [_Bucket(i, s) for i, s in enumerate(buckets)]
        for bucket in self._buckets:
            for slot in bucket.slots:
                slot.bucket = bucket
                p = slot.param
                # STARLING_TORCH_STAGE=1 stages every tensor (the path CUDA
                # tensors take), to test it on a CPU-only machine.
                slot.zero_copy = (not _force_staging() and
                                  p.device.type == "cpu" and
                                  p.is_contiguous() and
                                  (self._daemon_side or
                                   p.dtype == torch.float32))
        if self._daemon_side:
            self._place_daemon_side()
            # The client's (name, address, bytes, element bytes) tuples of
            # each bucket's gradients per set, and of the parameters.
            for bucket in self._buckets:
                bucket.grad_args = [
                    [tensor_arg(s.name, s.grad[i]) for s in bucket.slots]
                    for i in range(self._sets)
                ]
            self._value_args = [tensor_arg(s.name, s.value)
                                for s in self._slots]
        else:
            for bucket in self._buckets:
                for _ in range(self._sets):
                    block = PoolBlock(session,
                                      [tuple(s.param.shape)
                                       for s in bucket.slots], torch.float32)
                    bucket.blocks.append(block)
                    for slot, view in zip(bucket.slots, block.tensors):
                        slot.grad.append(view)
                    if self._compress16:
                        bucket.halves.append(
                            PoolBlock(session, [(block.elements,)],
                                      torch.float16))
        self._attach_grads(0)

    def _place_daemon_side(self):
        session = self._session
        for slot in self._slots:
            p = slot.param
            shape = tuple(p.shape)
            block = PoolBlock(session, [shape] * (1 + self._sets), p.dtype)
            slot.value = block.tensors[0]
            slot.grad = block.tensors[1:]
            with torch.no_grad():
                slot.value.copy_(p.detach())
            if slot.zero_copy:
                p.data = slot.value  # the parameter lives in the pool
        # Every worker offers its parameters; the daemons take the first
        # offer (rank 0, worker 0), as Horovod's broadcast_parameters does,
        # and every worker pulls version 0.
        session.client.offer_initial_parameters(
            [tensor_arg(s.name, s.value) for s in self._slots])
        session.data_op()
        session.client.pull_parameters(
            0, [tensor_arg(s.name, s.value) for s in self._slots])
        self._copy_values_out()

    def _copy_values_out(self):
        with torch.no_grad():
            for slot in self._slots:
                if not slot.zero_copy:
                    slot.param.copy_(slot.value)

    def _attach_grads(self, which):
        """Points zero-copy parameters' .grad at gradient set `which` so
        that backward accumulates straight into the pool. With several sets
        the one coming back holds an old step's gradients: zeroed. With one
        set, .grad keeps what step() left (as in plain PyTorch, the loop's
        zero_grad() clears it)."""
        with torch.no_grad():
            for slot in self._slots:
                view = slot.grad[which % self._sets]
                if self._sets > 1 or which == 0:
                    view.zero_()
                if slot.zero_copy and slot.param.grad is not view:
                    slot.param.grad = view

    def _register_hook(self, slot):
        # The AccumulateGrad node of the parameter: its hook runs once the
        # gradient was added to param.grad.
        accumulate = slot.param.expand_as(slot.param).grad_fn.next_functions[
            0][0]

        def hook(*unused):
            self._gradient_ready(slot)

        accumulate.register_hook(hook)
        return accumulate

    # --- a step -------------------------------------------------------------
    def _current(self, slot):
        return slot.grad[self._step_index % self._sets]

    def _hand_over(self, slot):
        """This step's gradient of `slot` into its pool slot."""
        view = self._current(slot)
        grad = slot.param.grad
        with torch.no_grad():
            if grad is None:
                view.zero_()
            elif grad.data_ptr() != view.data_ptr():
                view.copy_(grad.detach().reshape(view.shape))
        slot.ready = True
        slot.bucket.pending -= 1
        self._issue_buckets()

    def _gradient_ready(self, slot):
        if slot.ready:
            return
        slot.hook_calls += 1
        if slot.hook_calls >= self._passes:
            self._session.data_op()
            self._hand_over(slot)

    def _issue_buckets(self):
        """Sends the buckets whose gradients are all in, in bucket order
        (every worker issues the same all-reduces in the same order; one
        call per bucket): an all-reduce of the bucket's block worker-side,
        a push of its tensors daemon-side."""
        which = self._step_index % self._sets
        if self._next_bucket == 0:
            collectives.drain()  # this module's async ops go first
        while (self._next_bucket < len(self._buckets) and
               self._buckets[self._next_bucket].pending == 0):
            bucket = self._buckets[self._next_bucket]
            if self._daemon_side:
                future = self._session.client.push_gradients_part_async(
                    self._step_index, bucket.grad_args[which])
            else:
                block = bucket.blocks[which]
                if self._predivide != 1.0:
                    with torch.no_grad():
                        block.flat.div_(self._predivide)
                if self._compress16:
                    # Horovod's Compression.fp16: the bucket crosses and is
                    # summed as float16 (half the bytes), and comes back
                    # into float32 in _reduce_into_grads.
                    half = bucket.halves[which]
                    with torch.no_grad():
                        half.tensors[0].copy_(block.flat)
                    future = self._session.all_reduce_async(
                        half.address, block.elements, "float16")
                else:
                    future = self._session.all_reduce_async(
                        block.address, block.elements)
            self._futures.setdefault(self._step_index, []).append(future)
            self._next_bucket += 1

    def _hand_over_rest(self):
        """Hands over the gradients backward did not produce (zeros, or
        param.grad as it is) so that every bucket of this step is sent."""
        self._session.data_op()
        for slot in self._slots:
            if not slot.ready:
                self._hand_over(slot)

    def synchronize(self):
        """Sends every gradient of this step (those backward did not produce
        as zeros) and, where the workers step synchronously (--optimizer
        none, staleness 0), waits for their average and puts it in each
        parameter's .grad, so that it can be clipped or inspected before
        step() (then call step() inside skip_synchronize(), as with
        Horovod)."""
        self._hand_over_rest()
        if (not self._daemon_side and self._staleness == 0 and
                self._step_index >= self._pipeline_start):
            self._reduce_into_grads(self._step_index)
            self._reduced = self._step_index

    def skip_synchronize(self):
        """A context manager in which step() does not synchronize again:
        for a step() after an explicit synchronize()."""
        optimizer = self

        class _Skip:

            def __enter__(self):
                optimizer._skip_synchronize = True

            def __exit__(self, *unused):
                optimizer._skip_synchronize = False

        return _Skip()

    def _wait(self, step):
        for future in self._futures.pop(step, []):
            future.wait(self._session.timeout)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        compute_end = time.monotonic()
        if not self._skip_synchronize:
            self._hand_over_rest()
        t = self._step_index
        self._computed += 1
        if self._daemon_side:
            self._daemon_step_going_on(t)
        else:
            # After a re-formation the group may go on at another step.
            t = self._worker_step_going_on(t, super().step)
        for slot in self._slots:
            slot.ready = False
            slot.hook_calls = 0
        for bucket in self._buckets:
            bucket.pending = len(bucket.slots)
        self._next_bucket = 0
        self._step_index = t + 1
        # The next step's gradient set must no longer be read by the daemon.
        if self._step_index - self._sets in self._futures:
            self._wait(self._step_index - self._sets)
        self._attach_grads(self._step_index)
        end = time.monotonic()
        self._session.client.report_step_times(
            compute_end - self._last_step_end, end - self._last_step_end)
        self._last_step_end = end
        return loss

    def _reduce_into_grads(self, applied):
        """Waits for step `applied`'s all-reduces and puts the average (or
        sum) into each parameter's .grad."""
        self._wait(applied)
        which = applied % self._sets
        with torch.no_grad():
            if self._compress16:
                for bucket in self._buckets:
                    bucket.blocks[which].flat.copy_(
                        bucket.halves[which].tensors[0])
            if not self._summed:
                for bucket in self._buckets:
                    bucket.blocks[which].flat.div_(
                        float(self._world) / self._predivide)
            for slot in self._slots:
                view = slot.grad[which]
                if slot.zero_copy:
                    slot.param.grad = view
                elif slot.param.grad is None:
                    slot.param.grad = view.to(slot.param.device,
                                              slot.param.dtype).clone()
                else:
                    slot.param.grad.copy_(view.reshape(slot.param.grad.shape))

    def _worker_step(self, t, inner_step):
        applied = t - self._staleness
        if applied < self._pipeline_start:
            return  # the pipeline fills: nothing reduced yet
        if self._reduced != applied:
            self._reduce_into_grads(applied)
        self._reduced = None
        inner_step()
        self._applied += 1

    def _worker_step_going_on(self, t, inner_step):
        """_worker_step(t); where a daemon of the group was lost and the run
        went on without it, rejoins the re-formed group, where every worker
        takes the parameters and optimizer state of one that applied the
        newest update. Returns the step this step() ends as (t, or the
        group's step when it went on at another one)."""
        try:
            self._worker_step(t, inner_step)
            return t
        except starling.StarlingError as error:
            if (self._rejoins == 0 or
                    self._job["mode"] not in _WORKER_SIDE_REJOIN_MODES or
                    getattr(error, "code", "") not in _REJOIN_CODES):
                raise
            return self._rejoin_worker_side(t, error)

    def _rejoin_worker_side(self, t, error):
        client = self._session.client
        for attempt in range(self._rejoins):
            try:
                going_on = client.rejoin()
            except starling.StarlingError as rejoin_error:
                raise rejoin_error from error
            self._futures.clear()
            try:
                return self._resynchronize(t, going_on, error)
            except starling.StarlingError as again:
                # The group re-formed again meanwhile: once more.
                if (attempt + 1 == self._rejoins or
                        getattr(again, "code", "") not in _REJOIN_CODES):
                    raise again from error
                error = again
        raise error

    def _resynchronize(self, t, going_on, error):
        """The first collectives of every worker in the re-formed group: the
        updates each applied and the step each is at (one all-reduce), then
        the parameters and optimizer state of the lowest rank that applied
        the most, broadcast bit for bit. The gradients no worker applied
        (the step in flight; with staleness s, the pipeline's s + 1) are
        dropped: counted, logged and passed to on_regroup."""
        world = starling.size()
        me = starling.rank()
        session = self._session
        counts = functions._scratch(session, 2 * world)
        counts.zero_()
        counts[me] = float(self._applied)
        counts[world + me] = float(t)
        functions._all_reduce(session, counts)
        applied = [int(v) for v in counts[:world].tolist()]
        newest = max(applied)
        source = applied.index(newest)
        behind = max(int(v) for v in counts[world:].tolist())
        functions.broadcast_parameters(
            [(slot.name, slot.param) for slot in self._slots], source)
        functions.broadcast_optimizer_state(self, source)
        dropped = max(0, self._computed - newest - self._dropped)
        self._dropped += dropped
        self._applied = newest
        if self._staleness == 0:
            going = newest  # step index = updates applied
        else:
            # The pipeline starts again: s steps fill it.
            going = behind + 1
            self._pipeline_start = going
        self._world = world
        print("starling.torch: %s; rejoined run %d at step %d as worker %d "
              "of %d (%d daemons); parameters and optimizer state from "
              "worker %d (%d updates applied); %d gradient step(s) of this "
              "worker dropped" %
              (error, going_on["run_id"], going, me, world,
               starling.node_count(), source, newest, dropped),
              file=sys.stderr, flush=True)
        if self._on_regroup is not None:
            self._on_regroup(Regrouped(going_on["run_id"], going, me, world,
                                       dropped))
        return going - 1  # step() goes on with step `going` next

    def _daemon_step(self, t):
        client = self._session.client
        values = self._value_args
        # Sync: waits for update t + 1, which read every push of step t.
        # async_sgd: waits until the parameters include every update before
        # t + 1 - staleness. parameter_server: the owners' current values.
        client.pull_parameters(t + 1, values)
        if self._job["mode"] == "sync_sgd":
            # Step t is done once its pushes were answered: the daemons
            # answer them once every shard of it is on two daemons, so a
            # step whose step() returned is never rolled back when a
            # daemon is lost (the parameters are published before that).
            self._wait(t)
        self._copy_values_out()

    def _daemon_step_going_on(self, t):
        """_daemon_step(t); where a daemon of the group was lost and the
        run goes on in the re-formed group (sync_sgd or parameter_server,
        with the daemons' replicas), rejoins it and completes step t
        there."""
        for attempt in range(self._rejoins + 1):
            try:
                self._daemon_step(t)
                return
            except starling.StarlingError as error:
                if (attempt == self._rejoins or
                        self._job["mode"] not in _REJOIN_MODES or
                        getattr(error, "code", "") not in _REJOIN_CODES):
                    raise
                self._rejoin(t, error)

    def _rejoin(self, t, error):
        client = self._session.client
        try:
            going_on = client.rejoin()
        except starling.StarlingError as rejoin_error:
            raise rejoin_error from error
        self._futures.clear()
        v = going_on["next_step"]
        # Step t - 1's pushes were answered before its step() returned:
        # the run goes on at t (step t rolled back) or t + 1 (it was
        # committed), never before. (parameter_server: this worker's own
        # next step, t or t + 1 as its push of t was sent or not; nothing
        # is rolled back.)
        if v not in (t, t + 1):
            raise starling._error(
                "INTERNAL",
                "starling.torch: run %d went on at step %d, but this worker "
                "is at step %d (%s)" % (going_on["run_id"], v, t, error))
        self._world = starling.size()
        print("starling.torch: %s; rejoined run %d at step %d as worker %d "
              "of %d (%d daemons); %d pushed step(s) rolled back" %
              (error, going_on["run_id"], v, starling.rank(), self._world,
               starling.node_count(), going_on["rolled_back"]),
              file=sys.stderr, flush=True)
        if v == t:
            # Step t is pushed again: its gradients are still in the pool.
            which = t % self._sets
            for bucket in self._buckets:
                self._futures.setdefault(t, []).append(
                    client.push_gradients_part_async(t,
                                                     bucket.grad_args[which]))
        if self._on_regroup is not None:
            self._on_regroup(Regrouped(going_on["run_id"], v, starling.rank(),
                                       self._world, going_on["rolled_back"]))

    def finish(self):
        """Waits for every outstanding push or all-reduce of this worker."""
        for step in sorted(self._futures):
            self._wait(step)

    @property
    def placement(self):
        """'worker' (the wrapped optimizer steps here) or 'daemon'."""
        return "daemon" if self._daemon_side else "worker"

    @property
    def staleness(self):
        return self._staleness

    @property
    def next_step(self):
        """The index of the next step(): the steps this worker took, or,
        once a lost daemon's group re-formed, the step the group goes on at
        (Regrouped.step). Worker-side the workers may have been one step
        apart when the daemon was lost (a step another worker applied
        counts as taken; one no worker applied is dropped), so a loop that
        must end on the same step everywhere follows this, not a count of
        its own step() calls: `while opt.next_step < total_steps:`."""
        return self._step_index


class Regrouped:
    """What DistributedOptimizer's on_regroup callback is told after a lost
    daemon's group re-formed and the run went on: the run, the step it went
    on from, this worker's rank() and the job's size() now, and how many
    steps this worker had pushed that were rolled back (daemon-side: pushed
    again, and this step() completed there; worker-side: dropped, and the
    next step() is `step`, which DistributedOptimizer.next_step gives)."""

    def __init__(self, run_id, step, rank, size, rolled_back):
        self.run_id = run_id
        self.step = step
        self.rank = rank
        self.size = size
        self.rolled_back = rolled_back

    def __repr__(self):
        return ("Regrouped(run_id=%d, step=%d, rank=%d, size=%d, "
                "rolled_back=%d)" % (self.run_id, self.step, self.rank,
                                     self.size, self.rolled_back))


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None,
                         gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False, process_set=None,
                         *, staleness=None, bucket_bytes=None,
                         on_regroup=None, rejoins=3):
    """Wraps `optimizer` so that step() applies gradients averaged over
    every worker of the job (see the module's documentation). Takes
    Horovod's arguments in Horovod's order.

    named_parameters: model.named_parameters(); names appear in errors
        (a model that differs across workers is named by parameter). Every
        worker must pass the same parameters in the same order.
    compression: Compression.none (the default) or Compression.fp16:
        worker-side placement (--optimizer none), each bucket of gradients
        is converted to float16, summed as float16 by the daemons (half
        the bytes) and converted back, as Horovod does (gradients beyond
        float16's range, 65504, overflow: scale the loss down then).
        Daemon-side, the gradients cross in the parameters' type and
        fp16 raises.
    backward_passes_per_step: backward passes accumulated before a step's
        gradients leave (gradient accumulation).
    op: Average (the default) or Sum (worker-side placement: the summed
        gradients are applied); Adasum, Min, Max and Product raise.
    gradient_predivide_factor: f scales the gradients by 1/f before the
        sum and by f/size() after it (Horovod's split of the average);
        with op=Average only.
    num_groups, groups: Horovod's grouping of all-reduces; Starling groups
        gradients into buckets of bucket_bytes, so these are accepted and
        have no effect. sparse_as_dense: accepted (gradients are dense).
    process_set: the global set only.
    staleness: worker-side placement only; default the job's (--mode
        async_sgd --staleness s), else 0 (synchronous).
    bucket_bytes: gradient bucket size (default $STARLING_BUCKET_BYTES or
        256 KiB).
    on_regroup: called with a Regrouped after a daemon of the group was
        lost and the run went on without it (daemon-side placement in
        sync_sgd and parameter_server, the daemons keeping buddy replicas
        of their state; worker-side placement in sync_sgd and async_sgd,
        every worker then holding the parameters and optimizer state of
        the one that applied the newest update): rank() and size() are the
        new group's, so a data sampler sharded by them, or a learning rate
        scaled with size(), is the caller's to adjust. step() has completed
        meanwhile; nothing else changes.
    rejoins: how many such re-formations one step() goes through before it
        raises (0: raise at the first).

    The returned object is an instance of the wrapped optimizer's class and
    shares its parameter groups and state. Call starling.init() first.
    """
    from starling.torch import collectives
    collectives._check_process_set(process_set, "DistributedOptimizer")
    op = collectives._resolve_op(None, op, "DistributedOptimizer")
    if op not in (collectives.Average, collectives.Sum):
        raise starling._error(
            "INVALID_ARGUMENT",
            "DistributedOptimizer: op=%s; gradients are averaged (Average, "
            "the default) or summed (Sum)" % op.name)
    if gradient_predivide_factor != 1.0 and op is not collectives.Average:
        raise starling._error(
            "INVALID_ARGUMENT",
            "DistributedOptimizer: gradient_predivide_factor goes with "
            "op=Average only")
    if not gradient_predivide_factor > 0:
        raise starling._error(
            "INVALID_ARGUMENT",
            "DistributedOptimizer: gradient_predivide_factor %r must be > 0" %
            (gradient_predivide_factor,))
    compress16 = False
    if compression is not None and compression not in (
            collectives.Compression.none, collectives.NoneCompressor):
        if compression not in (collectives.Compression.fp16,
                               collectives.FP16Compressor):
            raise starling._error(
                "INVALID_ARGUMENT",
                "DistributedOptimizer: compression=%s; Starling offers "
                "Compression.none and Compression.fp16" %
                getattr(compression, "__name__", compression))
        compress16 = True
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedBase, base), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._starling_setup(named_parameters, staleness,
                            backward_passes_per_step, bucket_bytes, on_regroup,
                            rejoins, compress16)
    if wrapped._daemon_side and (op is not collectives.Average or
                                 gradient_predivide_factor != 1.0):
        raise starling._error(
            "INVALID_ARGUMENT",
            "DistributedOptimizer: the daemons own the optimizer (--optimizer"
            " %s) and apply the average of the gradients: op=Sum and "
            "gradient_predivide_factor need --optimizer none" %
            wrapped._job["optimizer"])
    wrapped._summed = op is collectives.Sum
    wrapped._predivide = float(gradient_predivide_factor)
    return wrapped
