#!/usr/bin/env bash
# Runs every Starling test and ends with one line "N passed, N failed".
#
#   tests/run_all.sh            format checks, bazel test //..., the deploy
#                               suites (Slurm, systemd in a container), the
#                               whole suite again on the portable kernels,
#                               the CUDA build check, 15 s of libFuzzer per
#                               harness
#   tests/run_all.sh --quick    only the format checks and bazel test //...
#
# Counts GoogleTest cases from Bazel's test.xml files (tests/count_results.py);
# the format checks, each deploy suite and the portable run count as one
# case each (a portable run's failing cases count one failure each). The
# deploy suites need root and, for the container, systemd-nspawn and a
# Debian mirror; without them they print why and count as skipped. Exits
# non-zero on any failure and always shuts the Bazel server down at the end
# (otherwise its JVM lingers).
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

# Optimised (-O2, as users build and as deploy/demo.sh builds): one build
# serves the tests, the deploy suites and the demo, and the tests run the
# code users run.
BAZEL_FLAGS=(--config=ci --config=opt)
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

extra_passed=0
extra_failed=0
extra_skipped=0
step() { echo; echo "=== $* === (at ${SECONDS} s)"; }

step "format check (clang-format $(clang-format --version | grep -o '[0-9]*\.[0-9.]*' | head -1))"
mapfile -t sources < <(git ls-files '*.h' '*.cc' '*.cu')
if clang-format --dry-run --Werror "${sources[@]}"; then
  echo "format: ${#sources[@]} files clean"
  extra_passed=$((extra_passed + 1))
else
  echo "FAILED: format check (run: clang-format -i \$(git ls-files '*.h' '*.cc' '*.cu'))"
  extra_failed=$((extra_failed + 1))
fi

if command -v buildifier >/dev/null 2>&1; then
  step "buildifier"
  mapfile -t bzl < <(git ls-files 'BUILD' '*/BUILD' '*.bzl' 'WORKSPACE')
  if buildifier --mode=check "${bzl[@]}"; then
    echo "buildifier: ${#bzl[@]} files clean"
    extra_passed=$((extra_passed + 1))
  else
    echo "FAILED: buildifier (run: buildifier ${bzl[*]})"
    extra_failed=$((extra_failed + 1))
  fi
fi

if command -v pyflakes3 >/dev/null 2>&1 || /usr/bin/python3 -m pyflakes --version >/dev/null 2>&1; then
  step "pyflakes (the Python package, launcher and tests)"
  mapfile -t py < <(git ls-files '*.py')
  if /usr/bin/python3 -m pyflakes "${py[@]}"; then
    echo "pyflakes: ${#py[@]} files clean"
    extra_passed=$((extra_passed + 1))
  else
    echo "FAILED: pyflakes (run: /usr/bin/python3 -m pyflakes \$(git ls-files '*.py'))"
    extra_failed=$((extra_failed + 1))
  fi
fi

step "thread-safety check (clang -Wthread-safety -Werror over server/ and client/)"
if tests/thread_safety_check.sh; then
  extra_passed=$((extra_passed + 1))
else
  echo "FAILED: thread-safety check (run: tests/thread_safety_check.sh [FILE.cc...])"
  extra_failed=$((extra_failed + 1))
fi

step "dashboards: Grafana JSON schema (from @grafana/schema), PromQL parse, metric names (dashboards/tools/validate.sh)"
if dashboards/tools/validate.sh; then
  extra_passed=$((extra_passed + 1))
else
  echo "FAILED: dashboards/tools/validate.sh"
  extra_failed=$((extra_failed + 1))
fi

step "bazel test //..."
# The run's trace (where the time went: bazel analyze-profile FILE).
profile="${TMPDIR:-/tmp}/starling-bazel-test.profile.gz"
bazel test "${BAZEL_FLAGS[@]}" --keep_going --profile="$profile" //...
bazel_rc=$?
echo "bazel test's trace: $profile (bazel analyze-profile)"

# The main run's cases are counted now: later steps rerun some tests and
# overwrite their test.xml files. CUDA-only tests (target_compatible_with
# //bazel:cuda_enabled) are not built here; the CUDA step runs them. Manual
# tests (the fault table: tests/fault/run_fault_table.sh) are not run by
# //... and not counted.
mapfile -t targets < <(bazel query --noshow_progress \
  'tests(//...) except attr("target_compatible_with", "cuda", tests(//...)) except attr("tags", "manual", tests(//...))' 2>/dev/null)
