#!/usr/bin/env bash
# Installs the real clients the access tests drive: headless Chromium, OpenSSH's ssh/sftp,
# sshpass (SSH password = token), curl, openssl (a throwaway TLS certificate), Debian's
# docker-registry and htpasswd (a private registry for the pull-secret test), and websocat (not packaged by Debian 12: built from
# crates.io, pinned), and schemathesis (PyPI, pinned) for the API fuzzing test. Idempotent; prints
# what it did.
set -euo pipefail

log() { printf 'setup-tools: %s\n' "$*"; }

need=()
for pair in chromium:chromium ssh:openssh-client sftp:openssh-client sshpass:sshpass \
    curl:curl ssh-keygen:openssh-client openssl:openssl docker-registry:docker-registry \
    htpasswd:apache2-utils; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# GitOps over ssh:// is tested against a real sshd the test starts on a free port.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
if [ "${#need[@]}" -gt 0 ]; then
    log "apt-get install ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
# The tests start their own registry and sshd on free ports; the registry package's service is
# not needed. sshd wants its privilege separation directory.
systemctl disable --now docker-registry >/dev/null 2>&1 || true
mkdir -p /run/sshd

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
# schemathesis (PyPI) fuzzes the REST API from its OpenAPI document; pinned, in its own
# virtual environment under the tools cache, linked onto PATH as `schemathesis`.
SCHEMATHESIS_VERSION=4.32.5
TOOLS_CACHE="${WARREN_TOOLS_CACHE:-/var/cache/warren-tools}"
venv="$TOOLS_CACHE/schemathesis-$SCHEMATHESIS_VERSION"
if [ ! -x "$venv/bin/st" ]; then
    log "pip install schemathesis $SCHEMATHESIS_VERSION (into $venv)"
    if ! python3 -m venv --help >/dev/null 2>&1; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
    fi
    rm -rf "$venv"
    mkdir -p "$TOOLS_CACHE"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
ln -sf "$venv/bin/st" /usr/local/bin/schemathesis
log "chromium: $(chromium --version 2>/dev/null || echo missing)"
log "schemathesis: $(schemathesis --version 2>/dev/null || echo missing)"
log "websocat: $(websocat --version 2>/dev/null || echo missing)"
log "ssh: $(ssh -V 2>&1)"

# oidc-provider (npm; OpenID Certified) is the identity provider the single sign-on tests run
# (crates/warren-server/tests/oidc/provider.mjs); pinned, in the tools cache, found there by
# the tests (WARREN_TOOLS_CACHE).
OIDC_PROVIDER_VERSION=9.13.3
oidc_dir="$TOOLS_CACHE/oidc-provider-$OIDC_PROVIDER_VERSION"
if [ ! -f "$oidc_dir/node_modules/oidc-provider/package.json" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        log "apt-get install nodejs npm"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm
    fi
    log "npm install oidc-provider $OIDC_PROVIDER_VERSION (into $oidc_dir)"
    rm -rf "$oidc_dir"
    mkdir -p "$oidc_dir"
    (cd "$oidc_dir" && npm install --silent --no-audit --no-fund --omit=dev \
        "oidc-provider@$OIDC_PROVIDER_VERSION")
fi
