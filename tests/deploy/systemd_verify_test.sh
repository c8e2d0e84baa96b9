#!/usr/bin/env bash
# The systemd units in deploy/systemd/, installed by deploy/install.sh into a
# temporary root (with stand-in binaries), pass `systemd-analyze verify` with
# no output at all: verify exits 0 on warnings (an unknown key, a bad value),
# so any line it prints fails this test. Also: a deliberately broken unit is
# reported (the check is live), --prefix moves ExecStart=, a second install
# keeps the operator's configs, and the example configs hold only flags the
# binaries know (when the binaries are in the runfiles).
#
#   bazel test --config=ci //tests/deploy:systemd_verify_test
#   tests/deploy/systemd_verify_test.sh      (from a checkout; < 1 s)
set -euo pipefail

if [[ -n ${TEST_SRCDIR:-} ]]; then
  REPO=$TEST_SRCDIR/${TEST_WORKSPACE:-starling}
else
  REPO=$(cd "$(dirname "$0")/../.." && pwd)
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed (Debian package systemd)"
  exit 0
fi
SYSTEM_UNITS=
for d in /usr/lib/systemd/system /lib/systemd/system; do
  if [[ -e $d/sysinit.target ]]; then SYSTEM_UNITS=$d; break; fi
done
if [[ -z $SYSTEM_UNITS ]]; then
  echo "SKIP: no systemd unit directory with sysinit.target"
  exit 0
fi

WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/systemd-verify.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# Stand-in executables: verify checks that ExecStart= names an executable.
mkdir -p "$WORK/stubs"
for b in starling-coordinator starling-node; do
  printf '#!/bin/sh\nexit 0\n' > "$WORK/stubs/$b"
  chmod 755 "$WORK/stubs/$b"
done

# make_root DIR [install.sh flags]: a root with systemd's own units (verify
# resolves sysinit.target and friends under --root) and Starling installed.
make_root() {
  local root=$1
  shift
  mkdir -p "$root/usr/lib/systemd"
  cp -a "$SYSTEM_UNITS" "$root/usr/lib/systemd/system"
  "$REPO/deploy/install.sh" --destdir "$root" --bin-dir "$WORK/stubs" \
    --no-user "$@" > "$root.install.log"
}

# verify_silent ROOT UNIT...: exit 0 and not one line of output.
verify_silent() {
  local root=$1
  shift
  local out rc=0
  out=$(systemd-analyze verify --root="$root" "$@" 2>&1) || rc=$?
  if [[ $rc -ne 0 || -n $out ]]; then
    echo "systemd-analyze verify --root=$root $* (exit $rc):"
    echo "$out"
    return 1
  fi
}

ROOT=$WORK/root
make_root "$ROOT"
UNITS=(starling-coordinator.service starling-node@0.service starling-node@gpu-1.service)
if verify_silent "$ROOT" "${UNITS[@]}"; then
  pass "systemd-analyze verify: ${UNITS[*]} (no output)"
else
  fail "systemd-analyze verify reported problems"
fi

for unit in starling-coordinator.service starling-node@.service; do
  f=$ROOT/etc/systemd/system/$unit
  grep -q '^Type=notify$' "$f" || fail "$unit: not Type=notify"
  grep -q '^NotifyAccess=main$' "$f" || fail "$unit: not NotifyAccess=main"
  grep -q '^Restart=on-failure$' "$f" || fail "$unit: no Restart=on-failure"
  grep -q '^LimitMEMLOCK=infinity$' "$f" || fail "$unit: no LimitMEMLOCK=infinity"
  grep -q '^ProtectSystem=strict$' "$f" || fail "$unit: no ProtectSystem=strict"
done
grep -q -- '--config=/etc/starling/node-%i.conf' \
  "$ROOT/etc/systemd/system/starling-node@.service" ||
  fail "starling-node@.service does not read /etc/starling/node-%i.conf"
[[ -f $ROOT/etc/starling/coordinator.conf && -f $ROOT/etc/starling/node-0.conf ]] ||
  fail "install.sh did not install the example configs"
pass "unit settings and installed layout"

# The check is live: a unit with an unknown key and a bad value is reported.
BROKEN=$WORK/broken
make_root "$BROKEN"
sed -i -e 's/^ProtectHome=yes/ProtectHome=maybe/' -e '/^\[Service\]/a Restrat=always' \
  "$BROKEN/etc/systemd/system/starling-coordinator.service"
if verify_silent "$BROKEN" starling-coordinator.service >/dev/null; then
  fail "a broken unit passed systemd-analyze verify silently"
else
  pass "a broken unit is reported"
fi

# --prefix: ExecStart= follows the binaries.
OPT=$WORK/opt
make_root "$OPT" --prefix /opt/starling
if grep -q '^ExecStart=/opt/starling/bin/starling-node ' \
    "$OPT/etc/systemd/system/starling-node@.service" &&
    verify_silent "$OPT" starling-node@0.service starling-coordinator.service; then
  pass "--prefix /opt/starling"
else
  fail "--prefix /opt/starling"
fi

# A second install keeps edited configs and writes the example beside them.
echo "job_id = edited" >> "$ROOT/etc/starling/node-0.conf"
"$REPO/deploy/install.sh" --destdir "$ROOT" --bin-dir "$WORK/stubs" --no-user >/dev/null
if grep -q '^job_id = edited$' "$ROOT/etc/starling/node-0.conf" &&
    [[ -f $ROOT/etc/starling/node-0.conf.new ]]; then
  pass "reinstall keeps configs (.new beside them)"
else
  fail "reinstall overwrote /etc/starling/node-0.conf"
fi

# The example configs name only flags the binaries accept: each applies its
# --config before --version prints (unknown flag or bad value: exit 2).
checked=0
for pair in "server/node/starling-node:node.conf" \
    "server/coordinator/starling-coordinator:coordinator.conf"; do
  bin=$REPO/${pair%%:*}
  [[ -x $bin ]] || bin=$REPO/bazel-bin/${pair%%:*}
  conf=$REPO/deploy/config/${pair##*:}
  [[ -x $bin ]] || continue
  checked=$((checked + 1))
  if out=$("$bin" --config="$conf" --version 2>&1); then
    pass "${pair##*:} accepted by ${bin##*/} ($out)"
  else
    fail "${pair##*:} rejected by ${bin##*/}: $out"
  fi
done
[[ $checked -eq 0 ]] && echo "note: no binaries in the runfiles; example configs not checked"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
