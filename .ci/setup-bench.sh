#!/usr/bin/env bash
# Installs what the benchmarks compare Warren with, beyond what the tests need: the reference
# Dev Containers CLI (@devcontainers/cli from npm, pinned) for `cargo bench --bench devcontainer`.
# Not run by .ci/run (benchmarks are not part of the test suite). Idempotent.
set -euo pipefail

log() { printf 'setup-bench: %s\n' "$*"; }

TOOLS_CACHE="${WARREN_TOOLS_CACHE:-/var/cache/warren-tools}"
DEVCONTAINER_CLI_VERSION=0.89.0
dir="$TOOLS_CACHE/devcontainers-cli-$DEVCONTAINER_CLI_VERSION"
if [ ! -x "$dir/node_modules/.bin/devcontainer" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        log "apt-get install nodejs npm"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm
    fi
    log "npm install @devcontainers/cli $DEVCONTAINER_CLI_VERSION (into $dir)"
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && npm install --silent --no-audit --no-fund --omit=dev \
        "@devcontainers/cli@$DEVCONTAINER_CLI_VERSION")
fi
ln -sf "$dir/node_modules/.bin/devcontainer" /usr/local/bin/devcontainer
log "devcontainer: $(devcontainer --version)"
