#!/usr/bin/env bash
# Builds every libFuzzer harness with clang outside Bazel
# (-fsanitize=fuzzer,address,undefined; the few sources each needs are
# compiled directly) and fuzzes each for a bounded time, starting from its
# seed corpus. Prints one summary line per harness; exits non-zero if a
# harness failed to build or found a crash (its input is kept and named).
#
#   tests/fuzz/run_fuzzers.sh                 20 s per harness, all harnesses
#   tests/fuzz/run_fuzzers.sh --time 15       another bound (seconds)
#   tests/fuzz/run_fuzzers.sh frame_fuzzer    only the harnesses named
#
# Needs clang++ and libFuzzer (Debian: clang, libclang-rt-14-dev). Work goes
# to $FUZZ_OUT (default ${TMPDIR:-/tmp}/starling-fuzz-$USER): objects,
# binaries, the grown corpora, logs and crash inputs. The committed seeds in
# tests/fuzz/corpus/<harness>/ are only read. Generated protoc output comes
# from bazel-bin: build its targets first (bazel build //proto:all).
#
# Adding a harness: one line in HARNESSES below, plus its fuzz_test stanza
# in tests/fuzz/BUILD and its seeds in tests/fuzz/corpus/<name>/.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

# name | sources beyond COMMON_SRCS (the harness first) | extra pkg-config
# modules
HARNESSES=(
  "frame_fuzzer|tests/fuzz/frame_fuzzer.cc server/transport/inbox.cc server/transport/frame_receiver.cc server/transport/retired_regions.cc|"
  "handshake_fuzzer|tests/fuzz/handshake_fuzzer.cc server/transport/auth.cc server/transport/tcp/handshaker.cc|libcrypto"
  "worker_request_fuzzer|tests/fuzz/worker_request_fuzzer.cc server/node/worker/worker_request_check.cc server/base/tensor_table.cc server/base/proto_data_type.cc server/base/data_type.cc bazel-bin/proto/common.pb.cc bazel-bin/proto/coordinator.pb.cc bazel-bin/proto/worker.pb.cc|protobuf"
  "fabric_hello_fuzzer|tests/fuzz/fabric_hello_fuzzer.cc server/transport/fabric/fabric_wire.cc|"
)
COMMON_SRCS=(
  server/base/logging.cc
  server/base/status_macros.cc
  server/transport/crc32c.cc
  server/transport/frame.cc
  server/transport/handshake.cc
  tests/fuzz/frame_stream.cc
)
COMMON_PKGS=(absl_status absl_statusor absl_strings absl_str_format_internal
             absl_synchronization absl_time absl_raw_hash_set absl_hash)

TIME=20
selected=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time) TIME="${2:?--time needs seconds}"; shift 2 ;;
    --time=*) TIME="${1#--time=}"; shift ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    -*) echo "run_fuzzers.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) selected+=("$1"); shift ;;
  esac
done

CXX="${CXX_FUZZ:-clang++}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "run_fuzzers.sh: $CXX not found (install clang and libclang-rt-14-dev; deploy/setup.sh)" >&2
  exit 2
fi
OUT="${FUZZ_OUT:-${TMPDIR:-/tmp}/starling-fuzz-${USER:-$(id -u)}}"
mkdir -p "$OUT/obj" "$OUT/artifacts"

# shellcheck disable=SC2054  # the commas belong to the flag
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all)
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I. "${SAN[@]}")
[[ -d bazel-bin ]] && CXXFLAGS+=(-Ibazel-bin)

object_of() { echo "$OUT/obj/${1//\//_}.o"; }

