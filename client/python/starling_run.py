#!/usr/bin/python3
"""starling-run: start a Starling job on this machine and run its workers.

    starling-run -np 4 /usr/bin/python3 train.py [args]

starts a starling-coordinator and --nodes starling-node daemons on 127.0.0.1
(or, with --attach, uses daemons already running), then N workers, N/K per
daemon, each with the STARLING_* environment the `starling` package reads
and torch.distributed's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) for init_process_group("starling").
Each line a worker prints is prefixed with its global rank. The exit status
is 0 when every worker exits 0, otherwise the first non-zero worker status
(128+S for a worker killed by signal S). Everything started is stopped, by
pid, at the end, on a worker's failure and on SIGINT/SIGTERM.

Python 3 standard library only: it runs under Debian's /usr/bin/python3.
"""

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

from starling_run_util import (EXIT_LAUNCHER, PROG, LaunchError,
                               build_parser, describe_status, die_with_parent,
                               elastic_modes, exit_code, free_ports, is_socket,
                               python_package_dir, remove_stale_socket,
                               remove_tree, runfiles_root, signal_group,
                               signal_process, tail)

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107

# How long stopping waits after SIGTERM before SIGKILL.
STOP_GRACE_S = 3.0

# Lines of each daemon/coordinator log shown when something failed.
LOG_TAIL_LINES = 10


