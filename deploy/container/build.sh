#!/usr/bin/env bash
# Builds the `warren` container image with podman (or docker: CONTAINER_ENGINE=docker).
#
#   deploy/container/build.sh [IMAGE] [BASE]
#
# IMAGE defaults to localhost/warren:latest; BASE as in the Containerfile. WARREN_BINARY
# names an already built binary (default: `cargo build --release -p warren` and its output).
#
# The image gets the binary without its debug information (line tables are four fifths of a
# release build: 342 MB with them, 75 MB without; function names stay, so a backtrace still
# names them). The debug information is kept beside the binary as `warren.debug`, which the
# shipped binary names (`.gnu_debuglink`): `gdb` or `addr2line -e warren.debug` symbolise a
# crash's addresses with file and line. WARREN_DEBUG_OUT says where it goes instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
image="${1:-localhost/warren:latest}"
base="${2:-docker.io/library/debian:bookworm-slim}"
engine="${CONTAINER_ENGINE:-podman}"
binary="${WARREN_BINARY:-}"
if [ -z "$binary" ]; then
    cargo build --release --locked -p warren
    binary="${CARGO_TARGET_DIR:-target}/release/warren"
fi
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp deploy/container/Containerfile "$context/Containerfile"
if ! command -v objcopy >/dev/null 2>&1; then
    echo "build.sh: objcopy (Debian package binutils) is needed to strip the binary" >&2
    exit 1
fi
debug_out="${WARREN_DEBUG_OUT:-$(dirname "$binary")/warren.debug}"
objcopy --only-keep-debug "$binary" "$debug_out"
objcopy --strip-debug --add-gnu-debuglink="$debug_out" "$binary" "$context/warren"
echo "debug information kept in $debug_out"
"$engine" build --quiet --build-arg "BASE=$base" -t "$image" "$context"
echo "built $image"
