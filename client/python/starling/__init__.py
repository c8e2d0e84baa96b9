"""Starling for Python: a worker process's connection to its node daemon.

    import starling
    starling.init()          # the local daemon: STARLING_SOCKET, STARLING_WORKER_INDEX
    print(starling.rank(), starling.size())

`starling-run -np 4 /usr/bin/python3 train.py` starts a coordinator and the
daemons on this machine and sets the environment; without it, start
`starling-node` yourself and set STARLING_SOCKET (the daemon's
--worker_socket) and STARLING_WORKER_INDEX (0 .. the daemon's
--local_workers - 1). PyTorch users import `starling.torch`, which re-exports
everything here and adds DistributedOptimizer and the broadcasts.

Every failure raises StarlingError (a RuntimeError) carrying the C++ status
text: what failed and where (op, tensor, step, worker, daemon rank); its
`code` is the status code's name ("UNAVAILABLE", "INVALID_ARGUMENT", ...).
"""

import atexit
import os
import socket as _socket
import sys
import time

try:
    from starling import _starling
except ImportError as error:  # pragma: no cover - a build problem
    raise ImportError(
        "starling: the extension module starling/_starling.so is missing or "
        "was built for another Python (it is built for Debian's "
        "/usr/bin/python3 by `bazel build //client/python:starling`; "
        "starling-run puts it on PYTHONPATH): %s" % error) from error

StarlingError = _starling.StarlingError
__version__ = _starling.__version__

# The daemon's default worker socket (starling-node --worker_socket).
DEFAULT_SOCKET = _starling.DEFAULT_SOCKET

_session = None


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise StarlingError("environment variable %s=%r is not an integer" %
                            (name, value)) from None


def _error(code, message):
    error = StarlingError(message)
    error.code = code
    return error


class Session:
    """This process's connection to its daemon, and the run it takes part in.

    A run begins when the worker's first data operation (an all-reduce, a
    push, a pull, a barrier) ends its tensor declarations, and ends at
    finish(); declarations made after a run began close that run (every
    worker does the same, in the same order) and open the next one.
    """

    def __init__(self, client, socket, timeout, pool_bytes):
        self.client = client
        self.pool_bytes = pool_bytes
        self.socket = socket
        self.timeout = timeout
        self.running = False  # declarations ended: a run is under way
        self.failed = False  # an uncaught exception: do not finish at exit
        self.size_checked = False
        self.declared = 0  # tensors declared for the next run
        self._scratch = None  # (PoolBuffer, bytes) for broadcasts etc.
        # Run once, last added first, before the run finishes and the
        # client closes (on_close): the torch.distributed backend stops its
        # thread there.
        self._close_hooks = []

    # --- runs -------------------------------------------------------------
    def begin_declarations(self):
        """Closes the run under way, if any, so that declarations may follow."""
        self.finish()
        self.declared = 0

    def data_op(self):
        """Called before every data operation: the declarations end there."""
        self.running = True

    def check_size(self):
        """Once the run began: the job's workers are daemons x local workers
        (what rank() and size() assume)."""
        if self.size_checked:
            return
        c = self.client
        if c.total_workers == 0:
            return  # the declarations have not ended yet
        self.size_checked = True
        if c.total_workers != c.group_size * c.local_workers:
            raise _error(
                "FAILED_PRECONDITION",
                "starling: the job has %d workers, but %d daemons x %d local "
                "workers of this one make %d; rank() and size() assume every "
                "daemon has as many local workers (starling-node "
                "--local_workers)" %
                (c.total_workers, c.group_size, c.local_workers,
                 c.group_size * c.local_workers))

    # --- pool memory ------------------------------------------------------
    def allocate(self, nbytes):
        """A zeroed buffer of `nbytes` in the shared pool (kept for good)."""
        try:
            return self.client.allocate(max(int(nbytes), 1))
        except StarlingError as error:
            if getattr(error, "code", "") != "RESOURCE_EXHAUSTED":
                raise
            raise _error(
                "RESOURCE_EXHAUSTED",
                "%s; from Python: starling.init(pool_bytes=...) or "
                "STARLING_POOL_BYTES (this worker's pool: %d bytes; the "
                "DistributedOptimizer needs about (staleness + 1) x the "
                "gradients' bytes, plus the parameters' when the daemons "
                "own the optimizer)" % (error, self.pool_bytes)) from None

    def scratch(self, nbytes):
        """A reusable pool buffer of at least `nbytes` (grown, never shrunk)."""
        if self._scratch is None or self._scratch[1] < nbytes:
            grown = max(int(nbytes), 1 << 20)
            self._scratch = (self.allocate(grown), grown)
        return self._scratch[0]

    def declare_tensor(self, name, shape, dtype):
        self.client.declare_tensor(name, shape, dtype)
        self.declared += 1

    def all_reduce_async(self, address, elements, dtype="float32"):
        if not self.running and not self.declared:
            count = self.client.job()["parameter_count"]
            if count:
                raise _error(
                    "FAILED_PRECONDITION",
                    "starling: this all-reduce would begin a run with no "
                    "tensors, but the job fixes the parameter count at %d "
                    "(starling-coordinator --parameter_count): create the "
                    "DistributedOptimizer (which declares the model) before "
                    "broadcasts and all-reduces" % count)
        self.data_op()
        return self.client.all_reduce_async(address, elements, dtype)

    def barrier(self):
        self.data_op()
        self.client.barrier()

    def finish(self):
        if self.running:
            self.client.finish()
            self.running = False
            self.size_checked = False
            self.declared = 0

    def on_close(self, hook):
        """Runs hook() once before this session ends its run and closes
        (shutdown(), or at exit): users of the client on other threads stop
        there."""
        self._close_hooks.append(hook)

    def run_close_hooks(self):
        hooks, self._close_hooks = self._close_hooks, []
        for hook in reversed(hooks):
            hook()

    def close(self):
        try:
            self.run_close_hooks()
        finally:
            self.client.close()


