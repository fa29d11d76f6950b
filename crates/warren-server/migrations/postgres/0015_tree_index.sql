-- SQLite's `workspaces_tree` covering index (the tree's columns sit after large ones in each
-- row there). PostgreSQL keeps large values out of line, so it reads those columns cheaply
-- without one, and a btree entry must stay under ~2.7 KB, which `failure_reason` (an
-- engine's error text) need not: nothing to do here, the version kept in step.
SELECT 1;
