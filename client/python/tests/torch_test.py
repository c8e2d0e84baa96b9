"""starling.torch end to end: starling-run starts a coordinator, 2 daemons
and 4 workers (torch_worker.py CASE) per test, on loopback.

    /usr/bin/python3 torch_test.py [unittest arguments, e.g. SyncTest]

Run by Bazel (//client/python:torch_sync_test, :torch_async_test) with
starling-run from the runfiles; by hand, set STARLING_RUN to its path.
"""

import os
import re
import socket
import subprocess
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")


def _starling_run():
    if os.environ.get("STARLING_RUN"):
        return os.environ["STARLING_RUN"]
    root = os.environ.get("TEST_SRCDIR")
    if root:
        return os.path.join(root, "starling", "client", "python",
                            "starling-run")
    return os.path.join(HERE, "..", "..", "..", "bazel-bin", "client",
                        "python", "starling-run")


def run(case, flags=(), args=(), env=None, expect_rc=0):
    """Runs CASE on 4 workers over 2 daemons; returns {rank: [lines]}."""
    command = [_starling_run(), "-np", "4", "--nodes", "2", "--quiet"]
    command += list(flags)
    command += ["/usr/bin/python3", WORKER, case] + list(args)
    full_env = dict(os.environ)
    full_env.update(env or {})
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=240,
                            env=full_env)
    if result.returncode != expect_rc:
        raise AssertionError("%s exited %d (expected %d):\n%s" %
                             (" ".join(command), result.returncode, expect_rc,
                              result.stdout[-6000:]))
    return lines_by_rank(result.stdout)


