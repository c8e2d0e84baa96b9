#!/usr/bin/env bash
# Runs every Starling test and ends with one line "N passed, N failed".
#
#   tests/run_all.sh            format check, bazel test //..., CUDA build
#                               check, 15 s of libFuzzer per harness
#   tests/run_all.sh --quick    skip the CUDA build check and the fuzzers
#
# Counts GoogleTest cases from Bazel's test.xml files (tests/count_results.py);
# the format check counts as one case. Exits non-zero on any failure and
# always shuts the Bazel server down at the end (otherwise its JVM lingers).
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

BAZEL_FLAGS=(--config=ci)
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

extra_passed=0
extra_failed=0
step() { echo; echo "=== $* ==="; }

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
bazel test "${BAZEL_FLAGS[@]}" --keep_going //...
bazel_rc=$?

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
mapfile -t targets < <(bazel query --noshow_progress 'tests(//...)' 2>/dev/null)
testlogs=$(bazel info "${BAZEL_FLAGS[@]}" bazel-testlogs 2>/dev/null)
python3 tests/count_results.py "$testlogs" "${targets[@]}" > /tmp/starling-test-summary.$$
count_rc=$?
grep -v ' passed, ' /tmp/starling-test-summary.$$
read -r passed _ failed _ skipped _ < <(grep ' passed, ' /tmp/starling-test-summary.$$ | tr -d ',')
rm -f /tmp/starling-test-summary.$$
passed=$((passed + extra_passed))
failed=$((failed + extra_failed))
if [[ $bazel_rc -ne 0 && $count_rc -eq 0 ]]; then
  echo "FAILED: bazel test exited $bazel_rc with no failing test case (build error?)"
  failed=$((failed + 1))
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[[ $failed -eq 0 ]]
