#!/usr/bin/env bash
# `promtool check rules` and `promtool test rules` on Starling's alerting
# rules (deploy/prometheus/alerts.yml, alerts_test.yml). A Bazel sh_test
# (//tests/observability:alerts_test) or, from the repository root:
#   tests/observability/alerts_test.sh
set -euo pipefail
if [[ -n ${TEST_SRCDIR:-} ]]; then
  dir="$TEST_SRCDIR/${TEST_WORKSPACE:-starling}/deploy/prometheus"
else
  dir="$(cd "$(dirname "$0")/../.." && pwd)/deploy/prometheus"
fi
promtool=$(command -v promtool || echo /usr/bin/promtool)
if [[ ! -x $promtool ]]; then
  echo "FAIL: promtool not found (apt-get install prometheus; deploy/setup.sh)" >&2
  exit 1
fi
"$promtool" check rules "$dir/alerts.yml"
# promtool resolves rule_files relative to the test file's directory.
"$promtool" test rules "$dir/alerts_test.yml"
