"""Tests of starling-run (client/python/starling_run.py) through its wrapper.

The workers are plain shell commands, not the `starling` package: these tests
check the launcher (environment, output, exit status, stopping), not the
client library. Every wait polls with a deadline; every subprocess has a
timeout.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest


def runfiles_root():
    """Returns <runfiles>/starling: Bazel's test runfiles, or else the
    repository with bazel-bin's runfiles tree (running the file by hand)."""
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        return os.path.join(srcdir, "starling")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    return os.path.join(repo, "bazel-bin", "client", "python",
                        "starling-run.runfiles", "starling")


RUNFILES = runfiles_root()
LAUNCHER = os.path.join(RUNFILES, "client", "python", "starling-run")
NODE_BIN = os.path.join(RUNFILES, "server", "node", "starling-node")
COORDINATOR_BIN = os.path.join(RUNFILES, "server", "coordinator",
                               "starling-coordinator")

# Bound on any one launcher run in these tests.
RUN_TIMEOUT_S = 60


def alive(pid):
    """True if pid is a live process (a zombie counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            # The state follows the parenthesised command name.
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(predicate, timeout_s, what):
    """Polls predicate every 20 ms until true; fails the test past
    timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting for %s" %
                                 (timeout_s, what))
        time.sleep(0.02)


def read_pids(path):
    """Parses the launcher's 'name pid' lines into a dict."""
    pids = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                pids[parts[0]] = int(parts[1])
    return pids


