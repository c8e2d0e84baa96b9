"""peerbench_repeats.py: repeated runs combine into the median of the runs'
medians with its range, and a difference is called only where the ranges
do not overlap."""
import csv
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerbench_repeats  # noqa: E402

HEADER = ("peer,algorithm,N,S,median_s,algbw,busbw,lower_bound_s,"
          "ratio_to_bound,rank0_median_s,min_s,iters,cpu_util,ok,rate,delay")


def run(rows):
    """One peerbench run: (peer, algorithm, N, S, median_s, cpu, ok)."""
    lines = [HEADER]
    for peer, alg, n, s, median, cpu, ok in rows:
        lines.append("%s,%s,%d,%d,%s,1,1,0.048,1,%s,%s,20,%s,%d,1gbit,0" % (
            peer, alg, n, s, median, median, median, cpu, ok))
    return list(csv.DictReader(io.StringIO("\n".join(lines) + "\n")))


class CombineTest(unittest.TestCase):
    def test_the_median_of_the_runs_medians_with_its_range(self):
        runs = [run([("gloo", "ring", 4, 1000000, m, 0.5, 1)])
                for m in ("0.060", "0.050", "0.070")]
        columns, rows = peerbench_repeats.combine(runs)
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertEqual(float(r["median_s"]), 0.060)
        self.assertEqual(float(r["median_lo_s"]), 0.050)
        self.assertEqual(float(r["median_hi_s"]), 0.070)
        self.assertAlmostEqual(float(r["spread"]), 0.020 / 0.060, places=3)
        self.assertEqual(r["runs"], "3")
        self.assertEqual(r["iters"], "60")
        self.assertAlmostEqual(float(r["ratio_to_bound"]), 0.060 / 0.048, places=3)
        # peerbench's columns first, so its summarize.py reads the file.
        self.assertEqual(columns[:16], HEADER.split(","))

    def test_a_run_that_failed_its_check_marks_the_row(self):
        runs = [run([("starling", "auto", 4, 1000, "0.001", 0.1, 1)]),
                run([("starling", "auto", 4, 1000, "0.002", 0.1, 0)])]
        _, rows = peerbench_repeats.combine(runs)
        self.assertEqual(rows[0]["ok"], "0")
        self.assertEqual(rows[0]["runs"], "1")  # the checked run only


class VerdictTest(unittest.TestCase):
    def rows(self, starling, peer):
        runs = [run([("starling", "auto:ring", 8, 100000, s, 0.3, 1),
                     ("mpi", "ring", 8, 100000, p, 1.0, 1)])
                for s, p in zip(starling, peer)]
        return peerbench_repeats.combine(runs)[1]

    def test_overlapping_ranges_are_noise(self):
        lines = peerbench_repeats.table(self.rows(("0.010", "0.012", "0.011"),
                                                  ("0.011", "0.013", "0.0105")))
        self.assertIn("within noise", lines[2])

    def test_disjoint_ranges_are_a_difference(self):
        lines = peerbench_repeats.table(self.rows(("0.010", "0.0101", "0.0102"),
                                                  ("0.012", "0.013", "0.0125")))
        self.assertIn("| ahead |", lines[2])
        self.assertIn("mpi/ring", lines[2])
        self.assertIn("auto:ring", lines[2])
        lines = peerbench_repeats.table(self.rows(("0.014", "0.015", "0.016"),
                                                  ("0.012", "0.013", "0.0125")))
        self.assertIn("| behind |", lines[2])

    def test_auto_against_the_best_named_algorithm(self):
        runs = [run([("starling", "auto:butterfly", 4, 1000, a, 0.9, 1),
                     ("starling", "butterfly", 4, 1000, a, 0.9, 1),
                     ("starling", "tree", 4, 1000, t, 0.9, 1)])
                for a, t in (("0.0008", "0.0006"), ("0.0009", "0.00065"),
                             ("0.00085", "0.0007"))]
        lines = peerbench_repeats.auto_table(peerbench_repeats.combine(runs)[1])
        self.assertEqual(len(lines), 3)
        self.assertIn("auto:butterfly", lines[2])
        self.assertIn("| tree |", lines[2])
        self.assertIn("| behind |", lines[2])

    def test_it_writes_and_prints(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for k, m in enumerate(("0.010", "0.011")):
                p = os.path.join(d, "run%d.csv" % k)
                with open(p, "w") as f:
                    f.write(HEADER + "\n")
                    f.write("starling,auto,4,1000,%s,1,1,0.048,1,%s,%s,20,0.2,1,1gbit,0\n" % (m, m, m))
                    f.write("gloo,ring,4,1000,0.020,1,1,0.048,1,0.02,0.02,20,0.9,1,1gbit,0\n")
                paths.append(p)
            out = os.path.join(d, "out.csv")
            self.assertEqual(peerbench_repeats.main(["x", out] + paths), 0)
            with open(out) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(len(rows), 2)
            self.assertEqual(rows[0]["runs"], "2")


if __name__ == "__main__":
    unittest.main()
