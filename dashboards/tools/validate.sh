#!/usr/bin/env bash
# Validates Starling's Grafana dashboards (dashboards/*.json):
#
#   1. npm ci in dashboards/tools if node_modules is missing (pinned by
#      package-lock.json: @grafana/schema, ts-json-schema-generator, ajv-cli)
#   2. generates a JSON Schema of the dashboard model (type Dashboard of
#      @grafana/schema's raw/dashboard/x/types.gen.d.ts) with
#      ts-json-schema-generator; additionalProperties false, so a misspelled
#      field fails; cached under node_modules/.cache/ per package versions
#   3. checks the schema is strict: broken copies of a dashboard (a misspelled
#      panel field, a wrong type, a misspelled fieldConfig field) must FAIL
#   4. validates every dashboards/*.json against it with ajv-cli
#   5. lint: uid, tags, schemaVersion >= 36, ${datasource}, title,
#      description, unit and legend on every panel
#   6. check-scrape against testdata/contract.prom (every metric of the
#      metrics contract, with its type): names and rate()-on-gauge
#   7. promtool check rules on one recording rule per query (every expr parses)
#   8. the unit tests of dashboard_queries.py
#
#   dashboards/tools/validate.sh [DASH.json...]    (default: dashboards/*.json)
#
# Needs node >= 18 with npm, promtool (Debian package prometheus) and
# /usr/bin/python3. Prints each step's time; exits non-zero on any failure.
set -uo pipefail
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DASHDIR=$(dirname "$TOOLS")
PY=/usr/bin/python3
cd "$TOOLS" || exit 2

if [[ $# -gt 0 ]]; then
  dashboards=()
  for f in "$@"; do dashboards+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
else
  dashboards=("$DASHDIR"/*.json)
fi

failed=0
t_all=$(date +%s.%N)
elapsed() { printf '%.1fs' "$(echo "$(date +%s.%N) - $1" | bc)"; }
step() { echo "=== $* ==="; t_step=$(date +%s.%N); }
ok() { echo "ok ($(elapsed "$t_step")): $*"; }
fail() { echo "FAILED ($(elapsed "$t_step")): $*"; failed=$((failed + 1)); }

for tool in node npm promtool bc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "validate.sh: $tool not found (node/npm: Debian nodejs npm; promtool: prometheus)" >&2
    exit 2
  fi
done
if (($(node -p 'process.versions.node.split(".")[0]') < 18)); then
  echo "validate.sh: node $(node --version) is too old (need >= 18)" >&2
  exit 2
fi

if [[ ! -d node_modules ]]; then
  step "npm ci (node_modules missing)"
  if npm ci --no-audit --no-fund --loglevel=error; then
    ok "npm ci"
  else
    fail "npm ci"
    exit 1
  fi
fi

step "JSON Schema of the Grafana dashboard model"
gs_version=$(node -p 'require("@grafana/schema/package.json").version')
gen_version=$(node -p 'require("ts-json-schema-generator/package.json").version')
types=node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts
cache=node_modules/.cache/starling
schema=$cache/dashboard-schema-${gs_version}-tsjsg${gen_version}.json
if [[ -s $schema ]]; then
  ok "cached $schema (@grafana/schema $gs_version)"
else
  mkdir -p "$cache"
  # --no-type-check: the .d.ts files import each other; checking them all
  # costs time and finds nothing about the Dashboard type.
  if node_modules/.bin/ts-json-schema-generator --path "$types" --type Dashboard \
      --no-type-check --expose export --jsDoc basic -o "$schema.tmp" &&
      mv "$schema.tmp" "$schema"; then
    ok "generated $schema from $types (@grafana/schema $gs_version)"
  else
    rm -f "$schema.tmp"
    fail "ts-json-schema-generator on $types"
    exit 1
  fi
fi

ajv() {
  node_modules/.bin/ajv validate -s "$schema" --spec=draft7 --strict=false \
    --all-errors --errors=text "$@"
}

step "the schema rejects broken dashboards (negative test)"
tmp=$(mktemp -d /tmp/starling-dash-validate.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if "$PY" - "${dashboards[0]}" "$tmp" <<'EOF'; then
import copy, json, sys
src, out = sys.argv[1], sys.argv[2]
base = json.load(open(src))
def first_panel(d):
    for p in d["panels"]:
        if p.get("type") != "row":
            return p
def broken(name, fn):
    d = copy.deepcopy(base)
    fn(d)
    json.dump(d, open("%s/%s.json" % (out, name), "w"))
def misspell_title(d):
    p = first_panel(d); p["titel"] = p.pop("title")
def wrong_type(d):
    d["schemaVersion"] = str(d["schemaVersion"])
def misspell_unit(d):
    p = first_panel(d); p["fieldConfig"]["defaults"]["units"] = p["fieldConfig"]["defaults"].pop("unit")
def bad_gridpos(d):
    first_panel(d)["gridPos"]["w"] = "12"
def unknown_top_level(d):
    d["refresh_interval"] = "30s"
for f in (misspell_title, wrong_type, misspell_unit, bad_gridpos, unknown_top_level):
    broken(f.__name__, f)
EOF
  bad=0
  for f in "$tmp"/*.json; do
    if ajv -d "$f" >"$f.log" 2>&1; then
      echo "  $(basename "$f" .json): VALID (the schema is too lax)"
      bad=$((bad + 1))
    else
      echo "  $(basename "$f" .json): rejected: $(grep -v ' invalid$' "$f.log" | head -c 160)"
    fi
  done
  if ((bad == 0)); then ok "every broken copy fails validation"; else fail "$bad broken copies pass"; fi
else
  fail "could not write the broken copies"
fi

step "ajv validate ${#dashboards[@]} dashboard(s)"
n_bad=0
for f in "${dashboards[@]}"; do
  if out=$(ajv -d "$f" 2>&1); then
    echo "  $out"
  else
    printf '  %s\n' "$out"
    n_bad=$((n_bad + 1))
  fi
done
if ((n_bad == 0)); then ok "all valid"; else fail "$n_bad dashboard(s) invalid"; fi

step "lint (conventions)"
if "$PY" dashboard_queries.py lint "${dashboards[@]}"; then ok lint; else fail lint; fi

step "metric names and types against the contract (testdata/contract.prom)"
if "$PY" dashboard_queries.py check-scrape testdata/contract.prom -- "${dashboards[@]}"; then
  ok check-scrape
else
  fail "check-scrape: a query uses a metric outside the contract"
fi

step "promtool check rules (every query parses)"
if "$PY" dashboard_queries.py rules -o "$tmp/rules.yml" "${dashboards[@]}" &&
    promtool check rules "$tmp/rules.yml"; then
  ok "promtool"
else
  fail "promtool check rules (rules in $tmp/rules.yml: rerun the tools to see them)"
fi

step "unit tests (dashboard_queries_test.py)"
if "$PY" dashboard_queries_test.py 2>&1 | tail -4; [[ ${PIPESTATUS[0]} -eq 0 ]]; then
  ok "unit tests"
else
  fail "unit tests"
fi

echo "=== validate.sh: $failed failed, total $(elapsed "$t_all") ==="
[[ $failed -eq 0 ]]