def free_ports(count):
    """Returns count distinct free ports on 127.0.0.1."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class StarlingRunTest(unittest.TestCase):
    """End-to-end runs of the launcher on 127.0.0.1."""

    def setUp(self):
        # Short paths: worker sockets live here and sun_path holds 107
        # bytes, which TEST_TMPDIR exceeds.
        self.dir = tempfile.mkdtemp(prefix="srt.", dir="/tmp")
        self.log_dir = os.path.join(self.dir, "logs")
        self.started = []

    def tearDown(self):
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        # Whatever a failed test left behind, stopped by pid.
        pids_file = os.path.join(self.log_dir, "pids")
        if os.path.exists(pids_file):
            for pid in read_pids(pids_file).values():
                if alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def launch(self, *args, timeout=RUN_TIMEOUT_S):
        """Runs the launcher to its end; returns (rc, stdout, stderr,
        seconds)."""
        start = time.monotonic()
        result = subprocess.run([LAUNCHER] + list(args),
                                stdin=subprocess.DEVNULL,
                                capture_output=True, text=True,
                                timeout=timeout)
        return (result.returncode, result.stdout, result.stderr,
                time.monotonic() - start)

    def assert_all_gone(self, pids, timeout_s=5):
        """Fails unless every pid ends within timeout_s."""
        wait_until(lambda: not any(alive(p) for p in pids), timeout_s,
                   "processes %s to end" %
                   [p for p in pids if alive(p)])

    def test_environment_and_prefixes(self):
        """-np 4 --nodes 2: ranks 0..3, 2 per daemon, prefixed output."""
        worker = ('echo "env $STARLING_RANK $STARLING_WORKER_INDEX '
                  '$STARLING_NODE_RANK $STARLING_SOCKET $STARLING_LOCAL_SIZE '
                  '$STARLING_NODES $STARLING_SIZE ${PYTHONPATH%%:*} '
                  '$PYTHONUNBUFFERED ${STARLING_BUCKET_BYTES:-unset}"; '
                  'echo "err $STARLING_RANK" >&2; printf "tail $STARLING_RANK"')
        rc, out, err, _ = self.launch("-np", "4", "--nodes", "2", "--quiet",
                                      "--log_dir", self.log_dir,
                                      "/bin/sh", "-c", worker)
        self.assertEqual(rc, 0, err)
        sockets = {}
        with open(os.path.join(self.log_dir, "sockets")) as f:
            for line in f:
                name, path = line.split()
                sockets[name] = path
        self.assertEqual(sorted(sockets), ["node0", "node1"])
        for d in range(2):
            self.assertEqual(os.path.basename(sockets["node%d" % d]),
                             "node%d.sock" % d)
        seen = set()
        for line in out.splitlines():
            match = re.fullmatch(r"\[(\d+)\] (.*)", line)
            self.assertIsNotNone(match, "line without a prefix: %r" % line)
            prefix, text = int(match.group(1)), match.group(2)
            if text.startswith("tail "):
                # The partial last line, flushed at exit.
                self.assertEqual(text, "tail %d" % prefix)
                continue
            (rank, index, node, sock, local, nodes, size, pythonpath,
             unbuffered, bucket) = text.split()[1:]
            rank = int(rank)
            self.assertEqual(prefix, rank)
            self.assertEqual(int(index), rank % 2)
            self.assertEqual(int(node), rank // 2)
            self.assertEqual(sock, sockets["node%d" % (rank // 2)])
            self.assertEqual((local, nodes, size), ("2", "2", "4"))
            self.assertTrue(
                os.path.isdir(os.path.join(pythonpath, "starling")) or
                pythonpath.endswith(os.path.join("client", "python")),
                pythonpath)
            self.assertEqual(unbuffered, "1")
            self.assertEqual(bucket, "unset")
            seen.add(rank)
        self.assertEqual(seen, {0, 1, 2, 3})
        self.assertEqual(out.count("] tail "), 4)
        self.assertEqual(sorted(err.split("\n")[:-1]),
                         ["[%d] err %d" % (r, r) for r in range(4)])
        pids = read_pids(os.path.join(self.log_dir, "pids"))
        self.assertEqual(sorted(pids), ["coordinator", "node0", "node1",
                                        "worker0", "worker1", "worker2",
                                        "worker3"])
        self.assert_all_gone(pids.values(), timeout_s=1)

    def test_torch_distributed_environment(self):
        """env:// works under the launcher: RANK etc. per worker, one
        MASTER_ADDR/MASTER_PORT for all, and a MASTER_PORT given is kept."""
        worker = ('echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE '
                  '$MASTER_ADDR $MASTER_PORT"')
        rc, out, err, _ = self.launch("-np", "4", "--nodes", "2", "--quiet",
                                      "/bin/sh", "-c", worker)
        self.assertEqual(rc, 0, err)
        fields = sorted(line.split() for line in out.splitlines())
        ports = {f[6] for f in fields}
        self.assertEqual(len(ports), 1, out)
        port = ports.pop()
        self.assertTrue(0 < int(port) < 65536, port)
        self.assertEqual(fields, [["[%d]" % r, str(r), str(r % 2), "4", "2",
                                   "127.0.0.1", port] for r in range(4)])
        env = dict(os.environ, MASTER_PORT="29555")
        result = subprocess.run(
            [LAUNCHER, "-np", "1", "--quiet", "/bin/sh", "-c",
             'echo "$MASTER_ADDR:$MASTER_PORT"'], stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
        self.assertEqual(result.stdout, "[0] 127.0.0.1:29555\n", result.stderr)

    def test_bucket_bytes_exported(self):
        """--bucket_bytes reaches the workers as STARLING_BUCKET_BYTES."""
        rc, out, err, _ = self.launch(
            "-np", "1", "--quiet", "--bucket_bytes", "4096", "/bin/sh", "-c",
            'echo "b=$STARLING_BUCKET_BYTES"')
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "[0] b=4096\n")

    def test_first_failure_is_the_exit_status(self):
        """A worker's exit 3 ends the run with 3; sleepers are stopped."""
        worker = ('echo $$ > %s/w$STARLING_RANK.pid; '
                  'if [ "$STARLING_RANK" = 1 ]; then exit 3; fi; '
                  'sleep 300; echo "not stopped"' % self.dir)
        rc, out, err, seconds = self.launch(
            "-np", "4", "--nodes", "2", "--failure_grace", "1",
            "--log_dir", self.log_dir, "/bin/sh", "-c", worker)
        self.assertEqual(rc, 3, err)
        self.assertLess(seconds, 15)
        self.assertNotIn("not stopped", out)
        self.assertIn("worker 1", err)
        pids = list(read_pids(os.path.join(self.log_dir, "pids")).values())
        for r in range(4):
            with open(os.path.join(self.dir, "w%d.pid" % r)) as f:
                pids.append(int(f.read()))
        self.assert_all_gone(pids, timeout_s=1)

    def test_killed_worker_counts_as_128_plus_signal(self):
        """A worker killed by SIGKILL makes the launcher exit 137."""
        rc, _, err, _ = self.launch("-np", "2", "--failure_grace", "0",
                                    "--log_dir", self.log_dir,
                                    "/bin/sh", "-c",
                                    '[ "$STARLING_RANK" = 0 ] && kill -9 $$; '
                                    'sleep 300')
        self.assertEqual(rc, 137, err)

    def test_sigint_stops_everything(self):
        """Ctrl-C: workers, daemons and coordinator gone within 5 s."""
        worker = 'echo $$ > %s/w$STARLING_RANK.pid; sleep 300' % self.dir
        with open(os.path.join(self.dir, "out"), "w") as out, \
                open(os.path.join(self.dir, "err"), "w") as err:
            proc = subprocess.Popen(
                [LAUNCHER, "-np", "4", "--nodes", "2", "--log_dir",
                 self.log_dir, "/bin/sh", "-c", worker],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.started.append(proc)
        pid_files = [os.path.join(self.dir, "w%d.pid" % r) for r in range(4)]

        def workers_started():
            return all(os.path.exists(p) and os.path.getsize(p) > 0
                       for p in pid_files)

        wait_until(workers_started, 30, "the 4 workers to start")
        pids = read_pids(os.path.join(self.log_dir, "pids"))
        self.assertIn("coordinator", pids)
        self.assertIn("node1", pids)
        all_pids = list(pids.values())
        for path in pid_files:
            with open(path) as f:
                all_pids.append(int(f.read()))
        self.assertTrue(all(alive(p) for p in all_pids))
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        self.assertEqual(proc.wait(timeout=5), 130)
        self.assert_all_gone(all_pids,
                             timeout_s=max(0.1, 5 - (time.monotonic() - start)))

    def test_socket_never_appears(self):
        """A daemon that never creates its socket: an error naming it."""
        bin_dir = os.path.join(self.dir, "bin")
        os.mkdir(bin_dir)
        for name in ("starling-node", "starling-coordinator"):
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write("#!/bin/sh\necho \"fake %s started\"\n"
                        "exec sleep 300\n" % name)
            os.chmod(path, 0o755)
        rc, _, err, seconds = self.launch(
            "-np", "2", "--nodes", "2", "--timeout", "2", "--bin_dir",
            bin_dir, "--log_dir", self.log_dir, "/bin/true")
        self.assertEqual(rc, 1, err)
        self.assertLess(seconds, 12)
        self.assertRegex(err, r"node0 did not create its worker socket .*"
                         r"within 2s \(--timeout\)")
        # The log tails come with the error.
        self.assertIn("fake starling-node started", err)
        pids = read_pids(os.path.join(self.log_dir, "pids"))
        self.assertEqual(sorted(pids), ["coordinator", "node0", "node1"])
        self.assert_all_gone(pids.values(), timeout_s=1)

    def test_daemon_death_is_reported(self):
        """A daemon dying under running workers stops the job, named."""
        worker = 'echo $$ > %s/w$STARLING_RANK.pid; sleep 300' % self.dir
        with open(os.path.join(self.dir, "err"), "w") as err:
            proc = subprocess.Popen(
                [LAUNCHER, "-np", "2", "--log_dir", self.log_dir,
                 "/bin/sh", "-c", worker],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err)
        self.started.append(proc)
        pid_files = [os.path.join(self.dir, "w%d.pid" % r) for r in range(2)]
        wait_until(lambda: all(os.path.exists(p) and os.path.getsize(p)
                               for p in pid_files), 30, "the workers")
        pids = read_pids(os.path.join(self.log_dir, "pids"))
        os.kill(pids["node0"], signal.SIGKILL)
        rc = proc.wait(timeout=10)
        self.assertNotEqual(rc, 0)
        with open(os.path.join(self.dir, "err")) as f:
            message = f.read()
        self.assertIn("node0 (pid %d) exited with signal 9" % pids["node0"],
                      message)
        self.assert_all_gone(list(pids.values()), timeout_s=1)

    def test_help_lists_flags(self):
        """--help names every flag with its default."""
        rc, out, _, _ = self.launch("--help", timeout=30)
        self.assertEqual(rc, 0)
        for flag in ("-np", "--nodes", "--attach", "--mode", "--optimizer",
                     "--learning_rate", "--staleness", "--epochs",
                     "--partitions_per_epoch", "--collective_timeout",
                     "--parameter_count", "--worker_grace", "--bucket_bytes",
                     "--log_level", "--metrics", "--bin_dir", "--log_dir",
                     "--timeout", "--failure_grace", "--quiet"):
            self.assertIn(flag, out)
        self.assertIn("default: sync_sgd", out)

    def test_np_not_divisible(self):
        """-np 3 --nodes 2 is refused with a message saying why."""
        rc, _, err, _ = self.launch("-np", "3", "--nodes", "2", "/bin/true",
                                    timeout=30)
        self.assertEqual(rc, 2)
        self.assertIn("not divisible", err)

    def test_missing_command_exits_127(self):
        """A worker command that does not exist: 127, as in a shell."""
        rc, _, err, _ = self.launch("-np", "1", "--log_dir", self.log_dir,
                                    os.path.join(self.dir, "no-such-command"))
        self.assertEqual(rc, 127)
        self.assertIn("cannot start worker 0", err)
        pids = read_pids(os.path.join(self.log_dir, "pids"))
        self.assert_all_gone(pids.values(), timeout_s=1)

    def test_command_arguments_pass_through(self):
        """Flags after the command belong to the command."""
        rc, out, err, _ = self.launch("-np", "1", "--quiet", "/bin/echo",
                                      "--nodes", "7", "-np", "--", "x")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "[0] --nodes 7 -np -- x\n")

    def test_attach_starts_only_workers(self):
        """--attach s0,s1: no coordinator or daemons, workers on them."""
        port, *node_ports = free_ports(5)
        sockets = [os.path.join(self.dir, "n%d.sock" % d) for d in range(2)]
        services = [subprocess.Popen(
            [COORDINATOR_BIN, "--job_id=attach", "--expected_nodes=2",
             "--listen=127.0.0.1:%d" % port, "--metrics_port=0",
             "--optimizer=none", "--log_level=warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)]
        for d in range(2):
            services.append(subprocess.Popen(
                [NODE_BIN, "--coordinator=127.0.0.1:%d" % port,
                 "--job_id=attach", "--hostname=node%d" % d,
                 "--data_port=%d" % node_ports[2 * d],
                 "--admin_port=%d" % node_ports[2 * d + 1],
                 "--metrics_port=0", "--worker_socket=" + sockets[d],
                 "--local_workers=1", "--log_level=warning"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        self.started.extend(services)
        rc, out, err, _ = self.launch(
            "--attach", ",".join(sockets), "-np", "2", "--quiet",
            "--log_dir", self.log_dir, "/bin/sh", "-c",
            'echo "$STARLING_RANK $STARLING_NODE_RANK $STARLING_WORKER_INDEX '
            '$STARLING_SOCKET $STARLING_NODES $STARLING_LOCAL_SIZE"')
        self.assertEqual(rc, 0, err)
        self.assertEqual(sorted(out.splitlines()),
                         ["[0] 0 0 0 %s 2 1" % sockets[0],
                          "[1] 1 1 0 %s 2 1" % sockets[1]])
        self.assertEqual(sorted(read_pids(
            os.path.join(self.log_dir, "pids"))), ["worker0", "worker1"])
        # The attached daemons are not ours to stop.
        self.assertTrue(all(p.poll() is None for p in services))
        for p in services:
            p.terminate()


if __name__ == "__main__":
    unittest.main(verbosity=2)
