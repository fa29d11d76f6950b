-- Why a Starting workspace does not run yet although nothing failed (no node can take its
-- pod), as its agent last reported; NULL once it runs or when nothing holds it.
ALTER TABLE workspaces ADD COLUMN waiting_reason TEXT;
