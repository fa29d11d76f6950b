-- The audit log: every security-relevant action, appended once and never changed. Each
-- entry's hash covers the previous entry's hash, so a changed or removed row breaks the
-- chain (`warren admin audit verify`). `audit_head` is the chain's end, taken under a row
-- lock by every append so entries get consecutive numbers and chain in order; retention
-- moves `audit_anchor` (the hash of the last removed entry) forward as it removes the
-- oldest rows, so what is left still verifies.
CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY,
    at          BIGINT NOT NULL,
    actor_kind  TEXT NOT NULL,
    actor_id    BIGINT,
    actor       TEXT,
    credential  TEXT,
    action      TEXT NOT NULL,
    target_kind TEXT,
    target_id   TEXT,
    target      TEXT,
    space       TEXT,
    source      TEXT,
    request_id  TEXT,
    channel     TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    detail      TEXT,
    hash        TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log(at);
CREATE INDEX audit_log_actor_id ON audit_log(actor_id, seq);
CREATE INDEX audit_log_actor ON audit_log(actor, seq);
CREATE INDEX audit_log_target ON audit_log(target_id, seq);
CREATE INDEX audit_log_target_name ON audit_log(target, action, seq);
CREATE INDEX audit_log_action ON audit_log(action, seq);
CREATE INDEX audit_log_space ON audit_log(space, seq);
CREATE INDEX audit_log_outcome ON audit_log(outcome, seq);

CREATE TABLE audit_head (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    seq         BIGINT NOT NULL,
    hash        TEXT NOT NULL,
    anchor_seq  BIGINT NOT NULL,
    anchor_hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash, anchor_seq, anchor_hash) VALUES
    (1, 0, '0000000000000000000000000000000000000000000000000000000000000000',
     0, '0000000000000000000000000000000000000000000000000000000000000000');

-- Append-only in the database too: no entry is ever updated, and only entries retention has
-- already moved the anchor past may be deleted. (An owner of the database can drop these
-- triggers; the hash chain is what then tells.)
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: entries are never updated');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    WHEN OLD.seq > (SELECT anchor_seq FROM audit_head WHERE id = 1)
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: entry is not past retention');
END;
