"""Horovod's PyTorch API on Starling: starling-run starts a coordinator, 2
daemons and 4 workers (horovod_worker.py CASE) per test, on loopback; each
worker asserts its results against a reference it computes itself.

    /usr/bin/python3 horovod_api_test.py [unittest arguments]

Run by Bazel (//client/python:horovod_api_test) with starling-run from the
runfiles; by hand, set STARLING_RUN to its path.
"""

import os
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "horovod_worker.py")


def _starling_run():
    if os.environ.get("STARLING_RUN"):
        return os.environ["STARLING_RUN"]
    return os.path.join(os.environ["TEST_SRCDIR"], "starling", "client",
                        "python", "starling-run")


class HorovodApiTest(unittest.TestCase):

    def run_case(self, case):
        command = [_starling_run(), "-np", "4", "--nodes", "2", "--quiet",
                   "/usr/bin/python3", WORKER, case]
        result = subprocess.run(command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                timeout=240)
        self.assertEqual(result.returncode, 0,
                         "%s:\n%s" % (" ".join(command), result.stdout[-6000:]))
        ok = [line for line in result.stdout.splitlines()
              if line.endswith("OK " + case)]
        self.assertEqual(len(ok), 4, result.stdout[-6000:])

    def test_collectives(self):
        self.run_case("api")

    def test_distributed_optimizer_options(self):
        self.run_case("optimizer")

    def test_sync_batch_norm(self):
        self.run_case("sync_batch_norm")


if __name__ == "__main__":
    unittest.main()
