#!/usr/bin/env bash
# The systemd units for real, in a booted Debian 12 container: deploy/install.sh
# installs the binaries, units and configs into a systemd-nspawn root; the
# coordinator and a node@0 instance are started and must reach "active" through
# sd_notify (Type=notify); a worker trains through the node's socket as user
# starling; `kill -9` of each main process must bring a restart (new MainPID,
# active again): the coordinator resumes its record, the node is taken back
# into the group in a new group epoch and a worker trains again. Then a job
# of two nodes (node@0, node@1) trains with two workers and node@1 is killed
# -9 mid-run: systemd restarts it and the new daemon is taken back into the
# running run (rejoin_grace holds the run for it); both workers rejoin and
# finish. Then everything stops cleanly and the container is torn down.
#
# Needs root, systemd-nspawn (systemd-container), debootstrap and a Debian
# mirror (the one in /etc/apt/sources.list*) for the first run; deploy/setup.sh
# installs the tools. Exits 77 (skipped) without root, overlayfs or
# namespaces.
#
#   tests/deploy/systemd_nspawn_test.sh                 binaries from bazel-bin
#   tests/deploy/systemd_nspawn_test.sh --bin-dir DIR
#   tests/deploy/systemd_nspawn_test.sh --rebuild-root  debootstrap again
#
# The base root is cached in /var/tmp/starling-nspawn/bookworm (~340 MB; the
# first run's debootstrap takes about a minute); each run mounts an overlay on
# it, so the cache is never modified by a run. Every step is bounded; the
# whole test takes well under two minutes once the root is cached.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE_DIR=${STARLING_NSPAWN_CACHE:-/var/tmp/starling-nspawn}
BASE=$CACHE_DIR/bookworm
BIN_DIR=$REPO/bazel-bin
REBUILD=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) BIN_DIR=${2:?}; shift 2 ;;
    --bin-dir=*) BIN_DIR=${1#*=}; shift ;;
    --rebuild-root) REBUILD=1; shift ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "systemd_nspawn_test.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
