#!/usr/bin/env bash
# Fabric smoke test: run it first on new InfiniBand, RoCE or EFA machines,
# before any daemon runs with --transport=fabric (deploy/FABRIC.md). It
#   1. prints what fi_info shows for the provider: its reliable-datagram
#      (FI_EP_RDM) endpoints, and those on this rank's address, which is
#      where Starling binds its endpoint;
#   2. checks the locked-memory limit (ulimit -l) against what the fabric
#      slots register;
#   3. runs starling-bench between the ranks with --transport fabric
#      --fabric_provider P --check, every algorithm, at a small size (one
#      write-with-immediate per message and its credit back) and at a medium
#      one (more parts than a peer has slots, so the writer waits for
#      credits), every result checked against the fp64 reference;
# and ends with one line: PASS, or FAIL and why.
#
#   deploy/fabric_smoke.sh --local                  both ranks here on 127.0.0.1 (tcp provider)
#   deploy/fabric_smoke.sh --local --provider verbs --address 10.0.0.1
#                                                   both ranks here, through this host's card
#   deploy/fabric_smoke.sh --rank 0 --peers 10.0.0.1:29570,10.0.0.2:29570   on host A
#   deploy/fabric_smoke.sh --rank 1 --peers 10.0.0.1:29570,10.0.0.2:29570   on host B
#
# Flags:
#   --local              both ranks on this host, on --address
#   --address ADDR       with --local: the address both ranks use (127.0.0.1;
#                        give the RDMA interface's address to test a card)
#   --rank R             this host's rank; run once on each host, with the
#   --peers A,B          same --peers (HOST:PORT, or a bare HOST on --port + its
#                        rank), the second within 30 s of the first. HOST is
#                        the address on the RDMA network (IPoIB, RoCE).
#   --provider P         libfabric provider: verbs, efa, tcp, ... (verbs;
#                        tcp with --local)
#   --verbs-style        follow verbs' registration rules on any provider
#   --sizes S,M          small and medium sizes in elements (1e3,4e6)
#   --port P             base port (29570): --local ranks listen on P and P+1
#   --timeout S          bound on each starling-bench run, seconds (120)
#   --bench PATH         starling-bench (default: bazel-bin/server/bench/
#                        starling-bench of this tree, else starling-bench on
#                        PATH); build it: bazel build --config=opt
#                        //server/bench:starling-bench
#   -h, --help           this text
#
# Between hosts starling-bench runs with --insecure (it has no cluster
# secret): run this on a trusted network. Exit status: 0 PASS, 1 FAIL,
# 2 a usage error.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=fabric_smoke.sh

LOCAL=0
ADDRESS=127.0.0.1
RANK=
PEERS=
PROVIDER=
VERBS_STYLE=0
SIZES=1e3,4e6
PORT=29570
TIMEOUT=120
BENCH=
usage() { echo "$PROG: $1 (try --help)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) LOCAL=1; shift ;;
    --address) ADDRESS=${2:?--address needs an address}; shift 2 ;;
    --address=*) ADDRESS=${1#*=}; shift ;;
    --rank) RANK=${2:?--rank needs a number}; shift 2 ;;
    --rank=*) RANK=${1#*=}; shift ;;
    --peers) PEERS=${2:?--peers needs HOST:PORT,HOST:PORT}; shift 2 ;;
    --peers=*) PEERS=${1#*=}; shift ;;
    --provider) PROVIDER=${2:?--provider needs a name}; shift 2 ;;
    --provider=*) PROVIDER=${1#*=}; shift ;;
    --verbs-style) VERBS_STYLE=1; shift ;;
    --sizes) SIZES=${2:?--sizes needs S,M}; shift 2 ;;
    --sizes=*) SIZES=${1#*=}; shift ;;
    --port) PORT=${2:?--port needs a number}; shift 2 ;;
    --port=*) PORT=${1#*=}; shift ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    --timeout=*) TIMEOUT=${1#*=}; shift ;;
    --bench) BENCH=${2:?--bench needs a path}; shift 2 ;;
    --bench=*) BENCH=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown option '$1'" ;;
  esac
done

# --- what runs where ---------------------------------------------------------
if ! [[ $PORT =~ ^[0-9]+$ ]] || (( PORT < 1 || PORT > 65534 )); then
  usage "--port $PORT is not a port"
