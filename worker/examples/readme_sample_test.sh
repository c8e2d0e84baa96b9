#!/bin/bash
# The README's API section shows quadratic_worker.cc's training loop: the
# code between the "[README API sample begins]" and "[... ends]" markers
# must be the README's first C++ block, character for character, so that
# the README's example is the code that runs.
set -euo pipefail
readme="$1"
source="$2"
want="$(sed -n '/\[README API sample begins\]/,/\[README API sample ends\]/p' \
  "$source" | sed '1d;$d')"
have="$(awk '/^```cpp$/{inside=1; next} inside && /^```$/{exit} inside' \
  "$readme")"
if [[ -z "$want" ]]; then
  echo "no README API sample markers in $source" >&2
  exit 1
fi
if [[ "$want" != "$have" ]]; then
  echo "README.md's API sample differs from $source; copy the code between" \
    "the markers into README.md:" >&2
  diff <(echo "$have") <(echo "$want") >&2 || true
  exit 1
fi
echo "README API sample matches $source"
