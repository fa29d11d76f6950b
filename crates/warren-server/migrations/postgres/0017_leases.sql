-- Leases: which server replica runs a job that must run once (the lifecycle timers and the
-- account deletions). A holder renews its lease before it expires; another server takes it
-- only once it has expired, so a dead holder is replaced after one lease duration.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
