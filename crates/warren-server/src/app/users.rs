//! Users and sign-in: password sessions (throttled), accounts (admins create, disable,
//! promote and delete them; never the last active admin), password changes, the first admin
//! of an empty database, and what every user may read of their own account.

use super::audit;
use super::throttle::Throttled;
use super::{AppError, AppState, ErrorKind, Principal};
use crate::crypto;
use crate::store::users::{Guarded, Sessions, UserRow};
use crate::store::workspaces::WorkspaceFilter;
use crate::store::StoreError;
use std::net::IpAddr;
use warren_types::api::{
    ChangePasswordRequest, CreateUserRequest, CreatedToken, PasswordLoginRequest, TokenScope,
    UpdateUserRequest, User,
};
use warren_types::{DesiredState, UserId};

const DAY_MS: i64 = 86_400_000;
/// Tokens made by a password session live this long.
const SESSION_TOKEN_DAYS: i64 = 30;

/// Usernames: 1–64 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_username(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid username (1-64 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit)"
        ))
    }
}

pub fn validate_password(password: &str) -> Result<(), String> {
    if password.chars().count() < 8 {
        return Err("must be at least 8 characters".into());
    }
    if password.len() > 1024 {
        return Err("must be at most 1024 bytes".into());
    }
    Ok(())
}

/// Credentials of the admin created on an empty database; shown once.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapAdmin {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for BootstrapAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapAdmin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The answer while the password throttle holds a caller back.
pub fn throttled(t: Throttled) -> AppError {
    AppError::new(ErrorKind::TooManyRequests, "too_many_attempts", t.message())
        .retry_after(t.retry_after_secs)
}

/// Checks a username and password; the same work is done for unknown users, so timing
/// does not tell which usernames exist.
pub async fn check_password(
    state: &AppState,
    username: &str,
    password: &str,
) -> Result<Option<UserRow>, AppError> {
    let user = state.store.user_by_name(username).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let password = password.to_owned();
    let ok = hashing(move || {
        crypto::verify_password(
            &password,
            hash.as_deref().unwrap_or(crypto::dummy_password_hash()),
        )
    })
    .await
    .unwrap_or(false);
    Ok(user.filter(|_| ok))
}

/// Refuses every password sign-in when the server allows single sign-on only.
pub fn password_login_allowed(state: &AppState) -> Result<(), AppError> {
    if state.password_login {
        return Ok(());
    }
    Err(AppError::forbidden(match &state.sso {
        Some(s) => format!(
            "password sign-in is turned off on this server; sign in with {} in a browser, and \
             use a personal access token for the CLI",
            s.display_name()
        ),
        None => "password sign-in is turned off on this server".to_owned(),
    }))
}

/// Exchanges a username and password for a new personal access token (`warren login`),
/// throttled per username and per client address.
pub async fn password_session(
    state: &AppState,
    req: PasswordLoginRequest,
    client: Option<IpAddr>,
) -> Result<CreatedToken, AppError> {
    let tried = req.username.clone();
    let mut signed_in = None;
    let r: Result<CreatedToken, AppError> = async {
        password_login_allowed(state)?;
        let now = state.clock.now_ms();
        state
            .login_throttle
            .check(&req.username, client, now)
            .map_err(throttled)?;
        let Some(user) = check_password(state, &req.username, &req.password).await? else {
            state.login_throttle.failed(&req.username, client, now);
            return Err(AppError::unauthenticated("wrong username or password"));
        };
        state.login_throttle.succeeded(&req.username);
        signed_in = Some(user.clone());
        if !user.is_active() {
            return Err(disabled());
        }
        let name = req.token_name.unwrap_or_else(|| "warren login".into());
        super::tokens::issue(
            state,
            &user,
            &name,
            &[TokenScope::Api, TokenScope::Workspace],
            now + SESSION_TOKEN_DAYS * DAY_MS,
        )
        .await
    }
    .await;
    audit::sign_in(state, &tried, "password", signed_in.as_ref(), &r).await;
    r
}

