#!/usr/bin/env bash
# Rejoin at scale: how long a daemon killed (-9) mid-run and restarted at
# once with the same flags takes to serve the run again, with a model of
# DIM parameters on links of RATE (the issue's target: 5 s + the shard's
# bytes / half the link rate). A coordinator and N daemons, each in its own
# network namespace on a bridge (10.79.0.0/24; nothing is added to the root
# namespace), every daemon's link shaped to RATE both ways (htb on its nic
# and on its switch port, as ../shared/peerbench does), one quadratic_worker
# per daemon (momentum, buddy replicas). Mid-run the last daemon and its
# worker are killed, the daemon is started again at once and a worker
# started on it. Timed from the restart: the daemon's "goes on at step"
# line (the group re-formed and the run's state moved to it: the state is
# all-reduced, the model and its momentum) and its worker's "resumed run"
# line (serving it). Every worker must finish with bit-identical parameters
# and no acknowledged update lost. Writes tests/fault/REJOIN_BENCH.md.
#
#   tests/fault/run_rejoin_bench.sh [RUNS]   (default 3)
#   DIM=10000000 RATE=1gbit N=4 STEPS=60 tests/fault/run_rejoin_bench.sh 3
#   KEEP=1 tests/fault/run_rejoin_bench.sh 1   (leave every process's log)
#
# Needs root, iproute2 (tc) and ping (deploy/setup.sh --bench installs
# iputils-ping). Every wait is bounded; everything started
# here is stopped by pid, and the namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
DIM=${DIM:-10000000}
RATE=${RATE:-1gbit}
N=${N:-4}
STEPS=${STEPS:-60}
[[ $(id -u) == 0 ]] || { echo "run_rejoin_bench.sh: needs root (network namespaces)" >&2; exit 2; }

bazel build --config=ci --config=opt //server/coordinator:starling-coordinator \
  //server/node:starling-node //worker/examples:quadratic_worker >/dev/null
BIN=$(bazel info --config=ci --config=opt bazel-bin 2>/dev/null)
COORD=$BIN/server/coordinator/starling-coordinator
NODE=$BIN/server/node/starling-node
WORKER=$BIN/worker/examples/quadratic_worker

NET=10.79.0
PREFIX=rb
# Every host's link shaped to RATE both ways: htb on its nic and on its
# switch port, as ../shared/peerbench does.
netns_shape() {  # namespace device
  ip netns exec "$1" tc qdisc add dev "$2" root handle 1: htb default 10 r2q 1000
  ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$RATE" \
    ceil "$RATE" burst 256k cburst 256k quantum 200000
  ip netns exec "$1" tc qdisc add dev "$2" parent 1:10 handle 10: pfifo limit 10000
}
# shellcheck source=tests/fault/netns.sh
source tests/fault/netns.sh
LAST=$((N - 1))
WORK=$(mktemp -d /tmp/starling-rejoinbench.XXXXXX)

