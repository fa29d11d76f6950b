-- Regions an administrator registered (issue 42): the one door each region's workspaces may be
-- shown with — the domain of its workspace hosts (with the port browsers use when not the
-- scheme's), its scheme and its SSH address. A proxy's presence only switches its region on
-- while it says exactly this door; a holder of the internal secret (any proxy or relay) cannot
-- point a region's URLs anywhere else. Times are unix milliseconds.
CREATE TABLE regions (
    name             TEXT PRIMARY KEY,
    workspace_domain TEXT NOT NULL,
    public_scheme    TEXT NOT NULL,
    ssh_address      TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