fn disabled() -> AppError {
    AppError::new(
        ErrorKind::Forbidden,
        "account_disabled",
        "this account is disabled; ask an administrator",
    )
}

fn last_admin(username: &str) -> AppError {
    AppError::conflict(
        "last_admin",
        format!("{username:?} is the last active admin; make another user admin first"),
    )
}

/// The caller's own account.
pub fn me(who: &Principal) -> User {
    who.user.to_api()
}

/// Every account (admins only).
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<User>, AppError> {
    who.require_admin()?;
    Ok(state
        .store
        .list_users()
        .await?
        .iter()
        .map(|u| u.to_api())
        .collect())
}

/// Creates an account (admins only).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateUserRequest,
) -> Result<User, AppError> {
    let r: Result<User, AppError> = async {
        who.require_admin()?;
        let u = insert(state, &req.username, &req.password, req.is_admin).await?;
        Ok(u.to_api())
    }
    .await;
    audit::audited_with(
        state,
        who,
        "user.create",
        match &r {
            Ok(u) => audit::Target::new("user", u.id, &u.username),
            Err(_) => audit::Target::named("user", &req.username),
        },
        format!("admin: {}", req.is_admin),
        r,
    )
    .await
}

async fn insert(
    state: &AppState,
    username: &str,
    password: &str,
    is_admin: bool,
) -> Result<UserRow, AppError> {
    validate_username(username).map_err(|e| AppError::invalid_field("username", e))?;
    validate_password(password).map_err(|e| AppError::invalid_field("password", e))?;
    let hash = hash(password).await?;
    state
        .store
        .insert_user(username, &hash, is_admin, state.clock.now_ms())
        .await
        .map_err(super::error::already_exists(|| {
            format!("username {username:?} is already taken")
        }))
}

/// Creates the first admin when (and only when) no user exists yet. Returns its generated
/// password exactly once, to the one server that created it.
pub async fn bootstrap_admin(
    state: &AppState,
    username: &str,
) -> Result<Option<BootstrapAdmin>, AppError> {
    let password = crypto::random_secret(18);
    let hash = hash(&password).await?;
    let created = state
        .store
        .insert_first_admin(username, &hash, state.clock.now_ms())
        .await?;
    Ok(created.then(|| BootstrapAdmin {
        username: username.to_owned(),
        password,
    }))
}

/// An account by username or id, for an admin.
async fn by_key(state: &AppState, who: &Principal, key: &str) -> Result<UserRow, AppError> {
    who.require_admin()?;
    super::lookup::user_by_key(state, key).await
}

/// One account (admins only).
pub async fn get(state: &AppState, who: &Principal, key: &str) -> Result<User, AppError> {
    Ok(by_key(state, who, key).await?.to_api())
}

