#!/usr/bin/python3
"""Reads the PromQL queries of Grafana dashboards and checks them.

Standard library only (run it with /usr/bin/python3).

  dashboard_queries.py exprs DASH...
      every panel query: FILE, panel title, refId and expr (tab separated)
  dashboard_queries.py metrics [--families] [--unique] DASH...
      the metric names each query uses (--families: histogram/summary series
      _bucket/_sum/_count named by their family; --unique: one sorted list)
  dashboard_queries.py check-scrape [--require-samples] SCRAPE... -- DASH...
      exit 1, listing per panel, when a query uses a metric that no scrape file
      exports, applies rate()/increase()/irate() to a gauge, or gives
      histogram_quantile() something other than _bucket series. SCRAPE files
      are Prometheus text exposition (curl http://HOST:PORT/metrics > FILE).
      Series Prometheus makes itself (up, scrape_*) always count as present.
  dashboard_queries.py rules [-o FILE] DASH...
      a Prometheus rules file with one recording rule per query, Grafana
      variables replaced by stand-ins, for `promtool check rules FILE`
  dashboard_queries.py lint DASH...
      exit 1 on dashboard conventions broken: uid, title, tags ["starling"],
      schemaVersion >= 36, a ${datasource} variable used by every panel and
      query, every panel with a title, a description, a unit and queries
      with a legend

Grafana variables ($var, ${var}, ${var:fmt}, [[var]]) are replaced before
parsing: $__rate_interval by 5m, $__interval by 1m, $__range by 1h (and
$__range_s / $__range_ms by seconds / milliseconds); any other variable by a
duration (5m) inside [...] of a range or subquery, by .* inside a quoted
string (a label matcher), and by 1 elsewhere.
"""

import argparse
import json
import re
import sys

# --------------------------------------------------------------------------
# Dashboards


class Query:
    """One panel target with a PromQL expr."""

    def __init__(self, path, panel_title, ref_id, expr, panel, target):
        self.path = path
        self.panel_title = panel_title
        self.ref_id = ref_id
        self.expr = expr
        self.panel = panel
        self.target = target

    def where(self):
        return "%s: panel '%s' query %s" % (self.path, self.panel_title, self.ref_id)


def load_dashboard(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    # An export wrapped for the HTTP API ({"dashboard": {...}}) also works.
    if isinstance(data, dict) and "dashboard" in data and "panels" not in data:
        data = data["dashboard"]
    if not isinstance(data, dict):
        raise ValueError("%s: not a dashboard JSON object" % path)
    return data


def iter_panels(panels):
    """Every panel, rows' nested panels included."""
    for p in panels or []:
        if not isinstance(p, dict):
            continue
        yield p
        for sub in iter_panels(p.get("panels")):
            yield sub


def queries_of(path, data=None):
    if data is None:
        data = load_dashboard(path)
    out = []
    for p in iter_panels(data.get("panels")):
        for t in p.get("targets") or []:
            if isinstance(t, dict) and isinstance(t.get("expr"), str) and t["expr"].strip():
                if t.get("hide"):
                    continue
                out.append(Query(path, p.get("title") or "(untitled)",
                                 t.get("refId", "?"), t["expr"], p, t))
    return out


def all_queries(paths):
    out = []
    for path in paths:
        out.extend(queries_of(path))
    return out


# --------------------------------------------------------------------------
# Grafana variables

GLOBAL_STANDINS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
    "__interval_ms": "60000",
    "__rate_interval_ms": "300000",
}

_VAR_RE = re.compile(
    r"\$\{(?P<braced>[A-Za-z0-9_]+)(?::[^}]*)?\}"  # ${var} / ${var:format}
    r"|\[\[(?P<old>[A-Za-z0-9_]+)(?::[^\]]*)?\]\]"  # [[var]] / [[var:format]]
    r"|\$(?P<plain>[A-Za-z0-9_]+)")  # $var


