#!/usr/bin/env bash
# Installs the real clients the access tests drive: headless Chromium, OpenSSH's ssh/sftp,
# sshpass (SSH password = token), curl, openssl (a throwaway TLS certificate), and websocat (not packaged by Debian 12: built from
# crates.io, pinned). Idempotent; prints what it did.
set -euo pipefail

log() { printf 'setup-tools: %s\n' "$*"; }

need=()
for pair in chromium:chromium ssh:openssh-client sftp:openssh-client sshpass:sshpass \
    curl:curl ssh-keygen:openssh-client openssl:openssl; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
    log "apt-get install ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

# The SSH tests' simulated workspaces run sftp-server on this machine (the proxy's sftp
# subsystem looks for it where Debian puts it); no recommends, so no sshd comes along.
if [ ! -x /usr/lib/openssh/sftp-server ]; then
    log "apt-get install openssh-sftp-server"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-sftp-server
fi

WEBSOCAT_VERSION=1.14.0
if ! command -v websocat >/dev/null 2>&1; then
    log "cargo install websocat $WEBSOCAT_VERSION (a few minutes)"
    # Not --locked: its lock file pins a traitobject release today's rustc refuses; no TLS
    # (the tests speak ws:// on loopback), so no OpenSSL headers are needed.
    cargo install --quiet websocat --version "$WEBSOCAT_VERSION" --no-default-features
fi
log "chromium: $(chromium --version 2>/dev/null || echo missing)"
log "websocat: $(websocat --version 2>/dev/null || echo missing)"
log "ssh: $(ssh -V 2>&1)"