log() { echo "[$(elapsed "$T0") s] $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
# Exit 77: this machine cannot run the suite (tests/run_all.sh: skipped).
skip() { echo "SKIP: $*" >&2; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root (systemd-nspawn, mounts)"
for tool in systemd-nspawn debootstrap nsenter; do
  command -v "$tool" >/dev/null || die "no $tool (apt-get install systemd-container debootstrap util-linux)"
done
# What systemd-nspawn needs of the kernel: overlayfs for the per-run root,
# and mount, PID, UTS and IPC namespaces (absent in an unprivileged
# container, for one).
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
  skip "the kernel has no overlay filesystem"
unshare --mount --pid --uts --ipc --fork true 2>/dev/null ||
  skip "cannot create mount/PID/UTS/IPC namespaces here (an unprivileged container?)"

BINARIES=(
  "starling-coordinator:server/coordinator/starling-coordinator"
  "starling-node:server/node/starling-node"
  "starling-worker:worker/trainer/starling-worker"
)
bin_path() {  # NAME:BAZEL_PATH -> the file
  local name=${1%%:*} rel=${1#*:}
  if [[ -x $BIN_DIR/$name ]]; then echo "$BIN_DIR/$name"; else echo "$BIN_DIR/$rel"; fi
}
for b in "${BINARIES[@]}"; do
  [[ -x $(bin_path "$b") ]] || die "no $(bin_path "$b") (bazel build --config=ci //server/... //worker/trainer:starling-worker, or --bin-dir)"
done

# The Debian packages holding the binaries' shared libraries: the container
# gets the same packages (same release as this host: Debian 12).
runtime_packages() {
  local b
  for b in "${BINARIES[@]}"; do ldd "$(bin_path "$b")"; done |
    awk '$3 ~ /^\// { print $3 }' | sort -u |
    while read -r lib; do echo "$lib"; realpath "$lib"; done |
    xargs dpkg -S 2>/dev/null | cut -d: -f1 | sort -u
}
mapfile -t PACKAGES < <(runtime_packages)
PACKAGES+=(systemd systemd-sysv dbus libsystemd0 procps curl)
log "runtime packages: ${PACKAGES[*]}"

mirror() {  # the first Debian URI of this host's apt sources
  local uri
  uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{ print $2 }' | grep -v security | head -1)
  [[ -z $uri ]] && uri=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
  echo "${uri:-http://deb.debian.org/debian}"
}

# --- 1. The cached base root ------------------------------------------------
mkdir -p "$CACHE_DIR"
if [[ $REBUILD == 1 ]]; then rm -rf "$BASE"; fi
if [[ ! -x $BASE/usr/lib/systemd/systemd ]]; then
  log "debootstrap bookworm into $BASE.tmp from $(mirror)"
  rm -rf "$BASE.tmp"
  include=$(IFS=,; echo "${PACKAGES[*]}")
  timeout 900 debootstrap --variant=minbase --include="$include" bookworm \
    "$BASE.tmp" "$(mirror)" > "$CACHE_DIR/debootstrap.log" 2>&1 ||
    die "debootstrap failed (no mirror reachable?); see $CACHE_DIR/debootstrap.log"
  mv "$BASE.tmp" "$BASE"
  log "base root ready"
fi
missing=()
# shellcheck disable=SC2016  # dpkg-query's own ${...} fields
installed=" $(chroot "$BASE" dpkg-query -W -f='${Package}:${Status}\n' 2>/dev/null |
  awk -F: '/install ok installed/ { printf "%s ", $1 }')"
for p in "${PACKAGES[@]}"; do
  [[ $installed == *" $p "* ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing into the cached root: ${missing[*]}"
  timeout 600 chroot "$BASE" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    "${missing[@]}" > "$CACHE_DIR/apt.log" 2>&1 ||
    die "apt-get install ${missing[*]} in $BASE failed; see $CACHE_DIR/apt.log"
fi
log "base root: $BASE (${#PACKAGES[@]} packages present)"

# --- 2. A per-run overlay with Starling installed --------------------------
RUN=$(mktemp -d "$CACHE_DIR/run.XXXXXX")
ROOT=$RUN/merged
mkdir -p "$RUN/upper" "$RUN/work" "$ROOT"
NSPAWN_PID=
MACHINE=starling-test-$$
teardown() {
  local rc=$?
  if [[ -n $NSPAWN_PID ]] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    # SIGTERM asks the container's systemd to power off.
    kill -TERM "$NSPAWN_PID" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$NSPAWN_PID" 2>/dev/null; then
      echo "container did not power off in 15 s; killing systemd-nspawn" >&2
      kill -KILL "$NSPAWN_PID" 2>/dev/null || true
    fi
    wait "$NSPAWN_PID" 2>/dev/null || true
  fi
  mountpoint -q "$ROOT" && umount "$ROOT"
  rm -rf "$RUN"
  if [[ $rc -eq 0 ]]; then log "PASS (container torn down)"; else log "FAILED (exit $rc); container torn down"; fi
}
trap teardown EXIT
mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$ROOT"

STAGE=$RUN/bin
mkdir -p "$STAGE"
for b in "${BINARIES[@]}"; do cp "$(bin_path "$b")" "$STAGE/${b%%:*}"; done
"$REPO/deploy/install.sh" --destdir "$ROOT" --bin-dir "$STAGE" > "$RUN/install.log"
grep -q '^starling:' "$ROOT/etc/passwd" || die "install.sh did not create user starling"

# conf_set FILE < SETTINGS: each `key = value` line of SETTINGS replaces
# the file's own setting of that key (a config file sets a flag once) or
# is appended; comments and blank lines are appended as they are.
conf_set() {
  local file=$1 line key
  while IFS= read -r line; do
    if [[ $line =~ ^([a-z_]+)[[:space:]]*= ]]; then
      key=${BASH_REMATCH[1]}
      sed -i "/^${key}[[:space:]]*=/d" "$file"
    fi
    printf '%s\n' "$line" >> "$file"
  done
}

# The test's settings, in the installed example configs: one node, a small
# training run, loopback only.
TRAIN=1280
BATCH=64
conf_set "$ROOT/etc/starling/coordinator.conf" <<EOF

# systemd_nspawn_test.sh
job_id = nspawn-test
expected_nodes = 1
listen = 127.0.0.1:29400
epochs = 1
partitions_per_epoch = $((TRAIN / BATCH))
EOF
conf_set "$ROOT/etc/starling/node-0.conf" <<EOF

# systemd_nspawn_test.sh
coordinator = 127.0.0.1:29400
job_id = nspawn-test
hostname = container-node-0
data_address = 127.0.0.1
worker_socket = /run/starling/node-0/worker.sock
EOF
log "installed into $ROOT ($(wc -l < "$RUN/install.log") lines of install.sh output)"

# --- 3. Boot ----------------------------------------------------------------
# --register=no --keep-unit: no machined or systemd on the host is needed.
# --private-network: the container has its own loopback, so its ports never
# meet the host's.
DATASET=/usr/share/datasets/fashion-mnist
bind=()
[[ -d $DATASET ]] && bind=(--bind-ro="$DATASET")
systemd-nspawn -D "$ROOT" --boot --register=no --keep-unit --console=passive \
  --private-network \
  --machine="$MACHINE" "${bind[@]}" > "$RUN/console.log" 2>&1 &
NSPAWN_PID=$!
# The container's init is the descendant of systemd-nspawn running systemd:
# nspawn forks a helper first (which forks the init and may still be there),
# so the first child found is not necessarily it.
container_init() {
  local pid child
  for pid in $(pgrep -P "$NSPAWN_PID" || true); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == systemd ]] && { echo "$pid"; return; }
    for child in $(pgrep -P "$pid" || true); do
      [[ $(cat "/proc/$child/comm" 2>/dev/null) == systemd ]] && { echo "$child"; return; }
    done
  done
}
INIT=
for _ in $(seq 1 100); do
  INIT=$(container_init)
  [[ -n $INIT ]] && break
  kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$RUN/console.log"; die "systemd-nspawn exited"; }
  sleep 0.1
done
[[ -n $INIT ]] || { cat "$RUN/console.log"; die "no container init (systemd) after 10 s"; }
in_ct() { nsenter -t "$INIT" -a "$@"; }
boot_start=$(date +%s.%N)
# The manager answers once its private socket exists; then wait for boot.
state=
for _ in $(seq 1 300); do
  state=$(nsenter -t "$INIT" -a systemctl is-system-running 2>/dev/null || true)
  [[ -n $state && $state != offline ]] && break
  sleep 0.1
done
state=$(timeout 60 nsenter -t "$INIT" -a systemctl is-system-running --wait 2>/dev/null || true)
log "container booted: is-system-running=$state in $(elapsed "$boot_start") s (host pid of its systemd: $INIT)"
[[ $state == running || $state == degraded ]] || { tail -20 "$RUN/console.log"; die "container state '$state'"; }
[[ $state == degraded ]] && in_ct systemctl --failed --no-legend

prop() { in_ct systemctl show -p "$2" --value "$1"; }
show_unit() {
  log "$1: $(in_ct systemctl show -p ActiveState -p SubState -p MainPID -p NRestarts -p StatusText "$1" | paste -sd' ')"
}
# start_unit UNIT: `systemctl start` returns once READY=1 arrived (Type=notify).
start_unit() {
  local t
  t=$(date +%s.%N)
  timeout 90 nsenter -t "$INIT" -a systemctl start "$1" ||
    { in_ct journalctl -u "$1" --no-pager | tail -20; die "systemctl start $1 failed"; }
  log "systemctl start $1 returned after $(elapsed "$t") s (READY=1)"
  [[ $(in_ct systemctl is-active "$1") == active ]] || die "$1 is not active"
  show_unit "$1"
}
# kill_main UNIT: kill -9 its main process; systemd must start a new one
# (after RestartSec=). Sets KILLED_PID, NEW_PID, KILL_TIME.
kill_main() {
  local unit=$1 new=0
  KILLED_PID=$(prop "$unit" MainPID)
  KILL_TIME=$(date +%s.%N)
  in_ct kill -9 "$KILLED_PID"
  for _ in $(seq 1 300); do
    new=$(prop "$unit" MainPID)
    [[ $new != 0 && $new != "$KILLED_PID" ]] && break
    sleep 0.1
  done
  [[ $new != 0 && $new != "$KILLED_PID" ]] ||
    { in_ct journalctl -u "$unit" --no-pager | tail -20; die "systemd did not restart $unit within 30 s"; }
  NEW_PID=$new
  log "kill -9 $unit MainPID $KILLED_PID: systemd started MainPID $NEW_PID after $(elapsed "$KILL_TIME") s ($(prop "$unit" ActiveState), NRestarts=$(prop "$unit" NRestarts))"
}
# wait_active UNIT SECONDS: until ActiveState=active (READY=1 again).
# journal_line UNIT PATTERN: the last line of UNIT's journal matching
# PATTERN, waited for up to 10 s; empty if none came.
journal_line() {
  local line=
  for _ in $(seq 1 100); do
    line=$(in_ct journalctl -u "$1" --no-pager -n 80 | grep "$2" | tail -1 || true)
    [[ -n $line ]] && break
    sleep 0.1
  done
  echo "$line"
}

# The coordinator's group epoch, from its /metrics.
group_epoch() {
  in_ct curl -s --max-time 2 http://127.0.0.1:29401/metrics |
    awk '/^starling_coordinator_group_epoch /{print $2}'
}

wait_active() {
  local unit=$1 state=
  for _ in $(seq 1 $(($2 * 10))); do
    state=$(prop "$unit" ActiveState)
    [[ $state == active ]] && break
    sleep 0.1
  done
  [[ $state == active ]] ||
    { in_ct journalctl -u "$unit" --no-pager | tail -20; die "$unit not active within $2 s ($state)"; }
  log "$unit active again (MainPID $(prop "$unit" MainPID)) $(elapsed "$KILL_TIME") s after the kill"
}

# --- 4. Units ----------------------------------------------------------------
start_unit starling-coordinator.service
start_unit starling-node@0.service
in_ct systemctl status --no-pager --lines=0 starling-node@0.service | sed 's/^/    /' | head -12
ls_socket=$(in_ct ls -l /run/starling/node-0/worker.sock)
log "worker socket: $ls_socket"
http_code() { in_ct curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" || true; }
log "node /healthz $(http_code http://127.0.0.1:29700/healthz), /readyz $(http_code http://127.0.0.1:29700/readyz); coordinator /readyz $(http_code http://127.0.0.1:29401/readyz)"
log "node /metrics: $(in_ct curl -s --max-time 2 http://127.0.0.1:29700/metrics | grep -c '^starling_') starling_ samples; coordinator /metrics: $(in_ct curl -s --max-time 2 http://127.0.0.1:29401/metrics | grep -c '^starling_')"

# --- 5. A worker, as user starling, through the node's socket ---------------
if [[ -d $DATASET ]]; then
  t=$(date +%s.%N)
  if timeout 150 nsenter -t "$INIT" -a systemd-run --wait --pipe --quiet \
      --uid=starling --gid=starling -p RuntimeMaxSec=140 \
      /usr/local/bin/starling-worker --socket=/run/starling/node-0/worker.sock \
      --worker_index=0 --model=mlp --batch_size=$BATCH --train_limit=$TRAIN \
      --test_limit=1000 --progress_interval=30s > "$RUN/worker.log" 2>&1; then
    log "worker trained 1 epoch of $TRAIN samples in $(elapsed "$t") s:"
    tail -4 "$RUN/worker.log" | sed 's/^/    /'
  else
    cat "$RUN/worker.log"
    die "the worker failed"
  fi
else
  log "no $DATASET on the host: worker step skipped"
fi

# --- 6. kill -9 and restart ------------------------------------------------
# The coordinator: its replacement serves at once (READY=1) and resumes the
# group from its record in the unit's StateDirectory as the node
# re-registers; the node stays active throughout.
in_ct test -s /var/lib/starling/coordinator.state ||
  die "the coordinator keeps no record in /var/lib/starling (StateDirectory, --state_file)"
kill_main starling-coordinator.service
wait_active starling-coordinator.service 30
resumed=$(journal_line starling-coordinator.service 'resumed group epoch')
[[ -n $resumed ]] || die "the restarted coordinator did not resume its record"
log "coordinator journal: ${resumed#*: }"
node_pid=$(prop starling-node@0.service MainPID)
sleep_until=$(($(date +%s) + 3))
while (( $(date +%s) < sleep_until )); do
  [[ $(prop starling-node@0.service ActiveState) == active ]] || break
  sleep 0.2
done
[[ $(prop starling-node@0.service ActiveState) == active &&
   $(prop starling-node@0.service MainPID) == "$node_pid" ]] ||
  die "the node did not stay up across the coordinator's restart"
log "starling-node@0 stayed active (MainPID $node_pid) across the coordinator's restart"

# The node: systemd restarts it (RestartSec=5s) and the new daemon, joining
# afresh, is taken back: the coordinator drops its dead predecessor and
# re-forms the group with it (a new group epoch); READY=1 once it serves.
epoch_before=$(group_epoch)
kill_main starling-node@0.service
wait_active starling-node@0.service 60
reformed=$(journal_line starling-coordinator.service 'the group re-formed')
[[ -n $reformed ]] || die "the coordinator did not re-form the group with the restarted node"
log "coordinator journal: ${reformed#*: }"
epoch_after=$(group_epoch)
[[ -n $epoch_before && -n $epoch_after && $epoch_after -gt $epoch_before ]] ||
  die "group epoch $epoch_before -> $epoch_after: no new epoch for the restarted node"
# systemctl status tells the same (the coordinator's STATUS= line).
for _ in $(seq 1 50); do
  [[ $(prop starling-coordinator.service StatusText) == *"group epoch $epoch_after, 1 of 1 nodes healthy"* ]] && break
  sleep 0.1
done
[[ $(prop starling-coordinator.service StatusText) == *"group epoch $epoch_after, 1 of 1 nodes healthy"* ]] ||
  die "the coordinator's status line does not show group epoch $epoch_after: $(prop starling-coordinator.service StatusText)"
log "group epoch $epoch_before -> $epoch_after; node journal: $(in_ct journalctl -u starling-node@0.service --no-pager -n 50 | grep 'joined job' | tail -1 | sed 's/^.*] //')"
# It trains again, as user starling, through the same socket path.
if [[ -d $DATASET ]]; then
  t=$(date +%s.%N)
  timeout 150 nsenter -t "$INIT" -a systemd-run --wait --pipe --quiet \
      --uid=starling --gid=starling -p RuntimeMaxSec=140 \
      /usr/local/bin/starling-worker --socket=/run/starling/node-0/worker.sock \
      --worker_index=0 --model=mlp --batch_size=$BATCH --train_limit=$TRAIN \
      --test_limit=1000 --progress_interval=30s > "$RUN/worker2.log" 2>&1 ||
    { cat "$RUN/worker2.log"; die "the worker failed after the node's restart"; }
  log "after the restart a worker trained 1 epoch in $(elapsed "$t") s: $(tail -1 "$RUN/worker2.log")"
fi
show_unit starling-coordinator.service
show_unit starling-node@0.service

# --- 6b. kill -9 of a node mid-run: systemd restarts it, back into the run --
# A second job on two nodes (node@0 and node@1, its own ports and socket),
# with rejoin_grace = 60s: the run waits for a lost node instead of going on
# without it. Two workers train; node@1's main process is killed -9 mid-run;
# systemd restarts it (RestartSec=5s of the shipped unit) and the new daemon
# is taken back into the running run (it receives its shard from node@0);
# both workers, the one whose daemon died included, rejoin and finish.
if [[ -d $DATASET ]]; then
  REJOIN_TRAIN=60000
  timeout 60 nsenter -t "$INIT" -a systemctl stop starling-node@0.service starling-coordinator.service
  # A new job: the record of the first one is not its own.
  in_ct rm -f /var/lib/starling/coordinator.state
  conf_set "$ROOT/etc/starling/coordinator.conf" <<EOF

# systemd_nspawn_test.sh, the rejoin demo
job_id = nspawn-rejoin
expected_nodes = 2
rejoin_grace = 60s
epochs = 1
partitions_per_epoch = $(((REJOIN_TRAIN + BATCH - 1) / BATCH))
EOF
  cp "$ROOT/etc/starling/node-0.conf" "$ROOT/etc/starling/node-1.conf"
  for n in 0 1; do
    conf_set "$ROOT/etc/starling/node-$n.conf" <<EOF

# systemd_nspawn_test.sh, the rejoin demo
job_id = nspawn-rejoin
hostname = container-node-$n
data_port = $((29500 + n))
admin_port = $((29600 + n))
metrics_port = $((29700 + n))
worker_socket = /run/starling/node-$n/worker.sock
EOF
  done
  start_unit starling-coordinator.service
  # Each node is READY once the group of two formed: both start together.
  t=$(date +%s.%N)
  in_ct systemctl start --no-block starling-node@0.service starling-node@1.service
  for n in 0 1; do
    for _ in $(seq 1 600); do
      [[ $(prop "starling-node@$n.service" ActiveState) == active ]] && break
      sleep 0.1
    done
    [[ $(prop "starling-node@$n.service" ActiveState) == active ]] ||
      { in_ct journalctl -u "starling-node@$n.service" --no-pager | tail -20; die "starling-node@$n not active within 60 s"; }
  done
  log "starling-node@0 and starling-node@1 active (READY=1: their group formed) $(elapsed "$t") s after systemctl start"
  for n in 0 1; do
    in_ct systemd-run --unit="starling-rejoin-worker-$n" --uid=starling --gid=starling \
      -p RuntimeMaxSec=300 /usr/local/bin/starling-worker \
      --socket="/run/starling/node-$n/worker.sock" --worker_index=0 --model=mlp \
      --batch_size=$BATCH --train_limit=$REJOIN_TRAIN --test_limit=500 \
      --progress_interval=5s > /dev/null 2>&1
  done
  # A few steps in (of about 470 per worker), node@1 is killed.
  steps() {
    in_ct curl -s --max-time 2 "http://127.0.0.1:2970$1/metrics" |
      awk '/^starling_node_steps_total /{print $2}'
  }
  s1=
  for _ in $(seq 1 600); do
    s1=$(steps 1)
    [[ -n $s1 && ${s1%.*} -ge 10 ]] && break
    [[ $(prop starling-rejoin-worker-1.service ActiveState) == failed ]] && break
    sleep 0.1
  done
  if [[ -z $s1 || ${s1%.*} -lt 10 ]]; then
    for u in starling-rejoin-worker-0 starling-rejoin-worker-1 starling-node@0 starling-node@1; do
      echo "--- $u"; in_ct journalctl -u "$u.service" --no-pager -o cat | tail -8
    done
    die "the two workers did not train (node@1 at step '${s1:-}')"
  fi
  epoch_before=$(group_epoch)
  log "two nodes training (group epoch $epoch_before), node@1 at step ${s1%.*}: kill -9"
  kill_main starling-node@1.service
  wait_active starling-node@1.service 60
  back=$(journal_line starling-node@1.service 'goes on at step')
  [[ -n $back ]] || die "the restarted node@1 did not go on with the run: $(in_ct journalctl -u starling-node@1.service --no-pager | tail -5)"
  log "node@1 journal: ${back#*] }"
  log "coordinator journal: $(journal_line starling-coordinator.service 'the group re-formed' | sed 's/^.*] //')"
  # Both workers finish the run.
  for _ in $(seq 1 1800); do
    a0=$(prop starling-rejoin-worker-0.service ActiveState)
    a1=$(prop starling-rejoin-worker-1.service ActiveState)
    [[ $a0 != active && $a0 != activating && $a1 != active && $a1 != activating ]] && break
    sleep 0.1
  done
  for n in 0 1; do
    wlog=$(in_ct journalctl -u "starling-rejoin-worker-$n.service" --no-pager -o cat)
    result=$(prop "starling-rejoin-worker-$n.service" Result)
    if [[ $result != success ]]; then
      for u in starling-rejoin-worker-0 starling-rejoin-worker-1 starling-node@0 starling-node@1; do
        echo "--- $u"; in_ct journalctl -u "$u.service" --no-pager -o cat | tail -25
      done
      die "the worker of node@$n ended with Result=$result"
    fi
    rejoined=$(echo "$wlog" | grep 'rejoined run' | tail -1)
    [[ -n $rejoined ]] || { echo "$wlog" | tail -20; die "the worker of node@$n did not rejoin the run"; }
    log "worker of node@$n: ${rejoined#*starling-worker: }; $(echo "$wlog" | grep 'final: test accuracy' | tail -1)"
  done
  log "kill -9 of node@1 mid-run: both workers finished the run $(elapsed "$KILL_TIME") s after the kill (group epoch $epoch_before -> $(group_epoch))"
  show_unit starling-node@1.service
fi

# --- 7. Stop ----------------------------------------------------------------
t=$(date +%s.%N)
units=(starling-node@0.service starling-coordinator.service)
[[ -d $DATASET ]] && units+=(starling-node@1.service)
timeout 60 nsenter -t "$INIT" -a systemctl stop "${units[@]}"
for unit in "${units[@]}"; do
  state=$(in_ct systemctl is-active "$unit" || true)
  [[ $state == inactive ]] || die "$unit is '$state' after stop"
  log "$unit stopped: $state, Result=$(prop "$unit" Result)"
done
log "all stopped in $(elapsed "$t") s"
in_ct test ! -e /run/starling/node-0 || die "RuntimeDirectory /run/starling/node-0 left behind"
