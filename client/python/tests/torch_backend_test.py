"""torch.distributed's "starling" backend end to end: workers
(torch_backend_worker.py CASE) on real daemons, launched by starling-run
or, for TorchrunTest, by torchrun next to a daemon this test starts.

    /usr/bin/python3 torch_backend_test.py [unittest arguments, e.g.
        CollectivesTest]

Run by Bazel (//client/python:torch_backend_*_test); by hand after
`bazel build //client/python:starling-run`, from the repository.
The workers assert every result against their own references and print
`KEY value` lines; this file checks that every worker got there.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# starling-run's helpers (free_ports) sit one folder up; torch_test's
# parsing of the workers' `[rank] text` lines beside this file.
sys.path.insert(0, os.path.dirname(HERE))
from starling_run_util import free_ports  # noqa: E402
from torch_test import lines_by_rank, values  # noqa: E402
WORKER = os.path.join(HERE, "torch_backend_worker.py")


def runfiles_root():
    """<runfiles>/starling: Bazel's test runfiles, or else the repository's
    bazel-bin runfiles tree of starling-run (by hand)."""
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        return os.path.join(srcdir, "starling")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    return os.path.join(repo, "bazel-bin", "client", "python",
                        "starling-run.runfiles", "starling")


RUNFILES = runfiles_root()
LAUNCHER = os.path.join(RUNFILES, "client", "python", "starling-run")
PACKAGE = os.path.join(RUNFILES, "client", "python")
NODE_BIN = os.path.join(RUNFILES, "server", "node", "starling-node")
COORDINATOR_BIN = os.path.join(RUNFILES, "server", "coordinator",
                               "starling-coordinator")
RUN_TIMEOUT_S = 120


def launch(case, np, nodes, flags=(), args=(), env=None):
    """Runs CASE on np workers over `nodes` daemons; returns {rank:
    [lines]} after checking that every worker exited 0."""
    command = [LAUNCHER, "-np", str(np), "--nodes", str(nodes), "--quiet"]
    command += list(flags) + ["/usr/bin/python3", WORKER, case] + list(args)
    full_env = dict(os.environ)
    full_env.update(env or {})
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            timeout=RUN_TIMEOUT_S, env=full_env)
    if result.returncode != 0:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(command),
                                                    result.returncode,
                                                    result.stdout[-8000:]))
    return lines_by_rank(result.stdout)


class Base(unittest.TestCase):

    def assert_checks(self, lines, np):
        """Every worker ran its checks to the end (the same number where
        the case is symmetric)."""
        checks = values(lines, "CHECKS")
        self.assertEqual(sorted(checks), list(range(np)), lines)
        return {rank: int(n) for rank, n in checks.items()}


class CollectivesTest(Base):
    """Every collective, dtype and operator against references, on 1x1,
    2x2 and 3x1 workers (daemons x local workers)."""

    def test_one_worker(self):
        checks = self.assert_checks(launch("collectives", 1, 1), 1)
        self.assertGreater(checks[0], 500)

    def test_two_daemons_of_two_workers(self):
        checks = self.assert_checks(launch("collectives", 4, 2), 4)
        self.assertEqual(len(set(checks.values())), 1, checks)

    def test_three_daemons_file_init_ranks_unlike_slots(self):
        # file:// rendezvous, torch rank = 2 - slot: results still follow
        # torch's ranks (the worker checks slot_of_rank too).
        with tempfile.TemporaryDirectory() as tmp:
            lines = launch("collectives", 3, 3,
                           args=["--init", "file:" + os.path.join(tmp, "store"),
                                 "--reverse_ranks"])
        checks = self.assert_checks(lines, 3)
        self.assertEqual(len(set(checks.values())), 1, checks)


class TrainingTest(Base):
    """DDP (plain, no_sync, find_unused_parameters, static_graph,
    fp16_compress_hook) and ZeroRedundancyOptimizer on 4 workers over 2
    daemons equal single-process training on the same objective (bounds
    argued in the worker: 6e-5; 0.016 with float16 gradients)."""

    def test_ddp_and_zero_match_single_process(self):
        lines = launch("training", 4, 2)
        self.assert_checks(lines, 4)
        for variant in ("plain", "no_sync", "find_unused_parameters",
                        "static_graph", "fp16_compress_hook"):
            diffs = values(lines, "DDP " + variant)
            self.assertEqual(sorted(diffs), [0, 1, 2, 3], variant)
        self.assertEqual(sorted(values(lines, "ZERO")), [0, 1, 2, 3])


class ErrorsTest(Base):

    def test_errors_name_the_op_on_every_worker(self):
        lines = launch("errors", 4, 2)
        self.assert_checks(lines, 4)
        mismatch = values(lines, "MISMATCH")
        self.assertEqual(sorted(mismatch), [0, 1, 2, 3], lines)
        for rank, text in mismatch.items():
            # The daemons' text, naming both calls, on every worker.
            self.assertIn("starling allreduce", text)
            self.assertIn("made different collective calls", text)
            self.assertIn("all_reduce (sum) of 3 float32", text)
            self.assertIn("all_reduce (sum) of 4 float32", text)
        after = values(lines, "AFTER")
        self.assertEqual(sorted(after), [0, 1, 2, 3], lines)
        for text in after.values():
            self.assertLess(float(text.split()[0]), 5.0, text)

    def test_a_worker_that_leaves_fails_the_others_in_time(self):
        # The daemons' grace for a replacement ends first: their error
        # names the worker that left.
        lines = launch("dead_rank", 4, 2, flags=["--worker_grace", "1s"],
                       env={"STARLING_TIMEOUT": "30"})
        dead = values(lines, "DEAD")
        self.assertEqual(sorted(dead), [0, 2, 3], lines)
        for text in dead.values():
            self.assertLess(float(text.split()[0]), 10.0, text)
            self.assertIn("left run", text)
            self.assertIn("worker 1", text)
        # Otherwise the backend's own bound: STARLING_TIMEOUT + 2 s.
        lines = launch("dead_rank", 4, 2, env={"STARLING_TIMEOUT": "3"})
        dead = values(lines, "DEAD")
        self.assertEqual(sorted(dead), [0, 2, 3], lines)
        for text in dead.values():
            elapsed = float(text.split()[0])
            self.assertGreaterEqual(elapsed, 4.5, text)
            self.assertLess(elapsed, 5.0 + 5.0, text)  # + scheduling slack
            self.assertIn("did not complete within 5s", text)
            self.assertIn("DEADLINE_EXCEEDED", text)


class TorchrunTest(Base):
    """torchrun --nproc_per_node 2 next to one daemon with 2 local workers
    (started here): env:// from torchrun, worker index from LOCAL_RANK."""

    def test_torchrun(self):
        tmp = tempfile.mkdtemp(prefix="starling-torchrun.", dir="/tmp")
        services = []
        try:
            port, data_port, admin_port, master_port = free_ports(4)
            sock = os.path.join(tmp, "node.sock")
            log = open(os.path.join(tmp, "services.log"), "w")
            services.append(subprocess.Popen(
                [COORDINATOR_BIN, "--job_id=torchrun", "--expected_nodes=1",
                 "--listen=127.0.0.1:%d" % port, "--metrics_port=0",
                 "--optimizer=none", "--log_level=warning"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            services.append(subprocess.Popen(
                [NODE_BIN, "--coordinator=127.0.0.1:%d" % port,
                 "--job_id=torchrun", "--hostname=node0",
                 "--data_address=127.0.0.1", "--data_port=%d" % data_port,
                 "--admin_port=%d" % admin_port, "--metrics_port=0",
                 "--worker_socket=" + sock, "--local_workers=2",
                 "--log_level=warning"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            env = dict(os.environ)
            env.pop("STARLING_WORKER_INDEX", None)
            env.update({"STARLING_SOCKET": sock, "PYTHONPATH": PACKAGE,
                        "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
            # torch 1.13's torchrun cannot parse its own default "0" for
            # --redirects and --tee under Python 3.11 (Std.from_str returns
            # None); a mapping for a local rank that does not exist means
            # the same: no redirection.
            command = ["/usr/bin/python3", "-m", "torch.distributed.run",
                       "--nnodes", "1", "--nproc_per_node", "2",
                       "--master_addr", "127.0.0.1",
                       "--master_port", str(master_port),
                       "--redirects", "9:1", "--tee", "9:1",
                       WORKER, "torchrun"]
            result = subprocess.run(command, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True,
                                    timeout=RUN_TIMEOUT_S, env=env)
            log.close()
            with open(os.path.join(tmp, "services.log")) as f:
                services_log = f.read()[-3000:]
            self.assertEqual(result.returncode, 0,
                             result.stdout[-6000:] + services_log)
            found = re.findall(r"TORCHRUN rank (\d) slot (\d) CHECKS (\d+)",
                               result.stdout)
            self.assertEqual(sorted(int(r) for r, _, _ in found), [0, 1],
                             result.stdout[-6000:])
        finally:
            for proc in services:
                proc.terminate()
            for proc in services:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
