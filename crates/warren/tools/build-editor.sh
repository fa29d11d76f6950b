#!/usr/bin/env bash
# Builds the tools image of Warren's injected editor: code-server (VS Code in the browser, MIT,
# from the npm registry) with the Node.js that runs it and the shared libraries both load
# besides glibc's, so a workspace image needs nothing of its own but glibc (ui.md, "The editor
# in every workspace"). `warren tools build` runs this script; so does `.ci/setup-editor.sh`.
#
#   build-editor.sh [--version V] [--cache DIR] [--image NAME] [--engine podman|docker|none]
#
# 1. The editor's directory, built once and cached in DIR (default
#    /var/cache/warren-tools/code-server-V; skipped when DIR/ready exists):
#      node_modules/code-server/…   the editor
#      bin/node                     this machine's Node.js, its RUNPATH set to ../lib
#      lib/…                        the libraries node and the editor's native modules load,
#                                   except glibc's own, which must match the image's loader
#    Offline-safe with the four adjustments of the shared notes' editor.md: run as root with
#    --unsafe-perm, libkrb5-dev for a native module, npm_config_yes for node-pty's npx call,
#    and ripgrep's GitHub download replaced by Debian's rg. Proven by /healthz before caching.
# 2. The tools image NAME (default localhost/warren-tools:code-server-V), imported into the
#    engine (skipped with --engine none, or when the image already holds this build):
#      /warren-tools/code-server/   the directory above
#      /warren-tools/install        copies every tool into the directory it is given
#      /warren-tools/BUILD          this build's id (install is a no-op where it is present)
#      /bin/sh, cp, …               busybox-static, for install
#    Workspaces get it through an init container (Kubernetes) or a shared volume (engines).
set -euo pipefail

VERSION="${WARREN_EDITOR_VERSION:-4.100.3}"
cache=""
image=""
engine=""
while [ $# -gt 0 ]; do
    case "$1" in
        --version) VERSION="$2"; shift 2 ;;
        --cache) cache="$2"; shift 2 ;;
        --image) image="$2"; shift 2 ;;
        --engine) engine="$2"; shift 2 ;;
        *) echo "build-editor: unknown argument $1 (--version, --cache, --image, --engine)" >&2; exit 2 ;;
    esac
done
cache="${cache:-${WARREN_EDITOR_CACHE:-/var/cache/warren-tools/code-server-$VERSION}}"
image="${image:-localhost/warren-tools:code-server-$VERSION}"
if [ -z "$engine" ]; then
    if command -v podman >/dev/null 2>&1; then engine=podman
    elif command -v docker >/dev/null 2>&1; then engine=docker
    else engine=none; fi
fi
start=$SECONDS
log() { printf 'build-editor: %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
# The cache needs root only where its parent is not the user's to write (/var/cache).
cache_parent="$(dirname "$cache")"
mkdir -p "$cache_parent" 2>/dev/null || true
as_cache_owner() { if [ -w "$cache_parent" ]; then "$@"; else as_root "$@"; fi; }

build_directory() {
    need=()
    command -v node >/dev/null 2>&1 || need+=(nodejs)
    command -v npm >/dev/null 2>&1 || need+=(npm)
    command -v rg >/dev/null 2>&1 || need+=(ripgrep)
    dpkg -s libkrb5-dev >/dev/null 2>&1 || need+=(libkrb5-dev)
    command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
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

    # No LD_LIBRARY_PATH at run time: it would reach every program of the editor's terminals.
    patchelf --set-rpath '$ORIGIN/../lib' "$out/bin/node"

    # Proof it runs from the copy alone, before it is cached.
    local port pid ok=""
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    mkdir -p "$work/home" "$work/project"
    HOME="$work/home" "$out/bin/node" \
        "$out/node_modules/code-server/out/node/entry.js" --auth none \
        --bind-addr "127.0.0.1:$port" --disable-telemetry --disable-update-check \
        --disable-workspace-trust "$work/project" >"$work/run.log" 2>&1 &
    pid=$!
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

    as_cache_owner mkdir -p "$cache_parent"
    as_cache_owner rm -rf "$cache"
    as_cache_owner mv "$out" "$cache"
    echo "code-server-$VERSION-$(date -u +%Y%m%dT%H%M%SZ)" | as_cache_owner tee "$cache/ready" >/dev/null
    log "code-server $VERSION ready in $cache ($(du -sh "$cache" | cut -f1), $((SECONDS - start))s)"
}

build_image() {
    local build busybox root
    build="$(cat "$cache/ready")"
    if [ "$("$engine" image inspect --format '{{ index .Config.Labels "dev.warren.tools-build" }}' "$image" 2>/dev/null)" = "$build" ]; then
        log "image $image already holds $build"
        return
    fi
    busybox="$(command -v busybox || true)"
    [ -x /bin/busybox ] && busybox=/bin/busybox
    # The image has no libc: only a static busybox runs in it.
    if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
        log "apt-get install busybox-static"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q busybox-static
        busybox=/bin/busybox
    fi
    log "building image $image ($build)"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    root="$work/root"
    mkdir -p "$root/bin" "$root/tmp" "$root/warren-tools"
    chmod 1777 "$root/tmp"
    cp "$busybox" "$root/bin/busybox"
    local applet
    for applet in sh cp mv rm mkdir chmod cat cmp date basename dirname echo test ls; do
        ln -sf busybox "$root/bin/$applet"
    done
    mkdir -p "$root/warren-tools/code-server"
    cp -a "$cache/." "$root/warren-tools/code-server/"
    rm -f "$root/warren-tools/code-server/ready"
    echo "$build" > "$root/warren-tools/BUILD"
    cat > "$root/warren-tools/install" <<'INSTALL'
#!/bin/sh
# Copies this image's tools into DEST ($1), each whole (staged, then renamed into place);
# does nothing when DEST already holds this build (DEST/.build). Safe to run twice at once.
set -eu
dest="$1"
src="$(dirname "$0")"
build="$(cat "$src/BUILD")"
if [ -f "$dest/.build" ] && [ "$(cat "$dest/.build")" = "$build" ]; then
    echo "tools $build already in $dest"
    exit 0
fi
stage="$dest/.staging-$$"
rm -rf "$stage"
mkdir -p "$stage"
for tool in "$src"/*/; do
    name="$(basename "$tool")"
    cp -R "$tool" "$stage/$name"
    chmod -R a+rX "$stage/$name"
    if [ -e "$dest/$name" ]; then mv "$dest/$name" "$stage/$name.old"; fi
    mv "$stage/$name" "$dest/$name"
done
echo "$build" > "$stage/build"
mv "$stage/build" "$dest/.build"
rm -rf "$stage"
echo "tools $build copied into $dest"
INSTALL
    chmod -R a+rX "$root/warren-tools"
    tar -C "$root" -cf "$work/rootfs.tar" .
    "$engine" import --change "LABEL dev.warren.tools-build=$build" \
        --change 'CMD ["/bin/sh"]' "$work/rootfs.tar" "$image" >/dev/null
    rm -rf "$work"
    trap - EXIT
    log "image $image built ($((SECONDS - start))s)"
}

if [ -f "$cache/ready" ] && [ -x "$cache/bin/node" ] &&
    [ "$(patchelf --print-rpath "$cache/bin/node" 2>/dev/null || true)" = '$ORIGIN/../lib' ]; then
    log "code-server $VERSION cached in $cache (build skipped)"
else
    build_directory
fi
if [ "$engine" != none ]; then
    build_image
fi
