#!/usr/bin/env bash
# Builds the `warren` container image with podman (or docker: CONTAINER_ENGINE=docker).
#
#   deploy/container/build.sh [IMAGE] [BASE]
#
# IMAGE defaults to localhost/warren:latest; BASE as in the Containerfile. WARREN_BINARY
# names an already built binary (default: `cargo build --release -p warren` and its output).
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
cp "$binary" "$context/warren"
"$engine" build --quiet --build-arg "BASE=$base" -t "$image" "$context"
echo "built $image"