# The harnesses to run, and every source they need, compiled once each, in
# parallel.
run=()
all_srcs=("${COMMON_SRCS[@]}")
all_pkgs=("${COMMON_PKGS[@]}")
for entry in "${HARNESSES[@]}"; do
  IFS='|' read -r name srcs pkgs <<< "$entry"
  if [[ ${#selected[@]} -gt 0 ]]; then
    wanted=0
    for one in "${selected[@]}"; do [[ $one == "$name" ]] && wanted=1; done
    [[ $wanted == 1 ]] || continue
  fi
  run+=("$entry")
  # shellcheck disable=SC2206  # word splitting of the lists is intended
  all_srcs+=($srcs)
  # shellcheck disable=SC2206
  all_pkgs+=($pkgs)
done
if [[ ${#run[@]} -eq 0 ]]; then
  echo "run_fuzzers.sh: no harness named ${selected[*]}" >&2
  exit 2
fi
for src in "${all_srcs[@]}"; do
  if [[ $src == bazel-bin/* && ! -f $src ]]; then
    echo "run_fuzzers.sh: $src is missing; build the protos first:" \
      "bazel build //proto:all" >&2
  fi
done
# xargs runs compile_one in child shells: arrays travel as one string.
export CXX OUT
COMPILE_FLAGS="${CXXFLAGS[*]} -fsanitize=fuzzer-no-link $(pkg-config --cflags "${all_pkgs[@]}")"
export COMPILE_FLAGS
compile_one() {
  local obj
  obj=$(object_of "$1")
  # shellcheck disable=SC2086  # COMPILE_FLAGS is a list of words
  $CXX $COMPILE_FLAGS -c "$1" -o "$obj" 2> "$obj.log" ||
    { echo "$1:" >&2; cat "$obj.log" >&2; rm -f "$obj"; }
}
export -f compile_one object_of
rm -f "$OUT"/obj/*
# shellcheck disable=SC2016  # $1 is the child shell's
printf '%s\n' "${all_srcs[@]}" | sort -u |
  xargs -P "$(nproc)" -I{} bash -c 'compile_one "$1"' _ {}

failed=0
built=()
for entry in "${run[@]}"; do
  IFS='|' read -r name srcs pkgs <<< "$entry"
  # shellcheck disable=SC2206
  modules=("${COMMON_PKGS[@]}" $pkgs)
  read -r -a libs <<< "$(pkg-config --libs "${modules[@]}")"
  objs=()
  build_ok=1
  # shellcheck disable=SC2206
  for src in $srcs "${COMMON_SRCS[@]}"; do
    obj=$(object_of "$src")
    [[ -f "$obj" ]] || build_ok=0
    objs+=("$obj")
  done
  if [[ $build_ok == 1 ]]; then
    "$CXX" -fsanitize=fuzzer "${SAN[@]}" "${objs[@]}" "${libs[@]}" \
      -o "$OUT/$name" 2> "$OUT/$name.link.log" ||
      { cat "$OUT/$name.link.log" >&2; build_ok=0; }
  fi
  if [[ $build_ok == 0 ]]; then
    echo "$name: FAILED to build"
    failed=$((failed + 1))
    continue
  fi

  built+=("$name")
done

# fuzz_one NAME: fuzzes one built harness; its summary goes to
# $OUT/NAME.summary (first line "NAME: ok, ..." or "NAME: FAILED ...").
fuzz_one() {
  local name=$1 seeds work log rc runs cov crash
  seeds="tests/fuzz/corpus/$name"
  work="$OUT/corpus/$name"
  mkdir -p "$work"
  log="$OUT/$name.log"
  rm -f "$OUT/artifacts/$name"-*
  "$OUT/$name" -max_total_time="$TIME" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$name-" \
    "$work" "$seeds" > "$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [[ $rc -eq 0 ]]; then
    echo "$name: ok, ${runs:-?} runs in ${TIME} s, coverage ${cov:-?}, corpus $(find "$work" -type f | wc -l) (log $log)" > "$OUT/$name.summary"
    return 0
  fi
  crash=$(find "$OUT/artifacts" -name "$name-*" | head -1)
  {
    echo "$name: FAILED (exit $rc) after ${runs:-?} runs; input ${crash:-none kept}; log $log"
    grep -m 3 -E 'ERROR|runtime error|invariant broken' "$log" | sed 's/^/  /'
  } > "$OUT/$name.summary"
  return 1
}

# The harnesses are single-threaded: one per core at once, each for the
# full bound.
for name in "${built[@]}"; do
  rm -f "$OUT/$name.summary"
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n; done
  fuzz_one "$name" &
done
wait
for name in "${built[@]}"; do
  if [[ ! -f $OUT/$name.summary ]]; then
    echo "$name: FAILED (no summary: the run was cut short)"
    failed=$((failed + 1))
    continue
  fi
  cat "$OUT/$name.summary"
  grep -q "^$name: ok," "$OUT/$name.summary" || failed=$((failed + 1))
done
[[ $failed -eq 0 ]]
