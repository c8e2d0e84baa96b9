#!/usr/bin/python3
"""Tests of dashboard_queries.py: /usr/bin/python3 dashboards/tools/dashboard_queries_test.py

The promtool cases need `promtool` on PATH (Debian package prometheus) and
are skipped without it.
"""

import contextlib
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dashboard_queries as dq  # noqa: E402

DASHBOARDS = sorted(glob.glob(os.path.join(HERE, "..", "*.json")))
CONTRACT = os.path.join(HERE, "testdata", "contract.prom")
PROMTOOL = shutil.which("promtool")

SCRAPE = """\
# HELP starling_node_steps_total Steps.
# TYPE starling_node_steps_total counter
starling_node_steps_total 12
# HELP starling_node_group_size Daemons.
# TYPE starling_node_group_size gauge
starling_node_group_size 3
# HELP starling_node_step_seconds Step time.
# TYPE starling_node_step_seconds histogram
starling_node_step_seconds_bucket{le="0.1"} 1
starling_node_step_seconds_bucket{le="+Inf"} 2
starling_node_step_seconds_sum 0.3
starling_node_step_seconds_count 2
# HELP starling_coordinator_loss Loss, only set on errors.
# TYPE starling_coordinator_loss gauge
"""


def dashboard(*panels):
    """A minimal dashboard; each panel is (title, [expr, ...])."""
    out = []
    for i, (title, exprs) in enumerate(panels):
        out.append({
            "type": "timeseries", "id": i + 1, "title": title, "description": "d",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": "s"}, "overrides": []},
            "targets": [{"refId": chr(65 + j), "expr": e, "legendFormat": "{{instance}}",
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, e in enumerate(exprs)]})
    return {"uid": "t", "title": "T", "tags": ["starling"], "schemaVersion": 39,
            "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
            "templating": {"list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {"name": "job", "type": "query"}, {"name": "instance", "type": "query"}]},
            "panels": [{"type": "row", "id": 100, "title": "Row", "collapsed": True,
                        "panels": out}]}


class TempFiles(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dashq-test.")
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, content):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_main(self, *argv):
        out = io.StringIO()
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = dq.main(list(argv))
            except SystemExit as e:
                rc = e.code
        return rc, out.getvalue() + err.getvalue()


class MetricNamesTest(unittest.TestCase):
    def test_histogram_quantile(self):
        self.assertEqual(
            dq.metric_names('histogram_quantile(0.9, sum by (le, instance) '
                            '(rate(starling_node_step_seconds_bucket{job=~"$job", '
                            'le!="+Inf"}[$__rate_interval])))'),
            ["starling_node_step_seconds_bucket"])

    def test_skips_functions_keywords_and_label_lists(self):
        expr = ('sum without (phase) (rate(a_total{x="y"}[5m] offset 1h)) / on(instance) '
                'group_left(rank, state) max by (instance) (b) > bool 0 '
                'unless count(c) by (job) or topk(3, d) and vector(1) * Inf')
        self.assertEqual(dq.metric_names(expr), ["a_total", "b", "c", "d"])

    def test_name_matcher_subquery_and_colons(self):
        self.assertEqual(
            dq.metric_names('max_over_time({__name__="x_seconds", job="j"}[10m:1m]) + '
                            'job:rate5m:sum @ 100'),
            ["x_seconds", "job:rate5m:sum"])

    def test_aggregation_name_as_metric_is_kept_only_without_by(self):
        self.assertEqual(dq.metric_names("count(sum) by (le)"), ["sum"])

    def test_unbalanced_expr_raises(self):
        with self.assertRaises(dq.PromQLError):
            dq.metric_names("rate(x[5m]")
        with self.assertRaises(dq.PromQLError):
            dq.metric_names("x{a='b'")

    def test_function_context(self):
        uses = dq.metric_uses("histogram_quantile(0.5, sum by (le) (rate(h_bucket[1m]))) + g")
        self.assertEqual(uses[0].function, "rate")
        self.assertEqual(uses[0].functions, ["rate", "sum", "histogram_quantile"])
        self.assertIsNone(uses[1].function)

    def test_family(self):
        self.assertEqual(dq.family_of("a_seconds_bucket"), "a_seconds")
        self.assertEqual(dq.family_of("a_total"), "a_total")


class VariablesTest(unittest.TestCase):
    def test_standins(self):
        self.assertEqual(
            dq.substitute_variables('rate(x{job=~"$job", i=~"${instance:regex}", '
                                    'r=~"[[rank]]"}[$__rate_interval])'),
            'rate(x{job=~".*", i=~".*", r=~".*"}[5m])')
        self.assertEqual(dq.substitute_variables("increase(x[$__range]) / $__range_s"),
                         "increase(x[1h]) / 3600")
        self.assertEqual(dq.substitute_variables("topk($k, avg_over_time(x[${window}]))"),
                         "topk(1, avg_over_time(x[5m]))")
        self.assertEqual(dq.substitute_variables("x[$__interval:$step]"), "x[1m:5m]")

    def test_dollar_inside_a_regex_is_only_replaced_for_names(self):
        self.assertEqual(dq.substitute_variables('x{a=~"b$"}'), 'x{a=~"b$"}')


class CheckScrapeTest(TempFiles):
    def test_catches_missing_metric_and_names_the_panel(self):
        dash = self.write("d.json", dashboard(
            ("Steps", ['rate(starling_node_steps_total{job=~"$job"}[$__rate_interval])']),
            ("Typo", ['rate(starling_node_stepz_total[5m])', 'up{job=~"$job"}'])))
        scrape = self.write("s.prom", SCRAPE)
        rc, out = self.run_main("check-scrape", scrape, "--", dash)
        self.assertEqual(rc, 1, out)
        self.assertIn("panel 'Typo'", out)
        self.assertIn("metric starling_node_stepz_total is in no scrape file", out)
        self.assertNotIn("panel 'Steps'", out)
        self.assertNotIn("metric up ", out)

    def test_passes_with_histogram_series_and_several_scrapes(self):
        dash = self.write("d.json", dashboard(
            ("Step time", [dq_q("starling_node_step_seconds"),
                           "rate(starling_node_step_seconds_sum[5m]) / "
                           "rate(starling_node_step_seconds_count[5m])"]),
            ("Group", ["starling_node_group_size", "starling_other"])))
        scrape = self.write("s.prom", SCRAPE)
        other = self.write("o.prom", "starling_other 1\n")
        rc, out = self.run_main("check-scrape", scrape, other, "--", dash)
        self.assertEqual(rc, 0, out)
        # Without the second file the panel is reported.
        rc, out = self.run_main("check-scrape", scrape, "--", dash)
        self.assertEqual(rc, 1, out)
        self.assertIn("panel 'Group'", out)

    def test_declared_family_without_samples(self):
        dash = self.write("d.json", dashboard(("Loss", ["starling_coordinator_loss"])))
        scrape = self.write("s.prom", SCRAPE)
        self.assertEqual(self.run_main("check-scrape", scrape, "--", dash)[0], 0)
        rc, out = self.run_main("check-scrape", "--require-samples", scrape, "--", dash)
        self.assertEqual(rc, 1, out)

    def test_rate_over_gauge_and_quantile_over_non_bucket(self):
        dash = self.write("d.json", dashboard(
            ("Rate of gauge", ["rate(starling_node_group_size[5m])"]),
            ("Quantile of sum", ["histogram_quantile(0.9, rate(starling_node_step_seconds_sum[5m]))"])))
        scrape = self.write("s.prom", SCRAPE)
        rc, out = self.run_main("check-scrape", scrape, "--", dash)
        self.assertEqual(rc, 1, out)
        self.assertIn("rate() over starling_node_group_size, a gauge", out)
        self.assertIn("histogram_quantile() over starling_node_step_seconds_sum", out)

    def test_usage_errors(self):
        self.assertEqual(self.run_main("check-scrape", "a.prom")[0], 2)
        self.assertEqual(self.run_main("check-scrape", "--", "d.json")[0], 2)

    def test_real_dashboards_against_the_contract(self):
        rc, out = self.run_main("check-scrape", CONTRACT, "--", *DASHBOARDS)
        self.assertEqual(rc, 0, out)


def dq_q(metric):
    return ("histogram_quantile(0.9, sum by (le) (rate(%s_bucket{job=~\"$job\"}"
            "[$__rate_interval])))" % metric)


class CliTest(TempFiles):
    def test_exprs_lists_file_title_and_expr(self):
        dash = self.write("d.json", dashboard(("Steps", ["rate(a_total[5m])", "b"])))
        rc, out = self.run_main("exprs", dash)
        self.assertEqual(rc, 0)
        self.assertEqual(out.splitlines(), [
            "%s\tSteps\tA\trate(a_total[5m])" % dash, "%s\tSteps\tB\tb" % dash])

    def test_metrics_families(self):
        dash = self.write("d.json", dashboard(("Step", [dq_q("h_seconds"), "h_seconds_count"])))
        rc, out = self.run_main("metrics", "--families", "--unique", dash)
        self.assertEqual((rc, out), (0, "h_seconds\n"))

    def test_lint_real_dashboards_and_a_bad_one(self):
        rc, out = self.run_main("lint", *DASHBOARDS)
        self.assertEqual(rc, 0, out)
        bad = dashboard(("No unit", ["a"]))
        bad["panels"][0]["panels"][0]["fieldConfig"]["defaults"] = {}
        bad["panels"][0]["panels"][0]["description"] = ""
        bad["tags"] = []
        rc, out = self.run_main("lint", self.write("bad.json", bad))
        self.assertEqual(rc, 1)
        self.assertIn("no unit", out)
        self.assertIn("no description", out)
        self.assertIn("tags lack", out)

    def test_every_contract_metric_is_charted(self):
        # Every metric of the contract except the coordinator's error-only ones.
        scrape = dq.Scrape()
        scrape.add_file(CONTRACT)
        error_only = {"starling_coordinator_step_duration_seconds",
                      "starling_coordinator_compute_seconds_total",
                      "starling_coordinator_communication_seconds_total",
                      "starling_coordinator_loss", "starling_coordinator_step_errors_total"}
        used = set()
        for q in dq.all_queries(DASHBOARDS):
            used.update(dq.family_of(n) for n in dq.metric_names(q.expr))
        self.assertEqual(set(scrape.declared) - error_only - used, set())
        self.assertEqual(used & error_only, set())


@unittest.skipUnless(PROMTOOL, "promtool not on PATH")
class PromtoolTest(TempFiles):
    def check_rules(self, *dashboards):
        rules = os.path.join(self.dir, "rules.yml")
        rc, out = self.run_main("rules", "-o", rules, *dashboards)
        self.assertEqual(rc, 0, out)
        proc = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True,
                              text=True, timeout=60)
        with open(rules) as f:
            return proc.returncode, proc.stdout + proc.stderr, f.read()

    def test_real_dashboards_parse(self):
        rc, out, text = self.check_rules(*DASHBOARDS)
        self.assertEqual(rc, 0, out)
        n = len(dq.all_queries(DASHBOARDS))
        self.assertIn("SUCCESS: %d rules found" % n, out)
        self.assertNotIn("$", text)

    def test_syntax_error_is_caught(self):
        dash = self.write("d.json", dashboard(
            ("Good", ['sum by (le) (rate(a_bucket{job=~"$job"}[$__rate_interval]))']),
            ("Bad", ["rate(starling_node_steps_total)"])))  # rate needs a range
        rc, out, _ = self.check_rules(dash)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("range vector", out)

    def test_variables_are_substituted(self):
        dash = self.write("d.json", dashboard(("Vars", [
            'increase(a_total{i=~"${instance:regex}", j=~"[[job]]"}[$__range]) / $__range_s',
            'avg_over_time(b[$__interval:$__interval]) * on() group_left() topk($k, c)'])))
        rc, out, text = self.check_rules(dash)
        self.assertEqual(rc, 0, out + text)
        self.assertIn('increase(a_total{i=~\\".*\\", j=~\\".*\\"}[1h]) / 3600', text)


if __name__ == "__main__":
    unittest.main()
