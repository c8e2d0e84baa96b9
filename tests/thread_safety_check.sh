#!/usr/bin/env bash
# Clang's thread-safety analysis over Starling's C++ (STYLE.md §5): clang
# parses every .cc under server/ and client/ with -Wthread-safety
# -Wthread-safety-beta -Werror, which checks ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED and the other Abseil lock annotations.
#
#   tests/thread_safety_check.sh               every .cc under server/, client/
#                                              but lock-free tests (below)
#   tests/thread_safety_check.sh --all         those tests too
#   tests/thread_safety_check.sh FILE.cc ...   only these (from the repo root)
#   tests/thread_safety_check.sh -j N ...      N compiles at once (default nproc)
#   tests/thread_safety_check.sh --no-cache    check every file again
#
# A test (*_test.cc) that names no lock or lock annotation and includes no
# header that declares a function needing a lock held (LOCKS_REQUIRED) has
# nothing for the analysis to check; without --all those (about 75 of the
# ~100 tests; 214 -> 171 s of a CI run on 2 cores) are left out.
#
# Prints one line per failing file, then the failing files' diagnostics, then
# "thread-safety: N files (N cached), N failed"; exits 1 on any failure.
# CLANGXX names the compiler (default clang++, Debian's clang 14).
#
# -Wthread-safety-beta adds the lock-order checks (ABSL_ACQUIRED_BEFORE /
# ABSL_ACQUIRED_AFTER), which clang 14 skips without it; the tree is clean
# under it. -Wthread-safety-negative is not used: it would want a negative
# requirement (ABSL_EXCLUSIVE_LOCKS_REQUIRED(!mu_)) on every caller of a
# function that takes a lock.
#
# Why a script and not a Bazel --config: Bazel 4.2.3's auto-configured
# toolchain switches to clang only through --repo_env=CC=clang, which
# re-configures @local_config_cc: in one output base the gcc and clang builds
# would take turns rebuilding everything, and a second output base means a
# second Bazel server compiling and linking it all again. Here clang only
# parses (-fsyntax-only: the analysis runs in the front end) and Bazel's gcc
# outputs are left alone. The flags follow what Bazel passes: -std=c++17,
# -iquote the workspace and bazel-bin (generated .pb.h, built first), and the
# copts of the @system libraries (bazel/pkg_config.bzl). Common system
# headers (std, Abseil; GoogleTest for tests) come from two precompiled
# headers, which halves the time.
#
# A file that passed is not parsed again while nothing it read changed: the
# cache (.cache/thread_safety/, ignored by git) keeps, per file, the list of
# files clang read (-MD) and a hash of their contents (system headers: size
# and mtime), of clang's version and of the flags.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

CLANGXX=${CLANGXX:-clang++}
parallel=$(nproc)
cache=.cache/thread_safety
files=()
all=0
skipped=0
while (($#)); do
  case "$1" in
    -j) parallel=${2:?-j needs a number}; shift 2 ;;
    -j*) parallel=${1#-j}; shift ;;
    --no-cache) cache="" ; shift ;;
    --all) all=1; shift ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    -*) echo "thread_safety_check.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
