-- Usage (issue 44): what each workspace ran, an hour per row, kept with the names it had
-- (its owner, space, machine class and agent) so that reports still add up after any of them
-- is renamed or gone. The housekeeping replica adds to the current hour's row of every
-- running workspace once a minute (`app::usage`); retention removes whole old hours.
-- Units are integers: milliseconds, and CPU, memory and storage as what was asked for times
-- the seconds it ran (millicore-seconds, MiB-seconds).
CREATE TABLE usage_hours (
    workspace_id  INTEGER NOT NULL,
    hour          INTEGER NOT NULL,
    workspace     TEXT NOT NULL,
    owner_id      INTEGER NOT NULL,
    owner         TEXT NOT NULL,
    space         TEXT NOT NULL,
    agent         TEXT NOT NULL,
    class         TEXT NOT NULL,
    running_ms    INTEGER NOT NULL,
    weighted_ms   INTEGER NOT NULL,
    cpu_mcore_s   INTEGER NOT NULL,
    memory_mib_s  INTEGER NOT NULL,
    storage_mib_s INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, hour)
);
CREATE INDEX usage_hours_hour ON usage_hours(hour);
CREATE INDEX usage_hours_space ON usage_hours(space, hour);
CREATE INDEX usage_hours_owner ON usage_hours(owner_id, hour);

-- The end of the last interval counted: a replica taking housekeeping over goes on from it
-- rather than counting an interval twice.
CREATE TABLE usage_cursor (
    id      INTEGER PRIMARY KEY,
    last_ms INTEGER NOT NULL
);

-- Budgets: a space's (and everything below it) weighted hours per calendar month (UTC). Past
-- it, no workspace in the space starts; `admins_exempt` lets admins' own workspaces start
-- anyway (off unless an admin turns it on).
CREATE TABLE space_budgets (
    space_id       INTEGER PRIMARY KEY REFERENCES spaces(id) ON DELETE CASCADE,
    weighted_hours INTEGER NOT NULL,
    admins_exempt  INTEGER NOT NULL DEFAULT 0,
    updated_at     INTEGER NOT NULL
);