/// An admin's change to an account: admin rights, disabled or not, a password reset. A
/// change that would leave no active admin is refused, and admins cannot disable
/// themselves. Disabling stops the account's running workspaces; a password reset revokes
/// every session and token of the account.
pub async fn update(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &UpdateUserRequest,
) -> Result<User, AppError> {
    let r: Result<User, AppError> = async {
        let user = by_key(state, who, key).await?;
        if user.delete_requested_at.is_some() {
            return Err(AppError::conflict(
                "user_being_deleted",
                format!(
                    "{:?} is being deleted (its workspaces are terminating)",
                    user.username
                ),
            ));
        }
        if req.disabled == Some(true) && user.id == who.user.id {
            return Err(AppError::invalid_field(
                "disabled",
                "admins cannot disable their own account; ask another admin",
            ));
        }
        let hash = match &req.password {
            Some(p) => {
                validate_password(p).map_err(|e| AppError::invalid_field("password", e))?;
                Some(hash(p).await?)
            }
            None => None,
        };
        let now = state.clock.now_ms();
        let is_admin = req.is_admin.unwrap_or(user.is_admin);
        let disabled_at = match req.disabled {
            Some(true) => user.disabled_at.or(Some(now)),
            Some(false) => None,
            None => user.disabled_at,
        };
        let mut updated = match state
            .store
            .update_user_access(user.id, is_admin, disabled_at)
            .await?
        {
            Guarded::Done(u) => u,
            Guarded::NotFound => return Err(AppError::not_found(format!("user {key:?}"))),
            Guarded::LastAdmin => return Err(last_admin(&user.username)),
        };
        if let Some(hash) = hash {
            let revoke = Sessions::Revoke { keep: None };
            state
                .store
                .set_password(user.id, &hash, revoke, now)
                .await?;
            tracing::info!(user = %user.username, by = %who.user.username, "password reset by an admin; sessions revoked");
            updated = state.store.user_by_id(user.id).await?.unwrap_or(updated);
        }
        if updated.disabled_at.is_some() && user.disabled_at.is_none() {
            tracing::info!(user = %user.username, by = %who.user.username, "account disabled");
            move_workspaces(state, user.id, DesiredState::Stopped).await?;
        }
        Ok(updated.to_api())
    }
    .await;
    audit::audited_with(
        state,
        who,
        "user.update",
        match &r {
            Ok(u) => audit::Target::new("user", u.id, &u.username),
            Err(_) => audit::Target::named("user", key),
        },
        update_detail(req),
        r,
    )
    .await
}

/// What an admin's change of an account asked for, for the audit log (never the password).
fn update_detail(req: &UpdateUserRequest) -> String {
    let mut parts = vec![];
    if let Some(a) = req.is_admin {
        parts.push(format!("admin: {a}"));
    }
    if let Some(d) = req.disabled {
        parts.push(format!("disabled: {d}"));
    }
    if req.password.is_some() {
        parts.push("password reset".to_owned());
    }
    parts.join(", ")
}

/// What became of a deletion request.
#[derive(Debug)]
pub enum Deletion {
    /// The account is gone.
    Deleted,
    /// The account is disabled and goes once its workspaces are terminated.
    Pending(Box<User>),
}

/// Deletes an account (admins only, never one's own nor the last active admin). One with
/// workspaces left is refused unless `terminate_workspaces`: then it is disabled at once,
/// its workspaces are terminated (volumes included) and it is deleted once they are gone.
pub async fn delete(
    state: &AppState,
    who: &Principal,
    key: &str,
    terminate_workspaces: bool,
) -> Result<Deletion, AppError> {
    let r: Result<Deletion, AppError> = async {
        let user = by_key(state, who, key).await?;
        if user.id == who.user.id {
            return Err(AppError::new(
                ErrorKind::Invalid,
                "own_account",
                "admins cannot delete their own account; ask another admin",
            ));
        }
        let live = live_workspaces(state, user.id).await?;
        if !live.is_empty() && !terminate_workspaces {
            let names: Vec<_> = live.iter().map(|w| w.name.as_str()).collect();
            return Err(AppError::conflict(
                "user_has_workspaces",
                format!(
                    "{:?} still has {} workspace(s) ({}); terminate them first, or ask for \
                     `terminate_workspaces` to have them terminated with their volumes",
                    user.username,
                    names.len(),
                    names.join(", ")
                ),
            ));
        }
        match state
            .store
            .request_user_deletion(user.id, state.clock.now_ms())
            .await?
        {
            Guarded::Done(_) => {}
            Guarded::NotFound => return Err(AppError::not_found(format!("user {key:?}"))),
            Guarded::LastAdmin => return Err(last_admin(&user.username)),
        }
        tracing::info!(user = %user.username, by = %who.user.username, workspaces = live.len(), "account deletion requested");
        move_workspaces(state, user.id, DesiredState::Terminated).await?;
        if state.store.delete_user_if_done(user.id).await? {
            tracing::info!(user = %user.username, "account deleted");
            return Ok(Deletion::Deleted);
        }
        match state.store.user_by_id(user.id).await? {
            Some(pending) => Ok(Deletion::Pending(Box::new(pending.to_api()))),
            // The deletion job (here or on another replica) finished it in between.
            None => {
                tracing::info!(user = %user.username, "account deleted");
                Ok(Deletion::Deleted)
            }
        }
    }
    .await;
    audit::audited_with(
        state,
        who,
        "user.delete",
        audit::Target::named("user", key),
        format!("terminate_workspaces: {terminate_workspaces}"),
        r,
    )
    .await
}

