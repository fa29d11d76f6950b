-- Whether the idle timeout (and nothing since) stopped a workspace: such a workspace wakes when
-- a request reaches it, if its agent's lifecycle policy allows (`wake_on_request`).
ALTER TABLE workspaces ADD COLUMN idle_stopped INTEGER NOT NULL DEFAULT 0;