def lines_by_rank(output):
    """{rank: [lines]} from starling-run's `[rank] text` lines."""
    lines = {}
    for line in output.splitlines():
        match = re.match(r"\[(\d+)\] (.*)", line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def values(lines, key):
    """{rank: the rest of the line starting with KEY}."""
    out = {}
    for rank, rank_lines in lines.items():
        for line in rank_lines:
            if line.startswith(key + " "):
                out[rank] = line[len(key) + 1:]
    return out


class Base(unittest.TestCase):

    def assert_same_params(self, lines):
        params = values(lines, "PARAMS")
        self.assertEqual(sorted(params), [0, 1, 2, 3], lines)
        self.assertEqual(len(set(params.values())), 1,
                         "workers ended with different parameters: %s" %
                         params)


class SyncTest(Base):

    def test_matches_single_process_worker_side(self):
        # Different random initialisations, broadcast from rank 0, SGD with
        # momentum 0.9 on 4 equal shards of a 64-sample batch: equal to one
        # process on the full batch within 2e-6 (asserted in the worker).
        lines = run("matches_single_process")
        self.assert_same_params(lines)
        self.assertIn("placement worker", values(lines, "MAXDIFF")[0])

    def test_matches_single_process_daemon_side(self):
        lines = run("matches_single_process",
                    ["--optimizer", "momentum", "--learning_rate", "0.1"])
        self.assert_same_params(lines)
        self.assertIn("placement daemon", values(lines, "MAXDIFF")[0])

    def test_staged_tensors_match_too(self):
        # STARLING_TORCH_STAGE=1: every tensor through host staging (the
        # path CUDA tensors take) gives the same parameters as zero-copy.
        for flags in ([], ["--optimizer", "momentum", "--learning_rate",
                           "0.1"]):
            direct = values(run("matches_single_process", flags), "PARAMS")
            staged = values(
                run("matches_single_process", flags,
                    env={"STARLING_TORCH_STAGE": "1"}), "PARAMS")
            self.assertEqual(direct, staged, flags)

    def test_daemon_side_sgd_matches_worker_side(self):
        import torch  # the driver runs under /usr/bin/python3 too
        with tempfile.TemporaryDirectory() as a, \
                tempfile.TemporaryDirectory() as b:
            self.assert_same_params(
                run("daemon_matches_worker", [], ["--out", a]))
            self.assert_same_params(
                run("daemon_matches_worker",
                    ["--optimizer", "sgd", "--learning_rate", "0.1"],
                    ["--out", b]))
            worker_side = torch.load(os.path.join(a, "params.0.pt"))
            daemon_side = torch.load(os.path.join(b, "params.0.pt"))
            for name, value in worker_side.items():
                diff = float((value - daemon_side[name]).abs().max())
                # Same update, float32 on both sides, other summation order.
                self.assertLessEqual(diff, 1e-6, name)

    def test_fixed_parameter_count(self):
        # small_model(): 10 x 16 + 16 + 16 x 3 + 3 = 227 parameters.
        for flags in ([], ["--optimizer", "momentum", "--learning_rate",
                           "0.1"]):
            lines = run("fixed_parameter_count",
                        flags + ["--parameter_count", "227"])
            self.assert_same_params(lines)
            self.assertEqual(len(values(lines, "BROADCAST_FIRST_ERROR")), 4)

    def test_buffers_and_parameters_without_gradient(self):
        self.assert_same_params(run("buffers_and_unused"))

    def test_model_that_differs_is_named(self):
        lines = run("model_differs")
        for key in ("BROADCAST_ERROR", "OPTIMIZER_ERROR"):
            errors = values(lines, key)
            self.assertEqual(sorted(errors), [0, 1, 2, 3], key)
            self.assertIn("shape [17", errors[1])
            for text in errors.values():
                self.assertRegex(text, r"'0\.(weight|bias)' \(tensor #0\) "
                                 r"differs across workers: 1 of 4 workers")

    def test_errors_carry_the_status_text(self):
        errors = values(run("errors"), "ALLREDUCE_ERROR")
        self.assertEqual(sorted(errors), [0, 1, 2, 3])
        self.assertIn("INVALID_ARGUMENT", errors[1])
        self.assertIn("made different collective calls", errors[1])
        self.assertIn("all_reduce (sum) of 5 float32", errors[1])

    def test_half_and_bfloat16_parameters(self):
        for dtype in ("float16", "bfloat16"):
            for flags in ([], ["--optimizer", "sgd", "--learning_rate",
                               "0.1"]):
                self.assert_same_params(
                    run("half", flags, ["--dtype", dtype]))

    def test_init_without_daemon_says_so(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(
            _starling_run() + ".runfiles", "starling",
            "client", "python")
        if os.environ.get("TEST_SRCDIR"):
            env["PYTHONPATH"] = os.path.join(os.environ["TEST_SRCDIR"],
                                             "starling", "client", "python")
        with tempfile.TemporaryDirectory() as tmp:
            # A socket file whose daemon is gone: bound, never listened on.
            stale = os.path.join(tmp, "stale.sock")
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(stale)
            # One that accepts and never answers (a stopped or foreign
            # process), and another program's that answers in its own
            # protocol at once.
            silent = os.path.join(tmp, "silent.sock")
            silent_socket = socket.socket(socket.AF_UNIX)
            silent_socket.bind(silent)
            silent_socket.listen(4)
            http = os.path.join(tmp, "http.sock")
            http_socket = socket.socket(socket.AF_UNIX)
            http_socket.bind(http)
            http_socket.listen(4)

            def answer_http():
                # starling.init's probe connects first, then the client:
                # a few connections, each answered at once.
                for _ in range(8):
                    try:
                        conn, _ = http_socket.accept()
                    except OSError:
                        return  # closed: the test is over
                    with conn:
                        try:
                            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                            conn.recv(1 << 16)
                        except OSError:
                            pass

            server = threading.Thread(target=answer_http, daemon=True)
            server.start()
            code = ("import time\n"
                    "import starling.torch as st\n"
                    "for path in ('/nonexistent/node.sock', %r, %r, %r):\n"
                    "    start = time.monotonic()\n"
                    "    try:\n"
                    "        st.init(socket=path, connect_timeout=0.5)\n"
                    "    except st.StarlingError as e:\n"
                    "        print(e.code, e)\n"
                    "    print('TOOK %%.1f' %% (time.monotonic() - start))\n"
                    % (stale, silent, http))
            env["STARLING_TIMEOUT"] = "60"
            try:
                out = subprocess.run(["/usr/bin/python3", "-c", code],
                                     env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     timeout=60).stdout
            finally:
                silent_socket.close()
                http_socket.close()
        # Named within the connect timeout, not the 60 s of every op.
        self.assertIn("DEADLINE_EXCEEDED no hello reply within 500ms from the "
                      "process accepting connections at %s" % silent, out)
        took = [float(t) for t in re.findall(r"TOOK ([\d.]+)", out)]
        self.assertEqual(len(took), 4, out)
        self.assertLess(took[2], 10.0, out)
        self.assertIn("FAILED_PRECONDITION the process at %s is not a "
                      "Starling node daemon" % http, out)
        self.assertIn("HTTP", out)
        self.assertIn("UNAVAILABLE starling.init: no Starling node daemon is "
                      "running at /nonexistent/node.sock (the socket does not "
                      "exist; waited 0.5 s)", out)
        self.assertIn("running at %s (the socket exists but nothing accepts "
                      "on it (Connection refused)" % stale, out)
        self.assertIn("starling-run", out)


class AsyncTest(Base):
    # An MLP on 12,000 Fashion-MNIST images, 3 epochs, 4 workers. Plain SGD:
    # momentum 0.9 with a one-step-old gradient is unstable at these rates
    # (asynchrony adds implicit momentum).

    def accuracy(self, flags, args):
        lines = run("fashion", flags, args + ["--min_accuracy", "0.78"])
        accuracy = values(lines, "ACCURACY")
        self.assertEqual(sorted(accuracy), [0, 1, 2, 3])
        return lines, accuracy[0]

    def test_worker_side_staleness_1(self):
        lines, accuracy = self.accuracy(
            ["--mode", "async_sgd", "--staleness", "1"],
            ["--lr", "0.1", "--momentum", "0"])
        self.assertIn("placement worker staleness 1", accuracy)
        # Every worker applies the same delayed mean gradient.
        self.assert_same_params(lines)

    def test_daemon_side_staleness_1(self):
        _, accuracy = self.accuracy(
            ["--mode", "async_sgd", "--staleness", "1", "--optimizer", "sgd",
             "--learning_rate", "0.1"], ["--momentum", "0"])
        self.assertIn("placement daemon staleness 1", accuracy)


if __name__ == "__main__":
    unittest.main()