def substitute_variables(expr):
    """Replaces Grafana variables by stand-ins that keep the PromQL valid."""
    out = []
    pos = 0
    quote = None  # the open quote character, if inside a string
    bracket = 0  # depth of [...] (range / subquery selectors)
    i = 0
    n = len(expr)
    while i < n:
        c = expr[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 2
                continue
            if c == quote:
                quote = None
                i += 1
                continue
        else:
            if c in "\"'`":
                quote = c
                i += 1
                continue
            if c == "[" and not expr.startswith("[[", i):
                bracket += 1
            elif c == "]" and bracket:
                bracket -= 1
        if c in "$[":
            m = _VAR_RE.match(expr, i)
            if m:
                name = m.group("braced") or m.group("old") or m.group("plain")
                if name in GLOBAL_STANDINS:
                    rep = GLOBAL_STANDINS[name]
                elif quote:
                    rep = ".*"
                elif bracket:
                    rep = "5m"
                else:
                    rep = "1"
                out.append(expr[pos:i])
                out.append(rep)
                i = m.end()
                pos = i
                continue
        i += 1
    out.append(expr[pos:])
    return "".join(out)


# --------------------------------------------------------------------------
# PromQL tokens

FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan",
    "atanh", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "cos", "cosh", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "deg", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "double_exponential_smoothing",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time",
    "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute",
    "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad",
    "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label",
    "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
    "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
    "start", "end", "info",
}
AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "and", "or", "unless", "offset", "atan2", "inf", "nan"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:[0-9]+(?:ms|s|m|h|d|w|y))+(?![A-Za-z0-9_]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>(){}\[\],:@])
""", re.VERBOSE)


class PromQLError(ValueError):
    pass


def tokenize(expr):
    tokens = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if not m:
            raise PromQLError("unexpected character %r at offset %d" % (expr[pos], pos))
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class MetricUse:
    """A metric name in a query and the function call it sits in directly."""

    def __init__(self, name, functions):
        self.name = name
        # Enclosing function and aggregation calls, innermost first.
        self.functions = functions
        self.function = functions[0] if functions else None


def metric_uses(expr):
    """Metric names an expr selects, in order, with their enclosing function.

    An identifier is a metric name unless it is followed by '(' (a function or
    aggregation), is a keyword, an aggregation followed by by/without, a label
    name inside {...} or a label list of by/without/on/ignoring/group_*(...).
    A {__name__="x"} matcher names metric x.
    """
    tokens = tokenize(substitute_variables(expr))
    uses = []
    # Stack of open brackets: ('(', function or None), ('{', None), ('[', None),
    # ('labels', None) for the label list after by/without/on/...
    stack = []
    i = 0
    n = len(tokens)

    def current_function():
        return [fn for kind, fn in reversed(stack) if kind == "(" and fn is not None]

    while i < n:
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < n else (None, None)
        in_braces = bool(stack) and stack[-1][0] == "{"
        in_labels = bool(stack) and stack[-1][0] == "labels"
        if kind == "op":
            if text == "(":
                fn = None
                if i > 0 and tokens[i - 1][0] == "ident":
                    prev = tokens[i - 1][1]
                    if prev in LABEL_LIST_KEYWORDS:
                        stack.append(("labels", None))
                        i += 1
                        continue
                    fn = prev
                elif i > 0 and tokens[i - 1] == ("op", ")"):
                    # `sum by (x) (` : the aggregation named before by/without.
                    fn = _aggregation_before_label_list(tokens, i - 1)
                stack.append(("(", fn))
            elif text in "{[":
                if text == "{" and in_braces:
                    raise PromQLError("nested '{'")
                stack.append((text, None))
            elif text in ")}]":
                want = {")": ("(", "labels"), "}": ("{",), "]": ("[",)}[text]
                if not stack or stack[-1][0] not in want:
                    raise PromQLError("unbalanced '%s'" % text)
                stack.pop()
            i += 1
            continue
        if kind == "ident":
            if in_labels:
                i += 1
                continue
            if in_braces:
                # label name, matcher, value
                if (text == "__name__" and i + 2 < n and tokens[i + 1][0] == "op"
                        and tokens[i + 1][1] == "=" and tokens[i + 2][0] == "string"):
                    uses.append(MetricUse(_unquote(tokens[i + 2][1]), current_function()))
                i += 1
                continue
            if nxt == ("op", "("):
                i += 1
                continue
            if text in KEYWORDS:
                i += 1
                continue
            if text in AGGREGATIONS and nxt[0] == "ident" and nxt[1] in ("by", "without"):
                i += 1
                continue
            if text.lower() in ("inf", "nan"):
                i += 1
                continue
            uses.append(MetricUse(text, current_function()))
        i += 1
    if stack:
        raise PromQLError("unclosed '%s'" % stack[-1][0])
    return uses


def _aggregation_before_label_list(tokens, close_index):
    """For `agg by (a, b) (`, given the index of the ')' closing the label
    list, returns agg (or None)."""
    depth = 0
    j = close_index
    while j >= 0:
        if tokens[j] == ("op", ")"):
            depth += 1
        elif tokens[j] == ("op", "("):
            depth -= 1
            if depth == 0:
                break
        j -= 1
    if j >= 2 and tokens[j - 1][0] == "ident" and tokens[j - 1][1] in ("by", "without"):
        if tokens[j - 2][0] == "ident" and tokens[j - 2][1] in AGGREGATIONS:
            return tokens[j - 2][1]
    return None


def _unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return bytes(s[1:-1], "utf-8").decode("unicode_escape")


def metric_names(expr):
    seen = []
    for u in metric_uses(expr):
        if u.name not in seen:
            seen.append(u.name)
    return seen


def family_of(name):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


# --------------------------------------------------------------------------
# Scrapes

PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                     "scrape_samples_post_metric_relabeling", "scrape_series_added",
                     "scrape_timeout_seconds", "scrape_sample_limit"}

_SAMPLE_RE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)")


class Scrape:
    def __init__(self):
        self.samples = set()  # sample names with at least one line
        self.types = {}  # family -> type from # TYPE
        self.declared = set()  # families named by # HELP / # TYPE

    def add_file(self, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                if line.startswith("#"):
                    parts = line.split(None, 3)
                    if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                        self.declared.add(parts[2])
                        if parts[1] == "TYPE" and len(parts) >= 4:
                            self.types[parts[2]] = parts[3].strip()
                    continue
                m = _SAMPLE_RE.match(line)
                if m:
                    self.samples.add(m.group(1))

    def type_of(self, name):
        """(family, type) of a sample name, type None when unknown."""
        if name in self.types:
            return name, self.types[name]
        fam = family_of(name)
        if fam != name and self.types.get(fam) in ("histogram", "summary", "gaugehistogram"):
            return fam, self.types[fam]
        return name, None

    def has(self, name, require_samples):
        if name in PROMETHEUS_SERIES or name in self.samples:
            return True
        if require_samples:
            return False
        fam, typ = self.type_of(name)
        if name in self.declared:
            return True
        if fam != name and fam in self.declared:
            return not (name.endswith("_bucket") and typ == "summary")
        return False


def check_queries(queries, scrape, require_samples=False):
    """Problems per (path, panel title): {key: [message, ...]}."""
    problems = {}
    for q in queries:
        key = (q.path, q.panel_title)
        msgs = []
        try:
            uses = metric_uses(q.expr)
        except PromQLError as e:
            msgs.append("query %s does not parse: %s" % (q.ref_id, e))
            uses = []
        for u in uses:
            if not scrape.has(u.name, require_samples):
                msgs.append("query %s: metric %s is in no scrape file" % (q.ref_id, u.name))
                continue
            fam, typ = scrape.type_of(u.name)
            if u.function in COUNTER_FUNCTIONS:
                ok = typ in (None, "counter", "untyped", "unknown") or (
                    fam != u.name and typ in ("histogram", "summary"))
                if not ok:
                    msgs.append("query %s: %s() over %s, a %s (use it directly, or "
                                "delta()/deriv())" % (q.ref_id, u.function, u.name, typ))
            if "histogram_quantile" in u.functions and not (
                    u.name.endswith("_bucket") and typ in (None, "histogram")):
                msgs.append("query %s: histogram_quantile() over %s, not the _bucket "
                            "series of a histogram" % (q.ref_id, u.name))
        for m in msgs:
            if m not in problems.setdefault(key, []):
                problems[key].append(m)
    return problems


# --------------------------------------------------------------------------
# Rules file

def rules_yaml(queries):
    lines = ["# Generated by dashboards/tools/dashboard_queries.py rules: one recording",
             "# rule per dashboard query, for `promtool check rules`.",
             "groups:"]
    by_file = {}
    for q in queries:
        by_file.setdefault(q.path, []).append(q)
    for gi, (path, qs) in enumerate(by_file.items()):
        lines.append("  - name: %s" % json.dumps("dashboard %d: %s" % (gi, path)))
        lines.append("    rules:")
        for qi, q in enumerate(qs):
            slug = re.sub(r"[^a-zA-Z0-9_]+", "_", q.panel_title).strip("_").lower() or "panel"
            record = "dashboard%d:%s:q%d_%s" % (gi, slug, qi, q.ref_id.lower()
                                                  if re.match(r"^[A-Za-z0-9_]+$", q.ref_id)
                                                  else "x")
            lines.append("      - record: %s" % record)
            lines.append("        expr: %s" % json.dumps(substitute_variables(q.expr)))
            lines.append("        labels:")
            lines.append("          panel: %s" % json.dumps(q.panel_title))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Lint

def lint_dashboard(path):
    data = load_dashboard(path)
    errs = []
    for field in ("uid", "title"):
        if not data.get(field):
            errs.append("%s: no %s" % (path, field))
    if "starling" not in (data.get("tags") or []):
        errs.append("%s: tags lack \"starling\"" % path)
    if not isinstance(data.get("schemaVersion"), int) or data["schemaVersion"] < 36:
        errs.append("%s: schemaVersion %r < 36" % (path, data.get("schemaVersion")))
    if not data.get("time") or not data.get("refresh"):
        errs.append("%s: no time range or refresh" % path)
    variables = {v.get("name"): v for v in (data.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errs.append("%s: no `datasource` variable of type datasource (prometheus)" % path)
    ids = set()
    titles = set()
    for p in iter_panels(data.get("panels")):
        title = p.get("title") or ""
        where = "%s: panel %r" % (path, title or p.get("id"))
        if p.get("id") in ids:
            errs.append("%s: duplicate id %r" % (where, p.get("id")))
        ids.add(p.get("id"))
        if title and title in titles:
            errs.append("%s: duplicate title (reports name panels by title)" % where)
        titles.add(title)
        if p.get("type") == "row":
            if not title:
                errs.append("%s: row without a title" % where)
            continue
        if not title:
            errs.append("%s: no title" % where)
        if not p.get("description"):
            errs.append("%s: no description" % where)
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        if not unit:
            errs.append("%s: no unit (fieldConfig.defaults.unit)" % where)
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            errs.append("%s: panel datasource is not ${datasource}" % where)
        targets = p.get("targets") or []
        if not targets:
            errs.append("%s: no queries" % where)
        for t in targets:
            ref = t.get("refId", "?")
            if (t.get("datasource") or {}).get("uid") not in (None, "${datasource}"):
                errs.append("%s query %s: datasource is not ${datasource}" % (where, ref))
            if not t.get("expr"):
                errs.append("%s query %s: no expr" % (where, ref))
            if not t.get("legendFormat") or t.get("legendFormat") == "__auto":
                errs.append("%s query %s: no legendFormat" % (where, ref))
        for var in re.findall(r"\$\{?([A-Za-z0-9_]+)", json.dumps(targets)):
            if not var.startswith("__") and var not in variables:
                errs.append("%s: uses undefined variable $%s" % (where, var))
    return errs


# --------------------------------------------------------------------------
# CLI

def cmd_exprs(args):
    for q in all_queries(args.dashboards):
        print("%s\t%s\t%s\t%s" % (q.path, q.panel_title, q.ref_id, " ".join(q.expr.split())))
    return 0


def cmd_metrics(args):
    rc = 0
    union = set()
    for q in all_queries(args.dashboards):
        try:
            names = metric_names(q.expr)
        except PromQLError as e:
            print("%s: %s" % (q.where(), e), file=sys.stderr)
            rc = 1
            continue
        if args.families:
            names = list(dict.fromkeys(family_of(n) for n in names))
        if args.unique:
            union.update(names)
        else:
            print("%s\t%s\t%s\t%s" % (q.path, q.panel_title, q.ref_id, " ".join(names)))
    if args.unique:
        for n in sorted(union):
            print(n)
    return rc


def cmd_check_scrape(args):
    scrape = Scrape()
    for path in args.scrapes:
        scrape.add_file(path)
    queries = all_queries(args.dashboards)
    problems = check_queries(queries, scrape, args.require_samples)
    for (path, title), msgs in problems.items():
        print("%s: panel '%s':" % (path, title))
        for m in msgs:
            print("  " + m)
    n_panels = len({(q.path, q.panel_title) for q in queries})
    if problems:
        print("check-scrape: %d of %d panels query what %d scrape file(s) lack"
              % (len(problems), n_panels, len(args.scrapes)))
        return 1
    print("check-scrape: %d queries in %d panels of %d dashboard(s): every metric is in "
          "the %d scrape file(s)" % (len(queries), n_panels, len(args.dashboards),
                                     len(args.scrapes)))
    return 0


def cmd_rules(args):
    text = rules_yaml(all_queries(args.dashboards))
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_lint(args):
    errs = []
    for path in args.dashboards:
        errs.extend(lint_dashboard(path))
    for e in errs:
        print(e)
    if errs:
        return 1
    print("lint: %d dashboard(s) clean" % len(args.dashboards))
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("exprs", help="print every panel query")
    p.add_argument("dashboards", nargs="+", metavar="DASH")
    p.set_defaults(func=cmd_exprs)
    p = sub.add_parser("metrics", help="print the metric names each query uses")
    p.add_argument("--families", action="store_true",
                   help="name _bucket/_sum/_count series by their family")
    p.add_argument("--unique", action="store_true", help="one sorted list of names")
    p.add_argument("dashboards", nargs="+", metavar="DASH")
    p.set_defaults(func=cmd_metrics)
    p = sub.add_parser("check-scrape", usage="%(prog)s [--require-samples] SCRAPE... -- DASH...",
                       help="check queries against scraped /metrics text")
    p.add_argument("--require-samples", action="store_true",
                   help="a metric counts only with a sample line, not a bare # TYPE")
    p.set_defaults(func=cmd_check_scrape)
    p = sub.add_parser("rules", help="write a rules file for promtool check rules")
    p.add_argument("-o", "--output", help="file to write (default stdout)")
    p.add_argument("dashboards", nargs="+", metavar="DASH")
    p.set_defaults(func=cmd_rules)
    p = sub.add_parser("lint", help="check dashboard conventions")
    p.add_argument("dashboards", nargs="+", metavar="DASH")
    p.set_defaults(func=cmd_lint)

    if argv and argv[0] == "check-scrape":
        # SCRAPE... -- DASH... (argparse cannot split two positional lists).
        rest = argv[1:]
        flags = [a for a in rest if a == "--require-samples"]
        rest = [a for a in rest if a != "--require-samples"]
        if "-h" in rest or "--help" in rest:
            parser.parse_args(["check-scrape", "--help"])
        if "--" not in rest or rest.index("--") == 0 or rest[-1] == "--":
            print("usage: dashboard_queries.py check-scrape [--require-samples] "
                  "SCRAPE... -- DASH...", file=sys.stderr)
            return 2
        sep = rest.index("--")
        args = parser.parse_args(["check-scrape"] + flags)
        args.scrapes = rest[:sep]
        args.dashboards = rest[sep + 1:]
    else:
        args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (OSError, ValueError) as e:
        print("dashboard_queries: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