/// Deletes the accounts whose workspaces have all terminated since their deletion was
/// asked for.
pub async fn finish_deletions(state: &AppState) -> Result<(), StoreError> {
    for id in state.store.users_pending_deletion().await? {
        if state.store.delete_user_if_done(id).await? {
            tracing::info!(user_id = %id, "account deleted once its workspaces were terminated");
        }
    }
    Ok(())
}

/// Finishes pending account deletions whenever a workspace changed (an agent reported one
/// terminated), and every `interval` for changes made by other server replicas; only while
/// this server holds the housekeeping lease.
pub async fn deletion_task(
    state: AppState,
    interval: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut changes = state.changes.subscribe();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ticked = tokio::select! {
            // Cancel-safe: cancellation only flips a flag.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: `changed` marks nothing seen until it returns; a lost wake-up is
            // covered by the next one or the tick.
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                false
            }
            // Cancel-safe: a lost tick is taken on the next iteration.
            _ = tick.tick() => true,
        };
        // The lease is renewed on ticks only (one write per round, not per change); between
        // them the last renewal says whether this server runs the job.
        let held = if ticked {
            state.housekeeping.hold(&state).await
        } else {
            state.housekeeping.is_held()
        };
        if !held {
            continue;
        }
        if let Err(e) = finish_deletions(&state).await {
            tracing::warn!(error = %warren_types::error_chain(&e), "finishing account deletions failed; retrying later");
        }
    }
}

/// A user's change of their own password: the current one is required (and throttled like
/// a sign-in); other sessions and tokens are kept unless `revoke_sessions`.
pub async fn change_password(
    state: &AppState,
    who: &Principal,
    req: &ChangePasswordRequest,
    client: Option<IpAddr>,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let now = state.clock.now_ms();
        let username = &who.user.username;
        state
            .login_throttle
            .check(username, client, now)
            .map_err(throttled)?;
        if check_password(state, username, &req.current_password)
            .await?
            .is_none()
        {
            state.login_throttle.failed(username, client, now);
            return Err(AppError::invalid_field(
                "current_password",
                "is not this account's password",
            ));
        }
        state.login_throttle.succeeded(username);
        validate_password(&req.new_password)
            .map_err(|e| AppError::invalid_field("new_password", e))?;
        let hash = hash(&req.new_password).await?;
        let sessions = if req.revoke_sessions {
            Sessions::Revoke {
                keep: who.token.as_ref().map(|t| t.id),
            }
        } else {
            Sessions::Keep
        };
        if !state
            .store
            .set_password(who.user.id, &hash, sessions, now)
            .await?
        {
            return Err(AppError::not_found("user"));
        }
        tracing::info!(user = %username, revoke_sessions = req.revoke_sessions, "password changed");
        Ok(())
    }
    .await;
    audit::audited_with(
        state,
        who,
        "user.change_password",
        audit::Target::user(&who.user),
        format!("revoke_sessions: {}", req.revoke_sessions),
        r,
    )
    .await
}

/// Signs the caller's browser out: every browser session of the account ends (session
/// cookies are signed, not stored, so one cannot be ended alone); tokens stay valid.
pub async fn sign_out(state: &AppState, who: &Principal) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        state
            .store
            .end_browser_sessions(who.user.id, state.clock.now_ms())
            .await?;
        tracing::info!(user = %who.user.username, "signed out of the web UI");
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "session.sign_out",
        audit::Target::user(&who.user),
        r,
    )
    .await
}

