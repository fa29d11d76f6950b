-- Proxies that said they serve (issue 42, regional proxies): each running proxy process says so
-- every few seconds, naming its region (empty: a central proxy) and where browsers and SSH
-- clients reach it. Workspaces of a region's agents are shown with that region's URLs while
-- one of its proxies was seen lately, and with the central proxy's otherwise. Rows of proxies
-- gone for long are dropped; times are unix milliseconds.
CREATE TABLE proxy_presence (
    instance         TEXT PRIMARY KEY,
    region           TEXT NOT NULL,
    workspace_domain TEXT NOT NULL,
    public_scheme    TEXT NOT NULL,
    ssh_address      TEXT,
    started_at       BIGINT NOT NULL,
    last_seen        BIGINT NOT NULL
);
CREATE INDEX proxy_presence_seen ON proxy_presence (last_seen);
