#!/usr/bin/env bash
# README command (a): builds everything (optimised) and runs the largest real
# thing Starling has today, saying what it shows.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

echo "=== building everything (bazel build -c opt //...) ==="
bazel build --config=opt --config=ci //...

echo
echo "=== GPU path: CUDA device query ==="
bazel-bin/worker/gpu/starling-device-query

echo
echo "=== control plane: coordinator protocol round trip over loopback gRPC ==="
bazel-bin/tests/control_plane/grpc_roundtrip_test --gtest_brief=1