fi
if ! [[ $TIMEOUT =~ ^[0-9]+$ ]] || (( TIMEOUT < 1 )); then
  usage "--timeout $TIMEOUT is not a number of seconds"
fi
IFS=, read -r -a SIZE_LIST <<< "$SIZES"
(( ${#SIZE_LIST[@]} >= 1 )) || usage "--sizes is empty"
declare -a PEER_LIST=()
if (( LOCAL )); then
  [[ -z $RANK && -z $PEERS ]] || usage "--local runs every rank: no --rank/--peers with it"
  PROVIDER=${PROVIDER:-tcp}
  host=$ADDRESS
  [[ $host == *:* ]] && host="[$host]"   # an IPv6 address
  PEER_LIST=("$host:$PORT" "$host:$((PORT + 1))")
  MY_RANKS=(0 1)
else
  [[ -n $RANK && -n $PEERS ]] || usage "give --local, or --rank R and --peers HOST:PORT,HOST:PORT"
  [[ $RANK =~ ^[0-9]+$ ]] || usage "--rank $RANK is not a number"
  IFS=, read -r -a PEER_LIST <<< "$PEERS"
  (( ${#PEER_LIST[@]} >= 2 )) || usage "--peers needs two hosts or more"
  (( RANK < ${#PEER_LIST[@]} )) || usage "--rank $RANK is not in 0..$(( ${#PEER_LIST[@]} - 1 ))"
  PROVIDER=${PROVIDER:-verbs}
  MY_RANKS=("$RANK")
fi
WORLD=${#PEER_LIST[@]}
PEER_ARG=$(IFS=,; echo "${PEER_LIST[*]}")

# The host part of a --peers entry: [v6]:port, host:port, or a bare host.
host_of() {
  local p=$1
  if [[ $p == \[*\]* ]]; then p=${p#\[}; echo "${p%%\]*}"
  elif [[ $p == *:*:* ]]; then echo "$p"
  else echo "${p%%:*}"; fi
}
is_loopback() {
  case "$1" in 127.*|localhost|::1) return 0 ;; *) return 1 ;; esac
}
INSECURE=()
for p in "${PEER_LIST[@]}"; do
  is_loopback "$(host_of "$p")" || INSECURE=(--insecure)
done
MY_HOST=$(host_of "${PEER_LIST[${MY_RANKS[0]}]}")

if [[ -z $BENCH ]]; then
  if [[ -x $REPO/bazel-bin/server/bench/starling-bench ]]; then
    BENCH=$REPO/bazel-bin/server/bench/starling-bench
  elif command -v starling-bench >/dev/null 2>&1; then
    BENCH=$(command -v starling-bench)
  fi
fi
if [[ -z $BENCH || ! -x $BENCH ]]; then
  echo "FAIL: no starling-bench${BENCH:+ at $BENCH} (build it: bazel build --config=opt //server/bench:starling-bench, or give --bench PATH)"
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/starling-fabric-smoke.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    if [[ -n $p ]]; then kill "$p" 2>/dev/null || true; fi
  done
  for p in "${PIDS[@]:-}"; do
    if [[ -n $p ]]; then wait "$p" 2>/dev/null || true; fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
WARNINGS=()
fail() {
  echo
  local w
  for w in "${WARNINGS[@]:-}"; do
    if [[ -n $w ]]; then echo "warning: $w"; fi
  done
  echo "FAIL: $1"
  if [[ -n ${2:-} ]]; then echo "  $2"; fi
  echo "  (logs in $WORK; deploy/FABRIC.md explains the messages)"
  exit 1
}

echo "== fabric smoke test: provider $PROVIDER, $WORLD ranks (${PEER_ARG}), this host runs rank ${MY_RANKS[*]}"
echo "   starling-bench: $BENCH"

# --- 1. fi_info ---------------------------------------------------------------
echo
echo "== 1. what libfabric shows for '$PROVIDER'"
if command -v fi_info >/dev/null 2>&1; then
  timeout 20 fi_info --version 2>&1 | sed 's/^/   /' || true
  rc=0
  timeout 20 fi_info -p "$PROVIDER" -t FI_EP_RDM > "$WORK/fi_info.txt" 2>&1 || rc=$?
  n=$(grep -c '^provider:' "$WORK/fi_info.txt" || true)
  if (( rc == 0 && n > 0 )); then
    echo "   fi_info -p $PROVIDER -t FI_EP_RDM: $n endpoint(s):"
    awk '/^provider:/ { p = $2 } /fabric:/ { f = $2 } /domain:/ { printf "     %-18s fabric %-22s domain %s\n", p, f, $2 }' \
      "$WORK/fi_info.txt" | awk '!seen[$0]++' | head -16
  else
    echo "   fi_info -p $PROVIDER -t FI_EP_RDM: nothing ($(tail -1 "$WORK/fi_info.txt"))"
    loaded=$(timeout 20 fi_info -l 2>/dev/null | awk -F: '/^[^ ]/ { printf "%s ", $1 }' || true)
    echo "   providers libfabric loaded (fi_info -l): ${loaded:-none}"
    if [[ " $loaded " != *" $PROVIDER "* ]]; then
      echo "   '$PROVIDER' is not among them: it found no device it drives (for verbs: no RDMA device, or its driver or rdma-core's provider library is missing)"
    fi
    WARNINGS+=("fi_info shows no FI_EP_RDM endpoint for provider '$PROVIDER'")
  fi
  if [[ $PROVIDER != shm ]]; then
    rc=0
    timeout 20 fi_info -p "$PROVIDER" -t FI_EP_RDM -s "$MY_HOST" > "$WORK/fi_info_addr.txt" 2>&1 || rc=$?
    n=$(grep -c '^provider:' "$WORK/fi_info_addr.txt" || true)
    if (( rc == 0 && n > 0 )); then
      echo "   on $MY_HOST (fi_info ... -s $MY_HOST): $(awk '/^provider:/ { p = $2 } /domain:/ { print p " (domain " $2 ")" }' "$WORK/fi_info_addr.txt" | awk '!seen[$0]++' | paste -sd, -)"
    else
      echo "   on $MY_HOST (fi_info ... -s $MY_HOST): nothing: Starling binds its endpoint to this address and will find none"
    fi
  fi
else
  echo "   fi_info is not installed (apt-get install libfabric-bin); starling-bench will say what it finds"
fi

# --- 2. locked memory -----------------------------------------------------------
echo
echo "== 2. locked memory"
LIMIT=$(ulimit -l)
# Per peer: 8 receive and 8 send slots of 512 KiB (FabricOptions), plus
# 8-byte credit cells.
NEED_KIB=$(( (WORLD - 1) * 2 * 8 * 512 ))
echo "   ulimit -l: $LIMIT$([[ $LIMIT != unlimited ]] && echo ' KiB'); the slots of $((WORLD - 1)) peer(s) register $((NEED_KIB / 1024)) MiB"
case "$PROVIDER" in
  tcp|sockets|udp|shm|net)
    echo "   ($PROVIDER pins no memory: the limit matters for verbs and efa)" ;;
  *)
    if [[ $LIMIT != unlimited ]] && (( LIMIT < NEED_KIB + 8192 )); then
      msg="ulimit -l is $LIMIT KiB: the slots of $((WORLD - 1)) peer(s) need $((NEED_KIB / 1024)) MiB, and the provider pins buffers of its own besides"
      if (( EUID == 0 )); then
        msg="$msg (root registers beyond the limit: CAP_IPC_LOCK; the daemons' user does not)"
      fi
      echo "   warning: $msg"
      WARNINGS+=("$msg; set LimitMEMLOCK=infinity (systemd) or ulimit -l unlimited")
    else
      echo "   ok"
    fi ;;
esac

# --- 3. starling-bench -----------------------------------------------------------
FLAGS=(--peers "$PEER_ARG" --transport fabric --fabric_provider "$PROVIDER"
       --check --algo all --timeout_s 30 --max_seconds 20 --log_level warning
       "${INSECURE[@]}")
(( VERBS_STYLE )) && FLAGS+=(--fabric_verbs_style)

# Runs every rank of this host on `size`; sets STEP_RC and the logs.
run_step() {
  local size=$1 step=$2 r
  local -a pids=()
  STEP_RC=()
  echo
  echo "== 3.$step starling-bench --rank R ${FLAGS[*]} --sizes $size  (R: ${MY_RANKS[*]})"
  for r in "${MY_RANKS[@]}"; do
    timeout --kill-after=10 "$TIMEOUT" "$BENCH" --rank "$r" "${FLAGS[@]}" \
      --sizes "$size" > "$WORK/step$step.rank$r.log" 2>&1 &
    pids+=($!)
    PIDS+=($!)
  done
  local i
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    STEP_RC+=("$rc")
  done
  PIDS=()
}

# The first error line of a step, or a timeout's explanation.
step_reason() {
  local step=$1 i r line
  for i in "${!MY_RANKS[@]}"; do
    r=${MY_RANKS[$i]}
    if (( STEP_RC[i] == 124 || STEP_RC[i] == 137 )); then
      echo "rank $r: no result within $TIMEOUT s (is every other rank running this script, started within 30 s of this one, with the same --peers and --provider?)"
      return
    fi
    line=$(grep -m1 '^starling-bench: ' "$WORK/step$step.rank$r.log" || true)
    if [[ -n $line ]]; then echo "${line#starling-bench: }"; return; fi
  done
  for i in "${!MY_RANKS[@]}"; do
    r=${MY_RANKS[$i]}
    if (( STEP_RC[i] != 0 )); then
      echo "rank $r: starling-bench exited ${STEP_RC[i]}: $(tail -1 "$WORK/step$step.rank$r.log")"
      return
    fi
  done
}

hint_for() {
  case "$1" in
    *"found none"*)
      echo "hint: libfabric has no '$PROVIDER' endpoint on $MY_HOST: check fi_info -l, ibv_devinfo (a port PORT_ACTIVE), and that $MY_HOST is the address of the RDMA interface (IPoIB or RoCE), not of another NIC$( (( LOCAL )) && is_loopback "$MY_HOST" && [[ $PROVIDER != tcp ]] && echo "; with --local, give --address that interface's address")" ;;
    *"refused to register"*)
      echo "hint: locked memory: raise ulimit -l (LimitMEMLOCK=infinity under systemd; Slurm: PropagateResourceLimitsExcept=MEMLOCK)" ;;
    *"uses fabric provider"*)
      echo "hint: the ranks opened different providers: give every host the same --provider" ;;
    *"fp64 reference"*|*WRONG*)
      echo "hint: wrong results over the fabric: keep both hosts' logs and report them" ;;
    *"gave up after"*|*"connect"*)
      echo "hint: start this script on every host within 30 s of the first, with the same --peers, and let the ports through the firewall" ;;
    *"no result within"*)
      echo "hint: a rank that cannot open the fabric fails at once; look at the other host's output" ;;
  esac
}

TRANSPORT=
ROWS=0
for i in "${!SIZE_LIST[@]}"; do
  step=$((i + 1))
  run_step "${SIZE_LIST[$i]}" "$step"
  for r in "${MY_RANKS[@]}"; do
    if [[ -s $WORK/step$step.rank$r.log ]]; then
      (( ${#MY_RANKS[@]} > 1 )) && echo "   -- rank $r"
      sed 's/^/   /' "$WORK/step$step.rank$r.log"
    fi
  done
  ok=1
  for rc in "${STEP_RC[@]}"; do (( rc == 0 )) || ok=0; done
  if (( !ok )); then
    reason=$(step_reason "$step")
    fail "${reason:-starling-bench failed}" "$(hint_for "$reason")"
  fi
  if [[ ${MY_RANKS[0]} == 0 ]]; then
    log=$WORK/step$step.rank0.log
    t=$(sed -n 's/^# transport: //p' "$log")
    [[ $t == fabric* ]] || fail "rank 0 reports transport '${t:-none}', not the fabric"
    TRANSPORT=$t
    regs=$(sed -n 's/^# fabric registrations during the benchmark: //p' "$log")
    [[ -z $regs || $regs == 0 ]] ||
      fail "$regs memory registrations during the benchmark: registration must happen once, when the path opens"
    rows=$(grep -cE ' ok$' "$log" || true)
    (( rows > 0 )) || fail "rank 0 printed no checked result (step $step)"
    ROWS=$((ROWS + rows))
  fi
done

echo
for w in "${WARNINGS[@]:-}"; do
  if [[ -n $w ]]; then echo "warning: $w"; fi
done
rm -rf "$WORK"
if [[ ${MY_RANKS[0]} == 0 ]]; then
  echo "PASS: $TRANSPORT between $WORLD ranks: $ROWS cases at sizes $SIZES (elements) checked against the fp64 reference, no registration during the runs"
else
  echo "PASS: rank ${MY_RANKS[*]} ran every case at sizes $SIZES over the fabric ($PROVIDER) with no error; rank 0's output has the table"
fi