class Launcher:
    """Starts, watches and stops the coordinator, daemons and workers."""

    def __init__(self, args):
        self.args = args
        self.quiet = args.quiet
        self.job_id = "%s-%d" % (PROG, os.getpid())
        # (name, Popen, log path or None) of the coordinator and daemons.
        self.services = []
        # Popen per rank; None until started.
        self.workers = []
        # fd -> [rank, output file, pending bytes] for each worker pipe.
        self.streams = {}
        self.selector = selectors.DefaultSelector()
        self.log_dir = None
        self.own_log_dir = False
        self.socket_dir = None
        self.pids_file = None
        self.signal_received = None
        self.wakeup_r = self.wakeup_w = None
        self.old_handlers = {}
        self.stdout_broken = self.stderr_broken = False

    # ----- messages -------------------------------------------------------

    def info(self, message):
        """A launcher message on stderr, unless --quiet."""
        if not self.quiet:
            self._write_err("%s: %s\n" % (PROG, message))

    def error(self, message):
        """An error message on stderr (shown even with --quiet)."""
        self._write_err("%s: error: %s\n" % (PROG, message))

    def _write_err(self, text):
        if self.stderr_broken:
            return
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (BrokenPipeError, OSError):
            self.stderr_broken = True

    def log_tails(self):
        """Prints the log dir and the last lines of every service's log."""
        if self.log_dir is None:
            return
        self.error("logs in %s" % self.log_dir)
        for name, _, log_path in self.services:
            lines = tail(log_path, LOG_TAIL_LINES)
            self._write_err("----- %s (%s), last %d lines -----\n" %
                            (name, log_path, len(lines)))
            for line in lines:
                self._write_err("  %s\n" % line)

    # ----- signals --------------------------------------------------------

    def install_signal_handlers(self):
        """Records SIGINT/SIGTERM/SIGHUP and wakes the loop on any of them
        or on SIGCHLD, so a worker's exit is seen at once and in order."""
        self.wakeup_r, self.wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_r, False)
        os.set_blocking(self.wakeup_w, False)
        signal.set_wakeup_fd(self.wakeup_w, warn_on_full_buffer=False)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, None)

        def on_stop_signal(signum, _frame):
            if self.signal_received is None:
                self.signal_received = signum
            else:
                # A second Ctrl-C while stopping: do not wait any longer.
                self.signal_received = -signum

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self.old_handlers[signum] = signal.signal(signum, on_stop_signal)
        # A handler (not SIG_DFL) so that SIGCHLD writes to the wakeup fd.
        self.old_handlers[signal.SIGCHLD] = signal.signal(
            signal.SIGCHLD, lambda _s, _f: None)

    def restore_signal_handlers(self):
        """Puts back the handlers replaced by install_signal_handlers."""
        for signum, handler in self.old_handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(-1)

    def check_signal(self):
        """Raises StopSignal if SIGINT, SIGTERM or SIGHUP arrived."""
        if self.signal_received is not None:
            raise StopSignal(abs(self.signal_received))

    # ----- set-up ---------------------------------------------------------

    def prepare_dirs(self):
        """Creates the log dir, the pids file and the socket dir."""
        if self.args.log_dir:
            self.log_dir = os.path.abspath(self.args.log_dir)
            os.makedirs(self.log_dir, exist_ok=True)
        else:
            self.log_dir = tempfile.mkdtemp(prefix="starling-run.")
            self.own_log_dir = True
        self.pids_file = open(os.path.join(self.log_dir, "pids"), "w")
        self.socket_dir = self.log_dir
        probe = os.path.join(self.log_dir, "node%d.sock" % self.args.nodes)
        if len(probe.encode()) > MAX_SOCKET_PATH:
            # A deep --log_dir (e.g. Bazel's TEST_TMPDIR) does not fit in
            # sun_path: keep the sockets in a short directory of our own.
            self.socket_dir = tempfile.mkdtemp(prefix="starling-run.",
                                               dir="/tmp")

    def record_pid(self, name, pid):
        """Appends 'name pid' to <log_dir>/pids (read by tests and people
        who must clean up after a launcher killed with SIGKILL)."""
        if self.pids_file is not None:
            self.pids_file.write("%s %d\n" % (name, pid))
            self.pids_file.flush()

    def find_binaries(self):
        """Returns the paths of starling-coordinator and starling-node."""
        names = ("starling-coordinator", "starling-node")
        if self.args.bin_dir:
            bin_dir = os.path.abspath(self.args.bin_dir)
            candidates = [[os.path.join(bin_dir, n) for n in names],
                          [os.path.join(bin_dir, "server", sub, n)
                           for sub, n in zip(("coordinator", "node"), names)]]
        else:
            root = runfiles_root(self.args.runfiles)
            candidates = [[os.path.join(base, "server", sub, n)
                           for sub, n in zip(("coordinator", "node"), names)]
                          for base in (root, os.path.join(root, "bazel-bin"))]
        for paths in candidates:
            if all(os.access(p, os.X_OK) for p in paths):
                return paths
        raise LaunchError(
            "cannot find executable starling-coordinator and starling-node "
            "(looked for %s); build them (bazel build "
            "//server/node:starling-node "
            "//server/coordinator:starling-coordinator) or pass --bin_dir" %
            " and ".join(candidates[0]))

    def start_service(self, name, argv):
        """Starts the coordinator or a daemon, its output to <name>.log."""
        log_path = os.path.join(self.log_dir, name + ".log")
        with open(log_path, "wb") as log:
            # Its own session: a Ctrl-C in the terminal reaches only the
            # launcher, which then stops the workers before the daemons.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    preexec_fn=die_with_parent)
        self.services.append((name, proc, log_path))
        self.record_pid(name, proc.pid)
        with open(log_path + ".cmd", "w") as cmd:
            cmd.write(" ".join(argv) + "\n")
        return proc

    def start_services(self, sockets):
        """Starts the coordinator and K daemons; returns nothing."""
        args = self.args
        k = args.nodes
        coordinator_bin, node_bin = self.find_binaries()
        want_metrics = args.metrics
        ports = free_ports(1 + 2 * k + ((1 + k) if want_metrics else 0))
        listen_port = ports.pop()
        metrics = [ports.pop() if want_metrics else 0 for _ in range(k + 1)]
        coordinator = "127.0.0.1:%d" % listen_port
        optimizer = args.optimizer
        if (optimizer is None and
                args.mode not in elastic_modes(args.runfiles)):
            optimizer = "none"
        argv = [coordinator_bin,
                "--job_id=" + self.job_id,
                "--expected_nodes=%d" % k,
                "--listen=" + coordinator,
                "--metrics_port=%d" % metrics[0],
                "--mode=" + args.mode]
        if optimizer is not None:
            argv.append("--optimizer=" + optimizer)
        argv += ["--learning_rate=" + args.learning_rate,
                 "--staleness=" + args.staleness,
                 "--epochs=" + args.epochs,
                 "--partitions_per_epoch=" + args.partitions_per_epoch,
                 "--collective_timeout=" + args.collective_timeout,
                 "--parameter_count=" + args.parameter_count,
                 "--log_level=" + args.log_level]
        self.start_service("coordinator", argv)
        for d in range(k):
            argv = [node_bin,
                    "--coordinator=" + coordinator,
                    "--job_id=" + self.job_id,
                    "--hostname=node%d" % d,
                    "--data_address=127.0.0.1",
                    "--data_port=%d" % ports.pop(),
                    "--admin_port=%d" % ports.pop(),
                    "--metrics_port=%d" % metrics[d + 1],
                    "--worker_socket=" + sockets[d],
                    "--local_workers=%d" % (args.np // k),
                    "--worker_grace=" + args.worker_grace,
                    "--log_level=" + args.log_level]
            self.start_service("node%d" % d, argv)
        self.info("coordinator on %s, %d daemon(s), logs in %s" %
                  (coordinator, k, self.log_dir))
        if want_metrics:
            urls = ["coordinator http://127.0.0.1:%d/metrics" % metrics[0]]
            urls += ["node%d http://127.0.0.1:%d/metrics" % (d, metrics[d + 1])
                     for d in range(k)]
            # Printed even with --quiet: the user asked for them.
            self._write_err("%s: metrics: %s\n" % (PROG, ", ".join(urls)))

    def check_services(self):
        """Raises LaunchError if the coordinator or a daemon has exited."""
        for name, proc, _ in self.services:
            code = proc.poll()
            if code is not None:
                raise LaunchError("%s (pid %d) exited with %s" %
                                  (name, proc.pid, describe_status(code)))

    def wait_for_sockets(self, sockets, names):
        """Polls until every worker socket exists, up to --timeout."""
        deadline = time.monotonic() + self.args.timeout
        while True:
            self.check_signal()
            self.check_services()
            missing = [i for i, path in enumerate(sockets)
                       if not is_socket(path)]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise LaunchError(
                    "%s did not create its worker socket %s within %gs "
                    "(--timeout)" % (names[missing[0]], sockets[missing[0]],
                                     self.args.timeout))
            # Woken early by SIGCHLD or a stop signal through the wakeup fd.
            self.drain_wakeup(self.selector.select(timeout=0.05))

    def drain_wakeup(self, events):
        """Empties the signal wakeup pipe if it was among the events."""
        for key, _ in events:
            if key.fileobj == self.wakeup_r:
                try:
                    while os.read(self.wakeup_r, 512):
                        pass
                except BlockingIOError:
                    pass

    # ----- workers --------------------------------------------------------

    def start_workers(self, sockets):
        """Starts N workers, N/K per daemon, with their environment."""
        args = self.args
        k = len(sockets)
        local = args.np // k
        package_dir = python_package_dir(args.runfiles)
        base_env = dict(os.environ)
        old_path = base_env.get("PYTHONPATH")
        base_env["PYTHONPATH"] = (package_dir + os.pathsep + old_path
                                  if old_path else package_dir)
        base_env.setdefault("PYTHONUNBUFFERED", "1")
        if args.bucket_bytes is not None:
            base_env["STARLING_BUCKET_BYTES"] = str(args.bucket_bytes)
        base_env.update({"STARLING_LOCAL_SIZE": str(local),
                         "STARLING_NODES": str(k),
                         "STARLING_SIZE": str(args.np)})
        # torch.distributed's env:// rendezvous, as torchrun sets it up
        # (ranks are Starling's): init_process_group("starling") works.
        base_env.update({"WORLD_SIZE": str(args.np),
                         "LOCAL_WORLD_SIZE": str(local)})
        if not base_env.get("MASTER_ADDR"):
            base_env["MASTER_ADDR"] = "127.0.0.1"
        if not base_env.get("MASTER_PORT"):
            base_env["MASTER_PORT"] = str(free_ports(1)[0])
        for rank in range(args.np):
            d, index = divmod(rank, local)
            env = dict(base_env)
            env.update({"STARLING_SOCKET": sockets[d],
                        "STARLING_WORKER_INDEX": str(index),
                        "STARLING_NODE_RANK": str(d),
                        "STARLING_RANK": str(rank),
                        "RANK": str(rank),
                        "LOCAL_RANK": str(index)})
            try:
                # Its own session and process group: stopping signals the
                # group, so children (DataLoader workers) go too. Rank 0
                # gets the launcher's stdin (as mpirun does), others none.
                proc = subprocess.Popen(
                    args.command, env=env,
                    stdin=None if rank == 0 else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True, preexec_fn=die_with_parent)
            except OSError as e:
                # 127/126 as a shell says for a missing or unrunnable command.
                raise LaunchError(
                    "cannot start worker %d (%s): %s" %
                    (rank, args.command[0], e.strerror),
                    code=127 if isinstance(e, FileNotFoundError) else 126,
                    show_logs=False) from None
            self.workers.append(proc)
            self.record_pid("worker%d" % rank, proc.pid)
            for pipe, out in ((proc.stdout, 1), (proc.stderr, 2)):
                fd = pipe.fileno()
                os.set_blocking(fd, False)
                self.streams[fd] = [rank, out, b"", pipe]
                self.selector.register(fd, selectors.EVENT_READ, None)
        self.info("started %d worker(s) on %d daemon(s): %s" %
                  (args.np, k, " ".join(args.command)))

    def emit(self, out, data):
        """Writes prefixed output to stdout (1) or stderr (2)."""
        if (self.stdout_broken if out == 1 else self.stderr_broken):
            return
        stream = sys.stdout.buffer if out == 1 else sys.stderr.buffer
        try:
            stream.write(data)
            stream.flush()
        except (BrokenPipeError, OSError):
            # The reader went away (e.g. `| head`): drop further output but
            # keep managing the processes.
            if out == 1:
                self.stdout_broken = True
            else:
                self.stderr_broken = True

    def read_stream(self, fd, final=False):
        """Reads what a worker pipe holds and prints its complete lines;
        at EOF (or when final) also the partial last line."""
        entry = self.streams[fd]
        rank, out, pending, _ = entry
        eof = False
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            pending += chunk
            if not final:
                break
        prefix = b"[%d] " % rank
        if b"\n" in pending:
            *lines, pending = pending.split(b"\n")
            self.emit(out, b"".join(prefix + line + b"\n" for line in lines))
        if (eof or final) and pending:
            self.emit(out, prefix + pending + b"\n")
            pending = b""
        entry[2] = pending
        if eof or final:
            self.selector.unregister(fd)
            entry[3].close()
            del self.streams[fd]

    def pump(self, timeout):
        """Waits up to timeout for output or a signal; handles the output."""
        events = self.selector.select(timeout=max(0.0, timeout))
        self.drain_wakeup(events)
        for key, _ in events:
            if key.fd in self.streams:
                self.read_stream(key.fd)

    def run_workers(self):
        """Watches the workers until they all ended; returns the status.

        The first non-zero exit (in the order seen) is the result; after it
        the others have --failure_grace to end before they are stopped."""
        first_failure = None
        stop_deadline = None
        exited = set()
        while True:
            self.check_signal()
            for rank, proc in enumerate(self.workers):
                if rank in exited or proc.poll() is None:
                    continue
                exited.add(rank)
                code = exit_code(proc.returncode)
                if code != 0 and first_failure is None:
                    first_failure = code
                    self.error("worker %d (pid %d) exited with %s; stopping "
                               "the others in %gs" %
                               (rank, proc.pid,
                                describe_status(proc.returncode),
                                self.args.failure_grace))
                    stop_deadline = (time.monotonic() +
                                     self.args.failure_grace)
            if len(exited) == len(self.workers):
                return first_failure or 0
            # A daemon or the coordinator dying leaves the workers hanging.
            self.check_services()
            if stop_deadline is not None and time.monotonic() >= stop_deadline:
                self.error("%d worker(s) still running after --failure_grace; "
                           "stopping them" % (len(self.workers) - len(exited)))
                return first_failure
            timeout = 0.5
            if stop_deadline is not None:
                timeout = min(timeout, stop_deadline - time.monotonic())
            self.pump(timeout)

    # ----- stopping -------------------------------------------------------

    def stop_all(self):
        """SIGTERM to every worker's process group, then to the coordinator
        and daemons; SIGKILL after STOP_GRACE_S; reaps all of them."""
        for proc in self.workers:
            # Signal the group even if the worker itself is gone: children
            # it left behind (DataLoader workers) are still in it.
            signal_group(proc, signal.SIGTERM)
        for _, proc, _ in self.services:
            signal_process(proc, signal.SIGTERM)
        everything = self.workers + [proc for _, proc, _ in self.services]
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in everything):
                break
            if self.signal_received is not None and self.signal_received < 0:
                break
            self.pump(min(0.05, deadline - time.monotonic()))
        for proc in self.workers:
            signal_group(proc, signal.SIGKILL)
        for _, proc, _ in self.services:
            if proc.poll() is None:
                signal_process(proc, signal.SIGKILL)
        for proc in everything:
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.error("pid %d did not exit after SIGKILL" % proc.pid)
        self.flush_streams()

    def flush_streams(self):
        """Prints what is left in the worker pipes, partial lines included.

        Bounded in time: a grandchild that left the process group may hold
        a pipe open forever."""
        deadline = time.monotonic() + 0.5
        while self.streams and time.monotonic() < deadline:
            self.pump(min(0.05, deadline - time.monotonic()))
        for fd in list(self.streams):
            self.read_stream(fd, final=True)

    def cleanup(self, success):
        """Closes files; removes our own temporary directories."""
        if self.pids_file is not None:
            self.pids_file.close()
            self.pids_file = None
        if self.socket_dir and self.socket_dir != self.log_dir:
            remove_tree(self.socket_dir)
        # Attached, our directory holds only the pids file: nothing to keep.
        if self.own_log_dir and (success or not self.services):
            remove_tree(self.log_dir)
        self.selector.close()

    # ----- main -----------------------------------------------------------

    def run(self):
        """Runs the whole job; returns the launcher's exit status."""
        args = self.args
        status = EXIT_LAUNCHER
        launch_failed = False
        self.install_signal_handlers()
        try:
            self.prepare_dirs()
            if args.attach:
                sockets = [os.path.abspath(s) for s in args.attach.split(",")]
                names = ["daemon %d (--attach %s)" % (d, s)
                         for d, s in enumerate(sockets)]
            else:
                sockets = [os.path.join(self.socket_dir, "node%d.sock" % d)
                           for d in range(args.nodes)]
                for path in sockets:
                    remove_stale_socket(path)
                names = ["node%d" % d for d in range(args.nodes)]
                self.start_services(sockets)
            self.wait_for_sockets(sockets, names)
            with open(os.path.join(self.log_dir, "sockets"), "w") as f:
                f.writelines("%s %s\n" % (n, s) for n, s in zip(names, sockets))
            self.start_workers(sockets)
            status = self.run_workers()
        except StopSignal as e:
            status = 128 + e.signum
            self.error("received %s; stopping everything" %
                       signal.Signals(e.signum).name)
        except LaunchError as e:
            launch_failed = e.show_logs
            status = e.code
            self.error(str(e))
        except OSError as e:
            # The log dir, a pipe, a pids file: the world refused, not a bug.
            launch_failed = True
            self.error("%s%s" % (e.strerror or e,
                                 " (%s)" % e.filename if e.filename else ""))
        finally:
            self.stop_all()
            self.restore_signal_handlers()
        if launch_failed and self.services:
            self.log_tails()
        elif status != 0 and self.services and not self.quiet:
            self.error("logs in %s" % self.log_dir)
        self.cleanup(status == 0)
        return status


class StopSignal(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived: stop everything."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def main(argv=None):
    """Parses the command line and runs the job; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("no worker command given (e.g. %s -np 2 /usr/bin/python3 "
                     "train.py)" % PROG)
    args.command = command
    if args.attach:
        sockets = [s for s in args.attach.split(",")]
        if not all(sockets):
            parser.error("--attach: empty socket path in %r" % args.attach)
        k = len(sockets)
        what = "the number of --attach sockets"
    else:
        k = args.nodes
        what = "--nodes"
    if args.np % k != 0:
        parser.error("-np %d is not divisible by %s (%d): every daemon "
                     "serves the same number of workers" % (args.np, what, k))
    if args.attach is None and not args.nodes:
        parser.error("--nodes must be >= 1")
    if args.attach:
        args.nodes = k
    return Launcher(args).run()


if __name__ == "__main__":
    sys.exit(main())
