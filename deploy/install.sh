#!/usr/bin/env bash
# Installs Starling's binaries, systemd units and example configs:
#   PREFIX/bin/{starling-coordinator,starling-node,starling-worker,starlingctl}
#   /etc/systemd/system/{starling-coordinator.service,starling-node@.service}
#   /etc/starling/{coordinator.conf,node-0.conf}  (never overwritten: an
#       existing file is kept and the new example written beside it as .new)
# and creates the system user `starling` (the units' User=/Group=).
#
#   deploy/install.sh                      build output of `bazel build --config=opt //...`
#   deploy/install.sh --bin-dir DIR        binaries from DIR (flat, or a bazel-bin tree)
#   deploy/install.sh --destdir /tmp/root  stage under a root (tests, packaging)
#   deploy/install.sh --prefix /opt/starling   binaries in /opt/starling/bin
#                                          (the units' ExecStart= follow)
#   deploy/install.sh --no-user            do not create the `starling` user
#
# Under --destdir the user is created with `useradd --root DESTDIR` when
# DESTDIR/etc/passwd exists, and systemd is not reloaded. Otherwise, when
# systemd runs, `systemctl daemon-reload` follows. Needs root for /.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DESTDIR=
PREFIX=/usr/local
BIN_DIR=
CREATE_USER=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --destdir) DESTDIR=${2:?--destdir needs a directory}; shift 2 ;;
    --destdir=*) DESTDIR=${1#*=}; shift ;;
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --bin-dir) BIN_DIR=${2:?--bin-dir needs a directory}; shift 2 ;;
    --bin-dir=*) BIN_DIR=${1#*=}; shift ;;
    --no-user) CREATE_USER=0; shift ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ -n $DESTDIR ]]; then
  mkdir -p "$DESTDIR"
  DESTDIR=$(cd "$DESTDIR" && pwd)
fi
[[ -z $BIN_DIR ]] && BIN_DIR="$REPO/bazel-bin"

# name -> path under a bazel-bin tree
declare -A BAZEL_PATHS=(
  [starling-coordinator]=server/coordinator/starling-coordinator
  [starling-node]=server/node/starling-node
  [starling-worker]=worker/trainer/starling-worker
  [starlingctl]=server/coordinator/starlingctl
)
REQUIRED=(starling-coordinator starling-node)

find_binary() {
  local name=$1
  if [[ -x $BIN_DIR/$name ]]; then
    echo "$BIN_DIR/$name"
  elif [[ -x $BIN_DIR/${BAZEL_PATHS[$name]} ]]; then
    echo "$BIN_DIR/${BAZEL_PATHS[$name]}"
  fi
}

bindir="$DESTDIR$PREFIX/bin"
unitdir="$DESTDIR/etc/systemd/system"
confdir="$DESTDIR/etc/starling"
install -d -m 755 "$bindir" "$unitdir" "$confdir"

for name in starling-coordinator starling-node starling-worker starlingctl; do
  src=$(find_binary "$name")
  if [[ -z $src ]]; then
    if [[ " ${REQUIRED[*]} " == *" $name "* ]]; then
      echo "install.sh: no $name in $BIN_DIR (build first: bazel build --config=opt //..., or --bin-dir)" >&2
      exit 1
    fi
    echo "install.sh: skipping $name (not in $BIN_DIR)"
    continue
  fi
  install -m 755 "$src" "$bindir/$name"
  echo "installed $bindir/$name"
done

for unit in starling-coordinator.service starling-node@.service; do
  sed "s|/usr/local/bin/|$PREFIX/bin/|g" "$REPO/deploy/systemd/$unit" > "$unitdir/$unit.tmp"
  chmod 644 "$unitdir/$unit.tmp"
  mv "$unitdir/$unit.tmp" "$unitdir/$unit"
  echo "installed $unitdir/$unit"
done

# Configs hold the operator's settings: never overwrite them.
install_config() {
  local src=$1 dst=$2
  if [[ -e $dst ]]; then
    install -m 644 "$src" "$dst.new"
    echo "kept $dst (the example is in $dst.new)"
  else
    install -m 644 "$src" "$dst"
    echo "installed $dst"
  fi
}
install_config "$REPO/deploy/config/coordinator.conf" "$confdir/coordinator.conf"
install_config "$REPO/deploy/config/node.conf" "$confdir/node-0.conf"

if [[ $CREATE_USER == 1 ]]; then
  root_args=()
  passwd=/etc/passwd
  if [[ -n $DESTDIR ]]; then
    root_args=(--root "$DESTDIR")
    passwd=$DESTDIR/etc/passwd
  fi
  if [[ ! -e $passwd ]]; then
    echo "install.sh: no $passwd; not creating user starling"
  elif grep -q '^starling:' "$passwd"; then
    echo "user starling exists"
  else
    useradd "${root_args[@]}" --system --user-group --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin starling
    echo "created system user starling"
  fi
fi

if [[ -z $DESTDIR && -d /run/systemd/system ]]; then
  systemctl daemon-reload
  echo "systemctl daemon-reload done"
fi
cat <<MSG
Next: edit $confdir/coordinator.conf and $confdir/node-0.conf, then
  systemctl enable --now starling-coordinator      # on the coordinator host
  systemctl enable --now starling-node@0           # on every training host
(deploy/README.md: secrets, several daemons per host, status)
MSG