cleanup() {
  stop_all
  netns_down
  if [[ ${KEEP:-0} == 1 ]]; then
    echo "run_rejoin_bench.sh: logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# Seconds since $1 (date +%s.%N) until a line of file $2 holds $3, polled
# every 20 ms for at most $4 seconds; -1 if it never does.
time_until() {
  local t0=$1 file=$2 pattern=$3 bound=$4 end
  end=$(($(date +%s) + bound))
  while (($(date +%s) < end)); do
    if grep -q -- "$pattern" "$file" 2>/dev/null; then
      /usr/bin/python3 -c "import sys,time; print('%.2f' % (time.time() - float(sys.argv[1])))" "$t0"
      return
    fi
    sleep 0.02
  done
  echo -1
}

daemon() {  # index dir port: starts daemon `index`, appends its pid
  local i=$1 dir=$2 port=$3
  ip netns exec rb$i "$NODE" --coordinator=$NET.254:$port --job_id=rb \
    --hostname=node$i --data_address=$NET.$((i + 1)) --data_port=$((port + 2)) \
    --admin_port=$((port + 3)) --metrics_port=0 \
    --worker_socket="$dir/node$i.sock" --local_workers=1 \
    --cluster_secret_file="$dir/secret" --timeout=60s --log_level=info \
    >> "$dir/node$i.log" 2>&1 &
  PIDS+=($!)
}

worker() {  # index dir
  ip netns exec rb$1 "$WORKER" --worker_socket="$2/node$1.sock" \
    --worker_index=0 --dim=$DIM --steps=$STEPS --timeout=120s \
    >> "$2/worker$1.out" 2>> "$2/worker$1.err" &
  PIDS+=($!)
}

# One run; appends "ok step_seconds goes_on serving acked identical" to
# $WORK/results.
one_run() {
  local r=$1
  local dir=$WORK/run.$r
  mkdir -p "$dir"
  head -c 32 /dev/urandom | base64 > "$dir/secret"
  chmod 600 "$dir/secret"
  local port=$((29400 + r * 10))
  ip netns exec $CTL "$COORD" --job_id=rb --expected_nodes=$N --parameter_count=$DIM \
    --listen=$NET.254:$port --metrics_port=$((port + 1)) --optimizer=momentum \
    --learning_rate=0.1 --heartbeat_timeout=2s --collective_timeout=30s \
    --cluster_secret_file="$dir/secret" \
    --log_level=warning > "$dir/coordinator.log" 2>&1 &
  PIDS+=($!)
  local i wpids=()
  for ((i = 0; i < N; i++)); do daemon $i "$dir" $port; done
  for ((i = 0; i < N; i++)); do worker $i "$dir"; wpids+=(${PIDS[-1]}); done
  # Going: past iteration 10 (bounded: 120 s).
  local it=-1 t_going
  for _ in $(seq 1200); do
    it=$(iteration "$port")
    [[ "$it" -ge 10 ]] && break
    sleep 0.1
  done
  if [[ "$it" -lt 10 ]]; then
    echo "run $r: the run did not get going; logs:" >&2
    tail -n 5 "$dir"/*.log "$dir"/*.err >&2 || true
    echo "0 -1 -1 -1 0 0" >> "$WORK/results"
    stop_all; return
  fi
  # The step time before the fault: 5 steps' worth.
  t_going=$(date +%s.%N)
  local it_going=$it
  for _ in $(seq 600); do
    it=$(iteration "$port")
    [[ "$it" -ge $((it_going + 5)) ]] && break
    sleep 0.05
  done
  local step_s
  step_s=$(/usr/bin/python3 -c "import sys,time; print('%.3f' % ((time.time() - float(sys.argv[1])) / max(1, int(sys.argv[2]) - int(sys.argv[3]))))" "$t_going" "$it" "$it_going")
  # The fault: the last daemon and its worker killed, the daemon started
  # again at once, a worker on it.
  local victim_pid=${PIDS[$((1 + LAST))]}
  kill -9 "${wpids[$LAST]}" "$victim_pid"
  wait "${wpids[$LAST]}" "$victim_pid" 2>/dev/null || true
  local t0
  t0=$(date +%s.%N)
  echo "--- restarted" >> "$dir/node$LAST.log"
  daemon $LAST "$dir" $port
  echo "--- restarted" >> "$dir/worker$LAST.err"
  worker $LAST "$dir"
  wpids[$LAST]=${PIDS[-1]}
  local goes_on serving
  goes_on=$(time_until "$t0" "$dir/node$LAST.log" " goes on at step " 60)
  serving=$(time_until "$t0" "$dir/worker$LAST.err" "resumed run" 60)
  # Every worker ends (bounded: 10 minutes).
  local give_up=$(($(date +%s) + 600)) running
  while true; do
    running=0
    for ((i = 0; i < N; i++)); do alive "${wpids[$i]}" && running=1; done
    ((running && $(date +%s) < give_up)) || break
    sleep 0.2
  done
  stop_all
  /usr/bin/python3 - "$dir" "$N" "$step_s" "$goes_on" "$serving" >> "$WORK/results" <<'EOF'
import re, sys
d, n, step_s, goes_on, serving = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
params, acked, ok = set(), 0, 1
for w in range(n):
    out = open('%s/worker%d.out' % (d, w), errors='replace').read()
    err = open('%s/worker%d.err' % (d, w), errors='replace').read()
    m = re.findall(r'params=\S+', out)
    if not m:
        ok = 0
        continue
    params.add(m[-1])
    for v, a in re.findall(r'rejoined run \d+ at step (\d+) as .*?acknowledged through step (-?\d+)', err):
        acked += max(0, int(a) - int(v) + 1)
print(ok, step_s, goes_on, serving, acked, 1 if ok and len(params) == 1 else 0)
EOF
  tail -1 "$WORK/results" | sed "s/^/run $r: ok step_s goes_on serving acked_lost identical = /" >&2
}

netns_down
netns_up
: > "$WORK/results"
for ((r = 1; r <= runs; r++)); do one_run "$r"; done
f=$WORK/results
okn=$(awk '{s+=$1} END{print s}' "$f")
step=$(stat $(awk '{print $2}' "$f"))
goes=$(stat $(awk '{print $3}' "$f"))
serv=$(stat $(awk '{print $4}' "$f"))
acked=$(awk '{s+=$5} END{print s}' "$f")
ident=$(awk '{s+=$6} END{print s}' "$f")
target=$(/usr/bin/python3 -c "
import re, sys
dim, n, rate = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = re.match(r'([0-9.]+)([kmg])bit', rate)
bps = float(m.group(1)) * {'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)] / 8
shard = dim / n * 4 * 2   # master shard + momentum, float32
print('%.2f' % (5 + shard / (bps / 2)))" "$DIM" "$N" "$RATE")
{
  echo "# Rejoin at scale"
  echo
  echo "Made by \`DIM=$DIM RATE=$RATE N=$N STEPS=$STEPS tests/fault/run_rejoin_bench.sh $runs\`"
  echo "on $(date -u +%Y-%m-%d) ($(nproc) cores shared by every process, $(uname -m))."
  echo "A coordinator and $N daemons each in its own network namespace on a"
  echo "bridge, every daemon's link shaped to $RATE both ways (htb), cluster"
  echo "secret, one quadratic_worker per daemon ($DIM float32 parameters,"
  echo "momentum, buddy replicas, $STEPS steps). Mid-run the last daemon and its"
  echo "worker are killed (-9), the daemon is started again at once with the"
  echo "same flags and a worker started on it. Seconds from that restart: *goes"
  echo "on*, the restarted daemon's \"goes on at step\" line (it registered, the"
  echo "group re-formed around its new self, and the run's state, model and"
  echo "momentum, moved by one all-reduce); *serving*, its worker's \"resumed"
  echo "run\" line (the worker attached and pulled the parameters). Target:"
  echo "5 s + the shard's bytes (master and momentum, $((DIM / N * 8)) bytes) / half"
  echo "the link rate = $target s."
  echo
  echo "| runs | ok | step s before (median / worst) | goes on s (median / worst) | serving s (median / worst) | target s | acknowledged updates lost | workers bit-identical |"
  echo "|---|---|---|---|---|---|---|---|"
  echo "| $runs | $okn | $step | $goes | $serv | $target | $acked | $ident of $runs |"
} > tests/fault/REJOIN_BENCH.md
cat tests/fault/REJOIN_BENCH.md
