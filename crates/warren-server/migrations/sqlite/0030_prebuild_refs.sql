-- Prebuilds of more than the default ref, and on a schedule (issue 43). prebuild_refs is a
-- JSON array of the refs prebuilt besides the project's default ref (NULL: that one only);
-- prebuild_every_hours makes a ref whose newest prebuild is older than that get a new one of
-- the same commit (its dependencies and base image move without a push); NULL: on pushes only.
ALTER TABLE projects ADD COLUMN prebuild_refs TEXT;
ALTER TABLE projects ADD COLUMN prebuild_every_hours INTEGER;