# lock_free_test FILE: FILE names no lock or lock annotation, and none of
# the headers it includes declares a lock requirement.
lock_free_test() {
  local header
  grep -qE 'Mutex|GUARDED_BY|LOCKS_(REQUIRED|EXCLUDED)|ABSL_(ACQUIRE|RELEASE|ASSERT)' "$1" &&
    return 1
  while IFS= read -r header; do
    [[ -f $header ]] && grep -q 'LOCKS_REQUIRED' "$header" && return 1
  done < <(grep -oE '^#include "[^"]+\.h"' "$1" | cut -d'"' -f2)
  return 0
}
if ((${#files[@]} == 0)); then
  # Tracked and new (not ignored) files; a tracked file deleted in the
  # working tree is skipped.
  while IFS= read -r f; do
    [[ -f $f ]] || continue
    if ((!all)) && [[ $f == *_test.cc ]] && lock_free_test "$f"; then
      skipped=$((skipped + 1))
      continue
    fi
    files+=("$f")
  done < <(git ls-files --cached --others --exclude-standard -- 'server/*.cc' 'client/*.cc' | sort -u)
fi

start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/starling-tsa.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Generated headers: every genrule (protoc) that server/ or client/ needs.
# --keep_going: a package that does not load yet should not hide the rest.
mapfile -t genrules < <(bazel query --noshow_progress --keep_going \
  'filter("^//", kind(genrule, deps(//server/... + //client/...)))' 2>"$tmp/query.log")
if ((${#genrules[@]} > 0)) &&
  ! bazel build --config=ci "${genrules[@]}" >"$tmp/build.log" 2>&1; then
  cat "$tmp/query.log" "$tmp/build.log"
  echo "FAILED: bazel build of the generated headers (${genrules[*]})"
  exit 1
fi
bin=$(bazel info --config=ci bazel-bin 2>/dev/null)
output_base=$(bazel info output_base 2>/dev/null)
if [[ ! -d $bin || ! -d $output_base ]]; then
  echo "FAILED: bazel info gave no bazel-bin or output_base"
  exit 1
fi

# The copts of every @system library (pkg-config --cflags), -I as -isystem.
system_build="$output_base/external/system/BUILD"
if ! mapfile -t system_flags < <(python3 - "$system_build" <<'EOF'
import ast, sys
flags = []
for node in ast.walk(ast.parse(open(sys.argv[1]).read())):
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg == "copts":
                for flag in ast.literal_eval(kw.value):
                    if flag.startswith("-I"):
                        flag = "-isystem" + flag[2:]
                    if flag not in flags:
                        flags.append(flag)
print("\n".join(flags))
EOF
); then
  echo "FAILED: cannot read the @system copts from $system_build"
  exit 1
fi
bazel_s=$((SECONDS - start))

flags=(-std=c++17 -Wthread-safety -Wthread-safety-beta -Werror
  -iquote . -iquote "$bin" "${system_flags[@]}")

# keys.py GLOBAL_KEY < "index<TAB>path<TAB>depfile" lines: prints
# "index<TAB>key" for each, the key hashing GLOBAL_KEY, the path and every
# file the depfile lists ("-" when the depfile or one of them is missing).
cat >"$tmp/keys.py" <<'EOF'
import hashlib, os, sys
digests = {}
def digest(path):
    if path not in digests:
        try:
            if path.startswith("/usr/"):
                st = os.stat(path)
                digests[path] = "%d:%d" % (st.st_size, st.st_mtime_ns)
            else:
                with open(path, "rb") as f:
                    digests[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            digests[path] = None
    return digests[path]
for line in sys.stdin:
    index, path, depfile = line.rstrip("\n").split("\t")
    try:
        with open(depfile) as f:
            deps = f.read().replace("\\\n", " ").split(":", 1)[1].split()
    except (OSError, IndexError):
        print(index + "\t-")
        continue
    h = hashlib.sha256((sys.argv[1] + "\n" + path + "\n").encode())
    for dep in deps:
        d = digest(dep)
        if d is None:
            h = None
            break
        h.update(("%s %s\n" % (dep, d)).encode())
    print(index + "\t" + (h.hexdigest() if h else "-"))
EOF
global_key=$({ "$CLANGXX" --version; printf '%s\n' "${flags[@]}"; } | sha256sum | cut -d' ' -f1)
keys() {  # $1: depfile of index $i is $1/$i.d; prints "index<TAB>key"
  for i in "${!files[@]}"; do
    printf '%s\t%s\t%s\n' "$i" "${files[$i]}" "$1/$i.d"
  done | python3 "$tmp/keys.py" "$global_key"
}

# What the cache already passed: linked by index into $tmp/old.
mkdir -p "$tmp/old" "$tmp/new"
todo=()
if [[ -n $cache ]]; then
  for i in "${!files[@]}"; do
    entry="$cache/files/${files[$i]#/}"
    [[ -f $entry.d ]] && ln -s "$PWD/$entry.d" "$tmp/old/$i.d"
  done
  declare -A old_key=()
  while IFS=$'\t' read -r i key; do old_key[$i]=$key; done < <(keys "$tmp/old")
  for i in "${!files[@]}"; do
    passed=$(cat "$cache/files/${files[$i]#/}.key" 2>/dev/null)
    if [[ ${old_key[$i]:--} == - || ${old_key[$i]} != "$passed" ]]; then
      todo+=("$i")
    fi
  done
else
  todo=("${!files[@]}")
fi

# Two precompiled headers: tests also get GoogleTest (which costs every
# other file ~0.2 s to load). Their sources sit at a fixed path (the cache,
# written only when they change) so that the files' dependency lists stay
# valid; if one fails, files go without it.
pch_dir=${cache:-$tmp}/pch
mkdir -p "$pch_dir"
cat >"$tmp/base.h" <<'EOF'
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
EOF
{
  cat "$tmp/base.h"
  echo '#include "gmock/gmock.h"'
  echo '#include "gtest/gtest.h"'
} >"$tmp/test.h"
if ((${#todo[@]} > 0)); then
  for p in base test; do
    cmp -s "$tmp/$p.h" "$pch_dir/$p.h" || cp "$tmp/$p.h" "$pch_dir/$p.h"
    "$CLANGXX" "${flags[@]}" -x c++-header "$pch_dir/$p.h" -o "$tmp/$p.pch" \
      >"$tmp/$p.pch.log" 2>&1 &
  done
  pch_failed=0
  for p in base test; do
    wait -n || pch_failed=1
  done
  if ((pch_failed)); then
    cat "$tmp"/*.pch.log
    echo "note: a precompiled header failed; compiling without them"
    rm -f "$tmp"/*.pch
  fi
fi

check_one() {  # $1: index into files
  local f=${files[$1]} pch=()
  if grep -qE '^#include "(gtest|gmock)/' "$f"; then
    [[ -f $tmp/test.pch ]] && pch=(-include-pch "$tmp/test.pch")
  else
    [[ -f $tmp/base.pch ]] && pch=(-include-pch "$tmp/base.pch")
  fi
  "$CLANGXX" "${flags[@]}" "${pch[@]}" -fsyntax-only -MD -MF "$tmp/new/$1.d" \
    "$f" >"$tmp/$1.log" 2>&1 || touch "$tmp/$1.failed"
}

for i in "${todo[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n; done
  check_one "$i" &
done
wait

# Record the passes; forget the failures.
if [[ -n $cache ]]; then
  while IFS=$'\t' read -r i key; do
    entry="$cache/files/${files[$i]#/}"
    mkdir -p "$(dirname "$entry")"
    if [[ -f $tmp/$i.failed || $key == - ]]; then
      rm -f "$entry.key" "$entry.d"
    else
      cp "$tmp/new/$i.d" "$entry.d.$$" && mv "$entry.d.$$" "$entry.d"
      echo "$key" >"$entry.key.$$" && mv "$entry.key.$$" "$entry.key"
    fi
  done < <(keys "$tmp/new" | grep -v $'\t-$'; for i in "${todo[@]}"; do
    [[ -f $tmp/$i.failed ]] && printf '%s\t-\n' "$i"; done)
fi

failed=()
for i in "${todo[@]}"; do
  [[ -f $tmp/$i.failed ]] || continue
  failed+=("$i")
  log="$tmp/$i.log"
  first=$(grep -m1 -E ': (fatal )?error: ' "$log" || head -1 "$log")
  errors=$(grep -cE ': (fatal )?error: ' "$log")
  if grep -q -- '-Wthread-safety' "$log"; then kind="thread-safety"; else kind="clang error"; fi
  more=""
  ((errors > 1)) && more=" (+$((errors - 1)) more)"
  echo "FAILED: ${files[$i]} [$kind]: $first$more"
done
for i in "${failed[@]}"; do
  echo
  echo "--- ${files[$i]}"
  head -60 "$tmp/$i.log"
done

version=$("$CLANGXX" --version | grep -o 'version [0-9.]*' | head -1)
left_out=""
((skipped > 0)) && left_out="; $skipped lock-free tests left out, --all checks them"
echo "thread-safety: ${#files[@]} files ($((${#files[@]} - ${#todo[@]})) cached$left_out)," \
  "${#failed[@]} failed (clang ${version#version }, -Wthread-safety" \
  "-Wthread-safety-beta -Werror; $((SECONDS - start)) s, of which bazel $bazel_s s)"
((${#failed[@]} == 0))
