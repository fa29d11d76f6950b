-- A user's working hours (issue 41, item 7): JSON of `WorkingHours` (days, a time to start,
-- a time to stop, a time zone); NULL: none. Their running workspaces stop at the end of the
-- day, and those the schedule stopped (and nothing since) start again in the morning.
ALTER TABLE users ADD COLUMN working_hours TEXT;
ALTER TABLE workspaces ADD COLUMN schedule_stopped INTEGER NOT NULL DEFAULT 0;
