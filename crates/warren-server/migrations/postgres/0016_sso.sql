-- Single sign-on through an OpenID Connect provider: an account signed in that way is linked
-- to the provider's subject (`{issuer} {sub}`), so a later change of the username claim
-- still finds it. `sso_states` remembers the `state` of every finished sign-in until it
-- expires, so a replayed callback is refused on any server sharing the database.
ALTER TABLE users ADD COLUMN sso_subject TEXT;
CREATE UNIQUE INDEX users_sso_subject ON users(sso_subject);
CREATE TABLE sso_states (
    state_hash TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sso_states_expiry ON sso_states(expires_at);
