"""starling.torch carries on when a daemon is lost mid-run: a coordinator,
3 daemons and one torch_worker.py goes_on worker per daemon on loopback;
daemon 1 is killed (SIGKILL) mid-run. The other two workers' step()
rejoins the re-formed group and completes there: both finish every step
and their on_regroup callback saw rank() and size() of the new group.
Daemon-side (the daemons own a momentum optimizer and keep buddy
replicas): in sync_sgd the workers end with the same parameters, bit for
bit; with a parameter server (each worker's pushes applied as they come)
each goes on from its own step, nothing rolled back. Worker-side (the
job's optimizer is none, the workers step momentum SGD; sync_sgd, and
async_sgd with staleness 1): the daemons hold no state, the workers take
the parameters and momentum of one that applied the newest update and
end with the same parameters, bit for bit.

    /usr/bin/python3 torch_regroup_test.py

Run by Bazel (//client/python:torch_regroup_test) with the binaries from
the runfiles.
"""

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")
STEPS = 400


def _root():
    root = os.environ.get("TEST_SRCDIR")
    if root:
        return os.path.join(root, "starling")
    return os.path.join(HERE, "..", "..", "..", "bazel-bin", "client",
                        "python", "starling-run.runfiles", "starling")


def _free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class RegroupTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="starling-regroup-")
        self.procs = []

    def tearDown(self):
        for proc in self.procs:  # only what this test started
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)

    def start(self, name, argv, env=None):
        with open(os.path.join(self.dir, name + ".out"), "w") as out, \
                open(os.path.join(self.dir, name + ".err"), "w") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        self.procs.append(proc)
        return proc

    def read(self, name, stream):
        path = os.path.join(self.dir, "%s.%s" % (name, stream))
        if not os.path.exists(path):
            return ""
        with open(path) as f:
            return f.read()

    def logs(self):
        text = []
        for name in ["coordinator", "node0", "node1", "node2", "worker0",
                     "worker1", "worker2"]:
            text.append("--- %s:\n%s" % (name, self.read(name, "err")[-3000:]))
        return "\n".join(text)

    def test_a_lost_daemon_leaves_the_run_going_on(self):
        self.lose_a_daemon("sync_sgd")

    def test_a_lost_daemon_leaves_a_parameter_server_run_going_on(self):
        self.lose_a_daemon("parameter_server")

    def test_worker_side_sync_sgd_goes_on(self):
        self.lose_a_daemon("sync_sgd", optimizer="none")

    def test_worker_side_async_sgd_goes_on(self):
        self.lose_a_daemon("async_sgd", optimizer="none",
                           extra=["--staleness=1"])

    def lose_a_daemon(self, mode, optimizer="momentum", extra=()):
        root = _root()
        coordinator = os.path.join(root, "server", "coordinator",
                                   "starling-coordinator")
        node = os.path.join(root, "server", "node", "starling-node")
        ports = _free_ports(7)
        address = "127.0.0.1:%d" % ports[0]
        self.start("coordinator", [
            coordinator, "--job_id=regroup", "--expected_nodes=3",
            "--listen=" + address, "--metrics_port=0", "--mode=" + mode,
            "--optimizer=" + optimizer, "--learning_rate=0.05",
            "--heartbeat_timeout=2s", "--collective_timeout=10s",
            "--log_level=warning"] + list(extra))
        daemons = []
        for d in range(3):
            daemons.append(self.start("node%d" % d, [
                node, "--coordinator=" + address, "--job_id=regroup",
                "--hostname=node%d" % d, "--data_address=127.0.0.1",
                "--data_port=%d" % ports[1 + 2 * d],
                "--admin_port=%d" % ports[2 + 2 * d], "--metrics_port=0",
                "--worker_socket=%s/node%d.sock" % (self.dir, d),
                "--local_workers=1", "--log_level=warning"]))
        workers = []
        for d in range(3):
            env = dict(os.environ)
            env.update({
                "STARLING_SOCKET": "%s/node%d.sock" % (self.dir, d),
                "STARLING_WORKER_INDEX": "0",
                "STARLING_TIMEOUT": "20",
                "STARLING_POOL_BYTES": str(64 << 20),
                "PYTHONPATH": os.path.join(root, "client", "python"),
            })
            workers.append(self.start("worker%d" % d, [
                "/usr/bin/python3", WORKER, "goes_on", "--steps=%d" % STEPS],
                env=env))
        # Going: every worker past step 20 (bounded).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all("STEP 20\n" in self.read("worker%d" % d, "out")
                   for d in range(3)):
                break
            for w in workers:
                self.assertIsNone(w.poll(), self.logs())
            time.sleep(0.05)
        else:
            self.fail("the run did not get going\n" + self.logs())
        daemons[1].send_signal(signal.SIGKILL)
        params = []
        for d in (0, 2):
            try:
                rc = workers[d].wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.fail("worker %d hung\n%s" % (d, self.logs()))
            out = self.read("worker%d" % d, "out")
            err = self.read("worker%d" % d, "err")
            self.assertEqual(rc, 0, "worker %d:\n%s\n%s\n%s" %
                             (d, out[-2000:], err[-3000:], self.logs()))
            # Told: logged and called back with the new group's size.
            # (run 1 was the optimizer's check that every worker holds
            # the same model; run 2 trains.)
            if optimizer == "none":
                # Every gradient the group did not apply is dropped: the
                # step in flight, and with staleness 1 the one before.
                rolled = "[012]"
                self.assertRegex(
                    err, r"rejoined run 2 at step \d+ as worker [01] of 2 "
                    r"\(2 daemons\); parameters and optimizer state from "
                    r"worker [01] \(\d+ updates applied\); %s gradient "
                    r"step\(s\) of this worker dropped" % rolled)
            else:
                rolled = "[01]" if mode == "sync_sgd" else "0"
                self.assertRegex(
                    err, r"rejoined run 2 at step \d+ as worker [01] of 2 "
                    r"\(2 daemons\); %s pushed step" % rolled)
            self.assertIn("STEPS %d size 2" % STEPS, err)
            self.assertRegex(out, r"REGROUPED Regrouped\(run_id=2, step=\d+, "
                             r"rank=[01], size=2, rolled_back=%s\)" % rolled)
            params.append(re.search(r"PARAMS (\w+)", out).group(1))
        if mode != "parameter_server":
            self.assertEqual(params[0], params[1],
                             "the workers' parameters differ\n" + self.logs())
        # (The victim's worker waits for its daemon to come back, up to its
        # timeouts; tearDown stops it.)


if __name__ == "__main__":
    unittest.main()