def init(socket=None, worker_index=None, *, timeout=None, pool_bytes=None,
         bucket_bytes=None, connect_timeout=None):
    """Connects this process to its node daemon; a second call does nothing.

    socket: the daemon's worker socket (starling-node --worker_socket);
        default $STARLING_SOCKET, else /tmp/starling-node.sock.
    worker_index: this worker's index among the daemon's workers; default
        $STARLING_WORKER_INDEX, else 0.
    timeout: seconds every blocking operation may take (default
        $STARLING_TIMEOUT or 60); a wait that ends names who did not answer.
    pool_bytes: size of the shared-memory pool tensors live in (default
        $STARLING_POOL_BYTES or 1 GiB; pages are only used when touched).
    bucket_bytes: gradient bucket size (default $STARLING_BUCKET_BYTES or
        256 KiB); every worker of the job must use the same.
    connect_timeout: how long to wait for the socket to appear and for the
        daemon's answer to this worker's hello (default
        $STARLING_CONNECT_TIMEOUT or 10 s): a process that accepts on the
        socket but does not answer, or answers in another protocol, is
        named within it.
    """
    global _session
    if _session is not None:
        return
    socket = socket or os.environ.get("STARLING_SOCKET") or DEFAULT_SOCKET
    if worker_index is None:
        worker_index = _env_int("STARLING_WORKER_INDEX", 0)
    if timeout is None:
        timeout = float(os.environ.get("STARLING_TIMEOUT", "60"))
    if pool_bytes is None:
        pool_bytes = _env_int("STARLING_POOL_BYTES", 1 << 30)
    if bucket_bytes is None:
        bucket_bytes = _env_int("STARLING_BUCKET_BYTES", 256 << 10)
    if connect_timeout is None:
        connect_timeout = float(
            os.environ.get("STARLING_CONNECT_TIMEOUT", "10"))
    _wait_for_daemon(socket, connect_timeout)
    name = "worker %d (pid %d)" % (worker_index, os.getpid())
    client = _starling.Client(socket, worker_index, timeout, pool_bytes,
                              bucket_bytes, name, connect_timeout)
    _session = Session(client, socket, timeout, pool_bytes)
    _install_exit_hooks()


