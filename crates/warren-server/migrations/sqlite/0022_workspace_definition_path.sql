-- The file of its repository a workspace's definition was read from when its creator chose
-- one (`ws create --definition PATH`), so a rebuild reads that file again rather than the
-- usual locations. NULL when the usual locations (or a devfile given) were used.
ALTER TABLE workspaces ADD COLUMN definition_path TEXT;
