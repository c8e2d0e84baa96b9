#!/usr/bin/env bash
# Installs every Debian package Starling's build, tests and demo need.
# Idempotent: when everything is installed it prints one line and exits in
# well under a second; `apt-get update` runs only when something is missing.
#
#   deploy/setup.sh           build + test + demo packages
#   deploy/setup.sh --bench   also what ../shared/peerbench needs (Gloo, Open MPI, iperf3)
#                             and torchvision for tests/bench/ddp_bench.sh
#   deploy/setup.sh --check   only report what is missing (exit 1 if anything)
set -euo pipefail

PACKAGES=(
  # Build: Bazel 4.2.3 and the C++ toolchain.
  bazel-bootstrap g++ pkg-config python3
  # Control plane: gRPC++ 1.51 and protobuf 3.21 with their code generators.
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  # Abseil 20220623, RDMA verbs, HTTP endpoints.
  libabsl-dev libibverbs-dev libcpp-httplib-dev
  # The fabric transport: libfabric 1.17 (verbs on InfiniBand/RoCE, tcp
  # here) and fi_info for deploy/fabric_smoke.sh.
  libfabric-dev libfabric-bin
  # sd_notify(3) for the systemd units; systemd-analyze for their check.
  libsystemd-dev systemd
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
  # Format check; network namespaces for multi-host tests.
  clang-format iproute2 procps
  prometheus  # promtool: `promtool check metrics` in the metrics tests
  # Node.js (npm): the dashboards' JSON Schema check (dashboards/tools).
  nodejs
  # Training: OpenBLAS (cblas_sgemm), zlib (gzip IDX files), Fashion-MNIST.
  libopenblas-dev zlib1g-dev dataset-fashion-mnist
  # The linear SVM's reference: LIBLINEAR 2.3.0 (liblinear-train/-predict).
  liblinear-tools
  # The Python package (client/python): pybind11 and Python's headers to
  # build it, PyTorch 1.13 (CPU) and NumPy for /usr/bin/python3, and
  # libtorch's C++ headers for its torch.distributed backend
  # (bazel/torch_configure.bzl).
  python3-dev pybind11-dev python3-pybind11 python3-torch python3-numpy
  libtorch-dev
  python3-pyflakes  # the Python files' check in tests/run_all.sh
  # The deploy suites in tests/run_all.sh: a local Slurm cluster (slurmctld,
  # slurmd, munged) and the systemd units booted in a systemd-nspawn
  # container whose root debootstrap builds from Debian's mirror.
  slurm-wlm munge systemd-container debootstrap
  # The coordinator's etcd store (--state_etcd): its tests start their own
  # etcd on loopback (the package's own service is not needed).
  etcd-server
)
BENCH_PACKAGES=(libgloo-dev openmpi-bin libopenmpi-dev iperf3 iputils-ping
  # tests/bench/ddp_bench.sh: torchvision's ResNet-18 (0.14, for Debian's torch 1.13).
  python3-torchvision)

mode=install
for arg in "$@"; do
  case "$arg" in
    --bench) PACKAGES+=("${BENCH_PACKAGES[@]}") ;;
    --check) mode=check ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# buildifier (BUILD/.bzl formatter) ships as a binary inside an npm package;
# optional: tests/run_all.sh skips its check when it is absent.
install_buildifier() {
  command -v buildifier >/dev/null 2>&1 && return 0
  command -v npm >/dev/null 2>&1 || return 0
  [[ $mode == check ]] && return 0
  echo "setup: installing buildifier from npm (@bazel/buildifier)"
  npm install -g --silent @bazel/buildifier >/dev/null 2>&1 ||
    echo "setup: buildifier could not be installed; its check will be skipped" >&2
}

if [[ ${#missing[@]} -eq 0 ]]; then
  install_buildifier
  echo "setup: all ${#PACKAGES[@]} packages installed"
  exit 0
fi
if [[ $mode == check ]]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
install_buildifier
echo "setup: done (${#missing[@]} package(s) installed)"
