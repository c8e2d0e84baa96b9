"""starling-run's command line and process helpers (starling_run.py).

Python 3 standard library only: it runs under Debian's /usr/bin/python3.
"""

import argparse
import ctypes
import os
import shutil
import signal
import socket
import stat
import sys

PROG = "starling-run"

# Exit status for failures of the launcher itself (not a worker's status).
EXIT_LAUNCHER = 1


class LaunchError(Exception):
    """A failure of the launch itself, reported as one message.

    code is the launcher's exit status; show_logs says whether the daemon
    and coordinator logs may explain it."""

    def __init__(self, message, code=EXIT_LAUNCHER, show_logs=True):
        super().__init__(message)
        self.code = code
        self.show_logs = show_logs

def parse_duration(text):
    """Returns seconds from '60', '60s', '1.5s', '500ms' or '2m'."""
    value = text.strip()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0),
                          ("h", 3600.0)):
        if value.endswith(suffix):
            value, factor = value[:-len(suffix)], scale
            break
    else:
        factor = 1.0
    try:
        seconds = float(value) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(
            "bad duration %r (e.g. 60, 60s, 500ms, 2m)" % text) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError("negative duration %r" % text)
    return seconds


def positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1: %r" % text)
    return value


def build_parser():
    """Returns the command-line parser; --help lists every flag."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage="%(prog)s -np N [options] COMMAND [ARGS...]",
        description=(
            "Start a Starling coordinator and --nodes daemons on 127.0.0.1 "
            "(or attach to running daemons) and run N workers: COMMAND "
            "[ARGS...] N times, N/K per daemon, with STARLING_SOCKET, "
            "STARLING_WORKER_INDEX, STARLING_LOCAL_SIZE, STARLING_NODE_RANK, "
            "STARLING_NODES, STARLING_RANK, STARLING_SIZE set and PYTHONPATH "
            "holding the starling package, and torch.distributed's RANK, "
            "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR "
            "(127.0.0.1) and MASTER_PORT (a free port) unless MASTER_ADDR "
            "and MASTER_PORT are set, so that init_process_group"
            "(\"starling\") works. Each output line is prefixed with "
            "the worker's rank. Exit status: 0 if every worker exits 0, else "
            "the first non-zero one (128+S if killed by signal S); 130 on "
            "Ctrl-C; 1 if the launch itself failed."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    workers = parser.add_argument_group("workers")
    workers.add_argument("-np", dest="np", type=positive_int, required=True,
                         default=argparse.SUPPRESS, metavar="N",
                         help="total number of workers (required)")
    workers.add_argument("--nodes", type=positive_int, default=1,
                         metavar="K",
                         help="daemons to start on this machine; N must be "
                         "divisible by K")
    workers.add_argument("--attach", default=None,
                         metavar="SOCKET[,SOCKET...]",
                         help="start no coordinator or daemons: run the "
                         "workers on these running daemons' worker sockets "
                         "(daemon d = the d-th socket; each must have been "
                         "started with --local_workers=N/len(sockets)); the "
                         "job and daemon settings below are then unused")
    workers.add_argument("--failure_grace", type=parse_duration,
                         default="5s", metavar="DURATION",
                         help="after a worker fails, how long the others may "
                         "go on before they are stopped")
    workers.add_argument("--bucket_bytes", type=int, default=None,
                         help="exported to the workers as "
                         "STARLING_BUCKET_BYTES (unset if not given)")

    job = parser.add_argument_group("job (passed to starling-coordinator)")
    job.add_argument("--mode", default="sync_sgd",
                     help="sync_sgd, async_sgd, parameter_server or an EASGD "
                     "mode (sync_easgd, async_easgd, async_measgd, "
                     "hogwild_easgd, round_robin_easgd)")
    job.add_argument("--optimizer", default=None,
                     help="none (plain all-reduce: the workers run their own "
                     "optimizer), or sgd, momentum, adam (applied by the "
                     "daemons); default: none, but easgd in the EASGD modes")
    job.add_argument("--learning_rate", default="0.01")
    job.add_argument("--staleness", default="1",
                     help="staleness bound, --mode=async_sgd only")
    job.add_argument("--epochs", default="1")
    job.add_argument("--partitions_per_epoch", default="1024")
    job.add_argument("--collective_timeout", default="30s")
    job.add_argument("--parameter_count", default="0",
                     help="0: whatever the workers declare")

    daemon = parser.add_argument_group("daemons (passed to starling-node)")
    daemon.add_argument("--worker_grace", default="60s",
                        help="how long a daemon holds a run for a worker "
                        "that left it")
    daemon.add_argument("--log_level", default="warning",
                        help="debug, info, warning or error (coordinator and "
                        "daemons)")
    daemon.add_argument("--metrics", action="store_true",
                        help="serve Prometheus metrics on free ports (printed) "
                        "instead of turning them off")

    launcher = parser.add_argument_group("launcher")
    launcher.add_argument("--bin_dir", default=None, metavar="DIR",
                          help="directory holding starling-node and "
                          "starling-coordinator (or a bazel-bin directory); "
                          "default: starling-run's Bazel runfiles")
    launcher.add_argument("--runfiles", default=None, metavar="DIR",
                          help="starling-run's runfiles directory "
                          "(<runfiles>/starling); the wrapper script sets it")
    launcher.add_argument("--log_dir", default=None, metavar="DIR",
                          help="where daemon and coordinator logs, the "
                          "worker sockets and the 'pids' file go; default: a "
                          "fresh temporary directory, removed after a "
                          "successful run")
    launcher.add_argument("--timeout", type=parse_duration, default="60s",
                          metavar="DURATION",
                          help="how long to wait for the daemons' worker "
                          "sockets")
    launcher.add_argument("--quiet", action="store_true",
                          help="no launcher messages except errors")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        metavar="COMMAND [ARGS...]",
                        help="the worker command, passed through untouched")
    return parser


# ----- helpers ------------------------------------------------------------


def runfiles_root(runfiles):
    """Returns the root the binaries are looked up under: the runfiles
    directory given by the wrapper, or else the tree this file sits in
    (<root>/client/python/starling_run.py, in runfiles or the source tree,
    where <root>/bazel-bin is also tried)."""
    if runfiles:
        return os.path.abspath(runfiles)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(here))


def python_package_dir(runfiles):
    """Returns the directory holding the `starling` package."""
    if runfiles:
        return os.path.join(os.path.abspath(runfiles), "client", "python")
    # Not symlink-resolved: in a runfiles tree this is the runfiles copy,
    # next to the built _starling.so.
    return os.path.dirname(os.path.abspath(__file__))


def elastic_modes(runfiles):
    """The modes whose optimizer must be the coordinator's default (the EASGD
    centre update), where the launcher's "none" default would be refused:
    the mode table of the C++ extension the workers import too."""
    package_dir = python_package_dir(runfiles)
    if package_dir not in sys.path:
        sys.path.insert(0, package_dir)
    try:
        from starling import _starling  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise LaunchError("cannot load the starling package from %s: %s" %
                          (package_dir, e), show_logs=False)
    return _starling.ELASTIC_MODES


def free_ports(count):
    """Returns count distinct free TCP ports on 127.0.0.1.

    All sockets stay bound until every port is read, so no port repeats;
    another process may still take one before the daemon binds it."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def is_socket(path):
    """True if path exists and is a unix socket."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def remove_stale_socket(path):
    """Removes a socket file left by a dead daemon, so that its presence is
    not taken for readiness; refuses one a live process serves."""
    if not os.path.lexists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise LaunchError("worker socket %s is in use by a running daemon; pick "
                      "another --log_dir" % path)


def tail(path, count):
    """Returns the last count lines of a text file (none if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-count:]


def exit_code(returncode):
    """Popen's returncode as a shell would report it: 128+S for signal S."""
    return 128 - returncode if returncode < 0 else returncode


def describe_status(returncode):
    """'status 3' or 'signal 9 (SIGKILL)' for messages."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "?"
        return "signal %d (%s)" % (-returncode, name)
    return "status %d" % returncode


def signal_group(proc, signum):
    """Signals the process group a worker leads (its own session)."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass
    except PermissionError:
        # The group id was taken over by a process that is not ours.
        pass


def signal_process(proc, signum):
    """Signals one process if it has not been reaped yet."""
    if proc.poll() is None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass


def remove_tree(path):
    """Removes a directory tree, ignoring errors (best effort)."""
    shutil.rmtree(path, ignore_errors=True)


_LIBC = None
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PR_SET_PDEATHSIG = 1
except OSError:
    _LIBC = None


def die_with_parent():
    """In the child before exec: SIGTERM when the launcher dies, even by
    SIGKILL, so no daemon or worker outlives it. The launcher is single
    threaded, which makes preexec_fn safe here."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
