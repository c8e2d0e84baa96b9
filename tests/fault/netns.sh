# Shared by the fault scripts that need a network (run_link_faults.sh,
# run_rejoin_bench.sh): N host namespaces and a control namespace on one
# bridge in a switch namespace, nothing added to the root namespace, and
# the helpers to stop what a script started. Sourced, not run. The script
# sets, before sourcing:
#   NET     the /24's first three octets (hosts .1..N, control .254)
#   N       hosts
#   PREFIX  the namespaces' names: PREFIX0.., PREFIXsw (the switch),
#           PREFIXctl (the control host); bridge PREFIXbr0, ports PREFIXp<i>
# and may define netns_shape NAMESPACE DEVICE, called for each host's nic
# and its switch port (link shaping). Sets SW and CTL; keeps PIDS, the
# processes stop_all stops.
SW=${PREFIX}sw
CTL=${PREFIX}ctl
PIDS=()

netns_up() {
  ip netns add "$SW"
  ip netns exec "$SW" ip link set lo up
  ip netns exec "$SW" ip link add "${PREFIX}br0" type bridge
  ip netns exec "$SW" ip link set "${PREFIX}br0" type bridge stp_state 0 forward_delay 0
  ip netns exec "$SW" ip link set "${PREFIX}br0" up
  local name ns i
  for ((i = 0; i <= N; i++)); do
    if ((i == N)); then ns=$CTL; name=254; else ns=$PREFIX$i; name=$((i + 1)); fi
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    ip link add name nic0 netns "$ns" type veth peer name "${PREFIX}p$i" netns "$SW"
    ip netns exec "$SW" ip link set "${PREFIX}p$i" master "${PREFIX}br0" up
    ip netns exec "$ns" ip addr add "$NET.$name/24" dev nic0
    ip netns exec "$ns" ip link set nic0 up
    if ((i < N)) && declare -F netns_shape >/dev/null; then
      netns_shape "$ns" nic0
      netns_shape "$SW" "${PREFIX}p$i"
    fi
  done
  for ((i = 0; i < N; i++)); do
    local ok=0
    for _ in $(seq 50); do
      if ip netns exec "$CTL" ping -c1 -W1 "$NET.$((i + 1))" >/dev/null 2>&1; then ok=1; break; fi
    done
    ((ok)) || { echo "$PREFIX$i ($NET.$((i + 1))) not reachable" >&2; exit 1; }
  done
}

netns_down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}'); do
    if [[ "$ns" =~ ^$PREFIX[0-9]+$ || "$ns" == "$SW" || "$ns" == "$CTL" ]]; then
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}

stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}

# The coordinator's highest iteration, from its metrics on port $1 + 1 of
# the control host (-1 if it does not answer).
iteration() {
  local it
  it=$(ip netns exec "$CTL" curl -s -m 1 "http://$NET.254:$(($1 + 1))/metrics" 2>/dev/null |
    awk '/^starling_coordinator_iteration /{print int($2)}' || true)
  echo "${it:--1}"
}

# Whether child $1 runs (a zombie has exited).
alive() {
  [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# "median / worst" of the non-negative values given.
stat() {
  /usr/bin/python3 -c '
import sys
v = sorted(float(x) for x in sys.argv[1:] if float(x) >= 0)
if not v: print("-")
else:
    m = v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2
    print("%.2f / %.2f" % (m, v[-1]))' "$@"
}
