-- Keys every proxy replica shares (issue 42), so a browser's session, a sign-in hand-off and
-- the SSH host key are the same whichever replica answers. Cookie-signing keys come in
-- generations: the newest whose signing_from has come signs, a newer one is published before
-- it signs (replicas learn it first), an older one still verifies for one session lifetime
-- after its successor took over. The SSH host key is generation 1 of kind 'ssh_host'. Secrets
-- are sealed with the server's key; times are unix milliseconds.
CREATE TABLE proxy_keys (
    kind         TEXT NOT NULL,
    generation   INTEGER NOT NULL,
    secret       TEXT NOT NULL,
    public_key   TEXT,
    signing_from INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (kind, generation)
);

-- Sign-in hand-offs already used (the digest of their id), so each is used once whichever
-- replica it reaches; kept until it would have expired anyway.
CREATE TABLE proxy_handoffs (
    jti_digest TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX proxy_handoffs_expiry ON proxy_handoffs (expires_at);
