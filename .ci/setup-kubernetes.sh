#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl from
# Debian's kubernetes source package (no prebuilt binaries can be downloaded on the CI machines)
# and caches them, and installs containerd, runc and the CNI plugins from Debian, so the
# Kubernetes runtime's tests run on a real one-node cluster (and the GitOps benchmark compares
# with `kubectl apply --server-side`). See shared notes "kubernetes.md".
#
# The tree's vendored github.com/modern-go/reflect2 1.0.1 crashes under Go 1.18+ (custom
# resources, decoded through json-iterator, segfault the API server); Debian's 1.0.2, the
# release that fixed it and API-compatible, replaces it before the build.
#
# Cache: $WARREN_K8S_CACHE (default /var/cache/warren-k8s); binaries land in "$cache/bin".
# When all binaries already exist there the build is skipped. etcd comes from Debian's
# etcd-server package (/usr/bin/etcd); containerd, runc and containernetworking-plugins (the
# node's runtime and its bridge network) from Debian too; all are always installed.
set -euo pipefail

cache="${WARREN_K8S_CACHE:-/var/cache/warren-k8s}"
bin="$cache/bin"
start=$SECONDS
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Only what is missing is installed: a machine with Docker's containerd.io keeps it (installing
# Debian's containerd beside it would remove Docker), and only services this run installed are
# disabled below.
have() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null; }
missing=()
have etcd || missing+=(etcd-server)
have containerd || missing+=(containerd)
have runc || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
have iptables || missing+=(iptables)
have conntrack || missing+=(conntrack)
have ethtool || missing+=(ethtool)
have socat || missing+=(socat)
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get -o DPkg::Lock::Timeout=600 update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-remove "${missing[@]}"
fi
# Debian's etcd-server and containerd packages enable system services on the default ports and
# sockets; the tests start their own (free ports, private sockets), so those are not needed
# (ignore failures: no systemd in containers).
for installed in "${missing[@]}"; do
  case "$installed" in
    etcd-server) as_root systemctl disable --now etcd >/dev/null 2>&1 || true ;;
    containerd) as_root systemctl disable --now containerd >/dev/null 2>&1 || true ;;
  esac
done

if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ] \
  && [ -x "$bin/kube-scheduler" ] && [ -x "$bin/kubelet" ] && [ -x "$bin/pause" ] \
  && [ -f "$bin/.reflect2-1.0.2" ]; then
  echo "kubernetes binaries cached in $bin (build skipped, $((SECONDS - start))s)"
  exit 0
fi

# Source packages for bookworm's main component, signed by Debian's archive key.
src_list=/etc/apt/sources.list.d/warren-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  as_root tee "$src_list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
as_root apt-get -o DPkg::Lock::Timeout=600 update -q
as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q golang-go rsync etcd-server make \
  golang-github-modern-go-reflect2-dev gcc libc6-dev

work="$(mktemp -d "${TMPDIR:-/tmp}/warren-k8s-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source --download-only kubernetes >/dev/null
orig="$(ls kubernetes_*.orig.tar.* | head -n1)"
mkdir src
tar -xf "$orig" -C src --strip-components=1
cd src
# The tree's make rules want it on a GOPATH as k8s.io/kubernetes; plain `go build -mod=vendor` fails.
mkdir -p .go/src/k8s.io
ln -s ../../.. .go/src/k8s.io/kubernetes
export GOPATH="$PWD/.go" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-}"
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -f "$reflect2/reflect2.go" ] || { echo "Debian's reflect2 source is missing at $reflect2" >&2; exit 1; }
rsync -a --delete --exclude '.git' --exclude '*_test.go' --exclude 'test*' --exclude 'go.mod' --exclude 'go.sum' "$reflect2/" vendor/github.com/modern-go/reflect2/
# Keep the ~1 GB Go build cache inside the build dir so it is removed with it.
export GOCACHE="$work/gocache"
echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl (several minutes on 2 cores)"
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kubectl" >"$work/build.log" 2>&1 || {
  tail -n 50 "$work/build.log" >&2
  echo "kubernetes build failed" >&2
  exit 1
}
out="$(find _output -type f -path '*/bin/kube-apiserver' | head -n1)"
as_root mkdir -p "$bin"
as_root install -m 0755 "$out" "$(dirname "$out")/kube-controller-manager" "$(dirname "$out")/kube-scheduler" \
  "$(dirname "$out")/kubelet" "$(dirname "$out")/kubectl" "$bin/"
# The sandboxes' pause process, from the same tree (no registry serves the pause image here);
# the tests wrap it into an image imported into the node's containerd.
gcc -Os -static -DVERSION=v3.4.1-warren -o "$work/pause" build/pause/linux/pause.c
as_root install -m 0755 "$work/pause" "$bin/pause"
as_root touch "$bin/.reflect2-1.0.2"
echo "built kubernetes $(basename "$orig") in $((SECONDS - start))s"
echo "kubernetes binaries in $bin"
"$bin/kube-apiserver" --version || true