def _daemon_answers(path):
    """None when a daemon accepts on `path`, else why not."""
    if not os.path.exists(path):
        return "the socket does not exist"
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return None
    except OSError as error:
        return ("the socket exists but nothing accepts on it (%s): the "
                "daemon that made it has stopped" % error.strerror)
    finally:
        probe.close()


def _script_name():
    script = sys.argv[0] if sys.argv else ""
    return os.path.basename(script) if script.endswith(".py") else "train.py"


def _wait_for_daemon(path, seconds):
    """Waits up to `seconds` for a daemon at `path` (starling-run starts
    workers right after the daemons), then says plainly what is missing."""
    deadline = time.monotonic() + seconds
    while True:
        why = _daemon_answers(path)
        if why is None:
            return
        if time.monotonic() >= deadline:
            raise _error(
                "UNAVAILABLE",
                "starling.init: no Starling node daemon is running at %s "
                "(%s; waited %.1f s). Start one (starling-node "
                "--worker_socket=%s ...) or launch this script with "
                "starling-run (starling-run -np 4 /usr/bin/python3 %s), which "
                "starts the daemons and sets STARLING_SOCKET." %
                (path, why, seconds, path,
                 _script_name()))
        time.sleep(0.05)


def is_initialized():
    return _session is not None


def session():
    """The current Session; StarlingError when init() was not called."""
    if _session is None:
        raise _error("FAILED_PRECONDITION",
                     "starling: call starling.init() first")
    return _session


def shutdown():
    """Ends this worker's part in the run (a barrier with every worker) and
    closes the connection. Called at exit unless an exception is escaping."""
    global _session
    if _session is None:
        return
    session, _session = _session, None
    try:
        session.run_close_hooks()
        if not session.failed:
            session.finish()
    finally:
        session.close()


def rank():
    """This worker's rank in the job: daemon rank x local workers + index."""
    c = session().client
    return c.rank * c.local_workers + c.worker_index


def size():
    """Workers in the job: daemons x local workers per daemon."""
    c = session().client
    return c.group_size * c.local_workers


def local_rank():
    """This worker's index among its daemon's workers."""
    return session().client.worker_index


def local_size():
    """Workers of this worker's daemon (starling-node --local_workers)."""
    return session().client.local_workers


def node_rank():
    """The rank of this worker's daemon."""
    return session().client.rank


def node_count():
    """Daemons in the group."""
    return session().client.group_size


def job():
    """The job's settings (starling-coordinator's flags), as a dict: mode,
    optimizer, learning_rate, staleness and the EASGD settings."""
    return session().client.job()


def barrier():
    """Returns once every worker of the job entered the barrier."""
    session().barrier()


def report(samples=0, loss=None, accuracy=None):
    """Tells the daemon what training achieved, for its Prometheus metrics
    and the training dashboard: `samples` trained since the last report,
    and the latest `loss` and `accuracy` (a fraction, 0..1), each if known.
    Sent with the next gradient push (DistributedOptimizer.step())."""
    if samples < 0:
        raise ValueError("starling.report: samples must be >= 0, not %r" %
                         (samples,))
    if accuracy is not None and not 0.0 <= float(accuracy) <= 1.0:
        raise ValueError("starling.report: accuracy is a fraction in 0..1, "
                         "not %r" % (accuracy,))
    session().client.report_progress(
        int(samples), None if loss is None else float(loss),
        None if accuracy is None else float(accuracy))


_previous_excepthook = None


def _excepthook(kind, value, traceback):
    # A worker dying of an exception must not wait at exit for the others
    # in finish(): it leaves, and the daemons name it to the rest.
    if _session is not None:
        _session.failed = True
    _previous_excepthook(kind, value, traceback)


def _install_exit_hooks():
    global _previous_excepthook
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(_shutdown_at_exit)


def _shutdown_at_exit():
    try:
        shutdown()
    except StarlingError as error:
        # The run failed earlier (and said so); one line, not a traceback.
        print("starling: at exit: %s" % error, file=sys.stderr)