/// Sets or (with `None`) clears the caller's dotfiles repository; new workspaces (and
/// re-rendered ones) install it at their first start.
pub async fn set_dotfiles(
    state: &AppState,
    who: &Principal,
    url: Option<&str>,
) -> Result<User, AppError> {
    if let Some(u) = url {
        super::projects::validate_git_url(u).map_err(|e| AppError::invalid_field("url", e))?;
    }
    state.store.set_dotfiles(who.user.id, url).await?;
    let u = state
        .store
        .user_by_id(who.user.id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    Ok(u.to_api())
}

/// Sets or (with `None`) clears the caller's working hours: their running workspaces stop at
/// the end of each day they name, and those that stopped start again at its start (the
/// lifecycle sweep applies them, after the agents' limits).
pub async fn set_working_hours(
    state: &AppState,
    who: &Principal,
    hours: Option<&warren_types::schedule::WorkingHours>,
) -> Result<User, AppError> {
    if let Some(h) = hours {
        h.validate().map_err(|e| {
            let field = e.split(':').next().unwrap_or("working_hours").to_owned();
            AppError::invalid_field(&field, e.split_once(": ").map_or(e.as_str(), |(_, m)| m))
        })?;
    }
    state.store.set_working_hours(who.user.id, hours).await?;
    tracing::info!(user = %who.user.username, hours = ?hours.map(|h| h.describe()), "working hours set");
    let u = state
        .store
        .user_by_id(who.user.id)
        .await?
        .ok_or_else(|| AppError::not_found("user"))?;
    Ok(u.to_api())
}

/// Password hashes worked out at once, in this process. Each argon2 run holds 19 MiB and a
/// core for tens of milliseconds; unbounded, a burst of sign-ins (or of guesses from many
/// addresses) took as many blocking threads and that much memory at once, and the cores from
/// every other request. Creating a user hashed on an async worker, stalling its other tasks.
const HASHING_CONCURRENCY: usize = 4;
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHING_CONCURRENCY);

/// Runs a password hash or check off the async workers, at most [`HASHING_CONCURRENCY`] at
/// a time. The permit moves into the blocking task, so a caller that gives up (a closed
/// connection) does not let another start while its hash still runs.
async fn hashing<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    // Never closed, so acquiring only waits.
    let permit = HASHING.acquire().await;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
}

async fn hash(password: &str) -> Result<String, AppError> {
    let password = password.to_owned();
    hashing(move || crypto::hash_password(&password))
        .await
        .map_err(|e| AppError::internal("hashing the password", &e))?
        .map_err(|e| AppError::internal("hashing the password", &e))
}

/// The account's workspaces that are not both desired and actually terminated (the runs of
/// the prebuilds it turned on too).
async fn live_workspaces(
    state: &AppState,
    owner: UserId,
) -> Result<Vec<crate::store::workspaces::WorkspaceRow>, AppError> {
    let f = WorkspaceFilter {
        owner: Some(owner),
        include_prebuilds: true,
        limit: i64::MAX,
        ..Default::default()
    };
    Ok(state.store.list_workspaces(&f).await?)
}

/// Asks every live workspace of the account for `to` (`Stopped` skips those not meant to
/// run). A workspace whose state refuses the move is left as it is and logged.
async fn move_workspaces(
    state: &AppState,
    owner: UserId,
    to: DesiredState,
) -> Result<(), AppError> {
    for w in live_workspaces(state, owner).await? {
        let skip = match to {
            DesiredState::Stopped => !matches!(
                w.desired_state,
                DesiredState::Running | DesiredState::RestartRequested
            ),
            _ => w.desired_state == to,
        };
        if skip {
            continue;
        }
        let id = w.id;
        let load = || async {
            state
                .store
                .workspace_by_id(id)
                .await?
                .ok_or_else(|| AppError::not_found(format!("workspace {id}")))
        };
        if let Err(e) = super::workspaces::change_desired_state(state, load, to, true).await {
            tracing::warn!(workspace = %w.name, %to, error = %e, "could not move a workspace of a disabled or deleted account");
        }
    }
    Ok(())
}