testlogs=$(bazel info "${BAZEL_FLAGS[@]}" bazel-testlogs 2>/dev/null)
# count_tests LABEL: prints the failing cases and "N passed, ..." of the
# test.xml files now in bazel-testlogs; sets passed/failed/skipped.
count_tests() {
  local summary rc
  summary=$(mktemp /tmp/starling-test-summary.XXXXXX)
  python3 tests/count_results.py "$testlogs" "${targets[@]}" > "$summary"
  rc=$?
  grep -v ' passed, ' "$summary"
  read -r passed _ failed _ skipped _ < <(grep ' passed, ' "$summary" | tr -d ',')
  echo "$1: $passed passed, $failed failed, $skipped skipped"
  rm -f "$summary"
  return $rc
}
count_tests "bazel test //..."
count_rc=$?
main_passed=$passed main_failed=$failed main_skipped=$skipped
if [[ $bazel_rc -ne 0 && $count_rc -eq 0 ]]; then
  echo "FAILED: bazel test exited $bazel_rc with no failing test case (build error?)"
  extra_failed=$((extra_failed + 1))
fi

# deploy_suite NAME SCRIPT: runs a suite on the binaries just tested; exit
# 77 (the machine lacks root or the kernel's support) is a skip.
deploy_suite() {
  local name=$1 script=$2 rc
  step "$name ($script)"
  "$script" --bin-dir "$(bazel info "${BAZEL_FLAGS[@]}" bazel-bin 2>/dev/null)"
  rc=$?
  if [[ $rc -eq 0 ]]; then
    extra_passed=$((extra_passed + 1))
  elif [[ $rc -eq 77 ]]; then
    echo "SKIPPED: $name (the reason is above)"
    extra_skipped=$((extra_skipped + 1))
  else
    echo "FAILED: $name (run: $script)"
    extra_failed=$((extra_failed + 1))
  fi
}

if [[ $QUICK == 0 ]]; then
  deploy_suite "Slurm: deploy/slurm/starling.sbatch on a local 3-node cluster" \
    tests/deploy/slurm_test.sh
  deploy_suite "systemd: the units booted in a systemd-nspawn container" \
    tests/deploy/systemd_nspawn_test.sh

  # Every CPU-feature-dependent kernel on its portable path: Starling's own
  # (STARLING_PORTABLE_KERNELS, server/base/cpu_features.h), OpenBLAS's
  # (Prescott: SSE3, the oldest x86-64 kernels it has), PyTorch's
  # (ATEN_CPU_CAPABILITY=default) and glibc's libm and string functions (no
  # AVX, AVX2, FMA or AVX-512 variants). Same binaries; every test reruns
  # but those tagged kernel_independent (membership, restarts and
  # re-formation, whose kernels are the ones the other tests check, and the
  # starling.torch comparisons with PyTorch, both sides on PyTorch's
  # kernels): the suite's slowest.
  step "bazel test //... on the portable kernels (no AVX, AVX2, AVX-512, F16C or FMA paths)"
  PORTABLE_ENV=(
    --test_env=STARLING_PORTABLE_KERNELS=1
    --test_env=OPENBLAS_CORETYPE=Prescott
    --test_env=ATEN_CPU_CAPABILITY=default
    --test_env=GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX,-AVX2,-FMA,-FMA4,-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ
  )
  bazel test "${BAZEL_FLAGS[@]}" "${PORTABLE_ENV[@]}" \
    --test_tag_filters=-kernel_independent --keep_going //...
  portable_rc=$?
  mapfile -t targets < <(bazel query --noshow_progress \
    'tests(//...) except attr("target_compatible_with", "cuda", tests(//...)) except attr("tags", "manual|kernel_independent", tests(//...))' 2>/dev/null)
  count_tests "portable kernels"
  if [[ $? -eq 0 && $portable_rc -eq 0 ]]; then
    extra_passed=$((extra_passed + 1))
  else
    echo "FAILED: the portable-kernel run (rerun one test with: bazel test ${PORTABLE_ENV[*]} //pkg:test)"
    extra_failed=$((extra_failed + (failed > 0 ? failed : 1)))
  fi
fi

if [[ $QUICK == 0 && -x /usr/local/cuda/bin/nvcc ]]; then
  step "CUDA build (--config=cuda): worker/gpu and the trainer's cuBLAS/cuDNN backend compile with nvcc and their tests run"
  if bazel test "${BAZEL_FLAGS[@]}" --config=cuda //worker/gpu/... //worker/train/... \
      && bazel build "${BAZEL_FLAGS[@]}" --config=cuda //worker/trainer:starling-worker; then
    extra_passed=$((extra_passed + 1))
  else
    echo "FAILED: --config=cuda build of //worker/gpu, //worker/train or //worker/trainer"
    extra_failed=$((extra_failed + 1))
  fi
fi

if [[ $QUICK == 0 ]]; then
  step "fuzzers: tests/fuzz/run_fuzzers.sh --time 15 (libFuzzer + ASan/UBSan, clang)"
  if tests/fuzz/run_fuzzers.sh --time 15; then
    extra_passed=$((extra_passed + 1))
  else
    echo "FAILED: tests/fuzz/run_fuzzers.sh (the crashing input and log are named above)"
    extra_failed=$((extra_failed + 1))
  fi
fi

step "summary"
passed=$((main_passed + extra_passed))
failed=$((main_failed + extra_failed))
skipped=$((main_skipped + extra_skipped))
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[[ $failed -eq 0 ]]
