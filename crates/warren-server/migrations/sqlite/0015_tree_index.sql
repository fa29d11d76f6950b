-- `ws tree` reads a few small columns of every workspace it shows. In SQLite those columns sit
-- after the devfile and the rendered objects in each row, so reading them walks every row's
-- overflow pages (~100 ms for 10,000 workspaces); this index holds them all, and the tree's
-- query is read from it alone (~20 ms).
CREATE INDEX workspaces_tree ON workspaces(space_id, owner_id, agent_id, desired_state,
    actual_state, name, url, failure_reason);
