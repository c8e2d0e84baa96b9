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
# tests/fuzz/corpus/<harness>/ are only read. Generated headers (protoc
# output) come from bazel-bin: build their targets first.
#
# Adding a harness: one line in HARNESSES below, plus its fuzz_test stanza
# in tests/fuzz/BUILD and its seeds in tests/fuzz/corpus/<name>/.
set -uo pipefail
cd "$(dirname "$0")/../.."

# name | sources beyond COMMON_SRCS (the harness first) | extra pkg-config
# modules
HARNESSES=(
  "frame_fuzzer|tests/fuzz/frame_fuzzer.cc server/transport/inbox.cc server/transport/frame_receiver.cc server/transport/retired_regions.cc|"
  "handshake_fuzzer|tests/fuzz/handshake_fuzzer.cc server/transport/auth.cc server/transport/tcp/handshaker.cc|libcrypto"
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

SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all)
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I. "${SAN[@]}")
[[ -d bazel-bin ]] && CXXFLAGS+=(-Ibazel-bin)

# Compiles `src` (once per run) to an object; prints its path.
compile() {
  local src="$1" obj="$OUT/obj/${1//\//_}.o"
  shift
  if [[ ! -f "$obj.ok" ]]; then
    "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link "$@" -c "$src" -o "$obj" \
      2> "$obj.log" || { cat "$obj.log" >&2; return 1; }
    touch "$obj.ok"
  fi
  echo "$obj"
}
rm -f "$OUT"/obj/*.ok

failed=0
for entry in "${HARNESSES[@]}"; do
  IFS='|' read -r name srcs pkgs <<< "$entry"
  if [[ ${#selected[@]} -gt 0 && ! " ${selected[*]} " =~ " $name " ]]; then
    continue
  fi
  # shellcheck disable=SC2206  # word splitting of the lists is intended
  modules=("${COMMON_PKGS[@]}" $pkgs)
  read -r -a cflags <<< "$(pkg-config --cflags "${modules[@]}")"
  read -r -a libs <<< "$(pkg-config --libs "${modules[@]}")"
  objs=()
  # shellcheck disable=SC2206
  sources=($srcs "${COMMON_SRCS[@]}")
  build_ok=1
  for src in "${sources[@]}"; do
    if obj=$(compile "$src" "${cflags[@]}"); then
      objs+=("$obj")
    else
      build_ok=0
    fi
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
    echo "$name: ok, ${runs:-?} runs in ${TIME} s, coverage ${cov:-?}, corpus $(ls "$work" | wc -l) (log $log)"
  else
    crash=$(ls "$OUT/artifacts/$name"-* 2>/dev/null | head -1)
    echo "$name: FAILED (exit $rc) after ${runs:-?} runs; input ${crash:-none kept}; log $log"
    grep -m 3 -E 'ERROR|runtime error|invariant broken' "$log" | sed 's/^/  /'
    failed=$((failed + 1))
  fi
done
[[ $failed -eq 0 ]]
