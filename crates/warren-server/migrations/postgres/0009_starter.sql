-- The starter project a workspace without a project was created with (the devfile's first
-- when NULL), for every later render.
ALTER TABLE workspaces ADD COLUMN starter TEXT;
