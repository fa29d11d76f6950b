#!/usr/bin/env bash
# Builds the injected editor's tools directory once and caches it: code-server (VS Code in the
# browser, MIT, from the npm registry) with the Node.js that runs it and the shared libraries
# both load, so a workspace image needs nothing of its own (see the shared notes "editor.md").
#
# Cache: $WARREN_EDITOR_CACHE (default /var/cache/warren-tools/code-server-$VERSION), holding
#   node_modules/code-server/…   the editor
#   bin/node                     this machine's Node.js
#   lib/…                        the libraries node and the editor's native modules load,
#                                except glibc's own (run with LD_LIBRARY_PATH=lib): any image
#                                with glibc runs it; one without (musl) cannot, and the
#                                workspace is to say so rather than fail (ui.md)
# Skipped when the cache's `ready` marker exists. Offline-safe: the four adjustments the
# notes name (run as root with --unsafe-perm, libkrb5-dev for a native module, npm_config_yes
# for node-pty's npx call, ripgrep's GitHub download replaced by Debian's rg).
#
# Not yet part of `.ci/run`: nothing uses it until the editor lands (issue #17).
set -euo pipefail

VERSION="${WARREN_EDITOR_VERSION:-4.100.3}"
cache="${WARREN_EDITOR_CACHE:-/var/cache/warren-tools/code-server-$VERSION}"
start=$SECONDS
log() { printf 'setup-editor: %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -f "$cache/ready" ]; then
    log "code-server $VERSION cached in $cache (build skipped)"
    exit 0
fi

need=()
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need+=(libkrb5-dev)
if [ "${#need[@]}" -gt 0 ]; then
    log "apt-get install ${need[*]}"
    as_root apt-get -o DPkg::Lock::Timeout=600 update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${need[@]}"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# @vscode/ripgrep's postinstall downloads a release from GitHub unless its cache (in the
# temporary directory) already holds the archive under the name it asks for.
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
for v in 1.15.11 1.15.10 1.15.9; do
    mkdir -p "$TMPDIR/vscode-ripgrep-cache-$v"
    mkdir -p "$work/rg"
    cp "$(command -v rg)" "$work/rg/rg"
    for asset in ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz \
        ripgrep-v13.0.0-13-x86_64-unknown-linux-musl.tar.gz; do
        tar -C "$work/rg" -czf "$TMPDIR/vscode-ripgrep-cache-$v/$asset" rg
    done
done

log "npm install code-server@$VERSION (about a minute)"
mkdir -p "$work/build"
(
    cd "$work/build"
    npm_config_yes=true npm install --unsafe-perm --no-audit --no-fund --loglevel=error \
        "code-server@$VERSION"
)

log "copying node and the libraries it loads"
out="$work/out"
mkdir -p "$out/bin" "$out/lib"
mv "$work/build/node_modules" "$out/node_modules"
cp -L "$(command -v node)" "$out/bin/node"
libs() {
    ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true
}
{
    libs "$out/bin/node"
    find "$out/node_modules" -name '*.node' -type f -print0 |
        while IFS= read -r -d '' m; do libs "$m"; done
} | sort -u | while read -r lib; do
    # glibc's own libraries must match the image's loader: never shipped.
    case "$(basename "$lib")" in
        ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*) continue ;;
    esac
    cp -L "$lib" "$out/lib/$(basename "$lib")"
done

# Proof it runs from the copy alone, before it is cached.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
mkdir -p "$work/home" "$work/project"
HOME="$work/home" LD_LIBRARY_PATH="$out/lib" "$out/bin/node" \
    "$out/node_modules/code-server/out/node/entry.js" --auth none \
    --bind-addr "127.0.0.1:$port" --disable-telemetry --disable-update-check \
    --disable-workspace-trust "$work/project" >"$work/run.log" 2>&1 &
pid=$!
ok=""
for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
        ok=1
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
kill -TERM -- "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
if [ -z "$ok" ]; then
    log "code-server did not answer /healthz:"
    cat "$work/run.log" >&2
    exit 1
fi

as_root mkdir -p "$(dirname "$cache")"
as_root rm -rf "$cache"
as_root mv "$out" "$cache"
as_root touch "$cache/ready"
log "code-server $VERSION ready in $cache ($(du -sh "$cache" | cut -f1), $((SECONDS - start))s)"
