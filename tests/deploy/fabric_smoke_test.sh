#!/usr/bin/env bash
# deploy/fabric_smoke.sh --local must pass (PASS line, exit 0) with the
# built starling-bench, and name the missing provider when asked for verbs
# on a machine without RDMA (exit 1, FAIL line naming fi_getinfo(verbs)).
set -euo pipefail
R=${TEST_SRCDIR:-.}/starling
SMOKE=$R/deploy/fabric_smoke.sh
BENCH=$R/server/bench/starling-bench
out=$(bash "$SMOKE" --local --bench "$BENCH" --port 29770 2>&1) || {
  echo "$out"
  echo "FAILED: fabric_smoke.sh --local exited non-zero"
  exit 1
}
grep -q '^PASS: fabric (tcp;ofi_rxm) between 2 ranks' <<<"$out" || {
  echo "$out"
  echo "FAILED: no PASS line"
  exit 1
}
if ls /dev/infiniband/uverbs* >/dev/null 2>&1; then
  echo "an RDMA device is here: the verbs failure case does not apply"
  exit 0
fi
set +e
out=$(bash "$SMOKE" --local --provider verbs --bench "$BENCH" --port 29780 2>&1)
rc=$?
set -e
if [[ $rc -ne 1 ]] || ! grep -q '^FAIL: .*fi_getinfo(verbs) found none' <<<"$out"; then
  echo "$out"
  echo "FAILED: --provider verbs without a device: exit $rc, want 1 and a FAIL line naming fi_getinfo(verbs)"
  exit 1
fi
echo "ok"
