#!/usr/bin/env bash
# Builds (once, cached in /var/cache/warren-tools) the injected editor's tools image that the
# editor tests use: the same script `warren tools build` runs; see its header.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash crates/warren/tools/build-editor.sh "$@"
