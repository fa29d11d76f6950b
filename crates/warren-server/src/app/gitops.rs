//! GitOps configuration (admins only): repositories the relays read on the agents'
//! behalf, each agent's sources, and the policy that caps every source.
//!
//! A repository's credential and webhook secret are sealed at rest, never returned and
//! never logged (only their kind, or that one is set). Sources are validated as a whole
//! against the registered repositories and the policy (`warren_gitops::validate_sources`);
//! every problem is reported at once, each naming its field.

use super::agents::validate_name;
use super::{AppError, AppState, ErrorKind, Principal};
use crate::app::audit;
use crate::store::gitops::{NewRepository, RepositoryRow};
use std::collections::BTreeMap;
use warren_gitops::Problem;
use warren_types::git::GitCredential;
use warren_types::gitops::{
    AgentGitops, AuthorizeSourceRequest, CreateRepositoryRequest, Policy, Repository, SourceGrant,
    SourceStatus,
};
use warren_types::RepositoryId;

fn not_found(name: &str) -> AppError {
    AppError::not_found(format!("repository {name:?}"))
}

/// All problems as one refusal naming the first field (the message names every one).
fn refusal(problems: &[Problem]) -> AppError {
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let e = AppError::new(ErrorKind::Invalid, "invalid_field", message);
    match problems.first() {
        Some(p) => e.with_field(&p.field),
        None => e,
    }
}

async fn users_by_repository(
    state: &AppState,
) -> Result<BTreeMap<RepositoryId, Vec<String>>, AppError> {
    let mut map: BTreeMap<RepositoryId, Vec<String>> = BTreeMap::new();
    for (id, user) in state.store.repository_users().await? {
        map.entry(id).or_default().push(user);
    }
    Ok(map)
}

fn view(
    state: &AppState,
    r: &RepositoryRow,
    users: &BTreeMap<RepositoryId, Vec<String>>,
) -> Result<Repository, AppError> {
    let kind = state.store.repository_credential(r)?.map(|c| c.kind());
    Ok(r.to_api(kind, users.get(&r.id).cloned().unwrap_or_default()))
}

async fn by_name(state: &AppState, name: &str) -> Result<RepositoryRow, AppError> {
    state
        .store
        .repository_by_name(name)
        .await?
        .ok_or_else(|| not_found(name))
}

/// A repository URL: a Git URL without credentials in it, which are sent in clear over
/// `http://` to anything but this machine.
fn check_url(url: &str, credential: Option<&GitCredential>) -> Result<(), AppError> {
    super::projects::validate_git_url(url).map_err(|e| AppError::invalid_field("url", e))?;
    if let (Ok(u), Some(GitCredential::Token { .. } | GitCredential::Basic { .. })) =
        (url::Url::parse(url), credential)
    {
        let loopback = match u.host() {
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
        if u.scheme() == "http" && !loopback {
            return Err(AppError::invalid_field(
                "credential",
                "would be sent in clear over http://; use an https:// URL",
            ));
        }
        if u.scheme() != "http" && u.scheme() != "https" {
            return Err(AppError::invalid_field(
                "credential",
                format!(
                    "a {} credential is for http(s):// URLs; {}:// takes an SSH key or none",
                    credential.map_or("", GitCredential::kind),
                    u.scheme()
                ),
            ));
        }
    }
    Ok(())
}

fn check_credential(c: &GitCredential) -> Result<(), AppError> {
    c.validate()
        .map_err(|e| AppError::invalid_field("credential", e))
}

fn check_webhook_secret(field: &str, s: &str) -> Result<(), AppError> {
    super::webhooks::check_secret(field, s)
}

/// Every registered repository.
pub async fn list_repositories(
    state: &AppState,
    who: &Principal,
) -> Result<Vec<Repository>, AppError> {
    who.require_admin()?;
    let users = users_by_repository(state).await?;
    state
        .store
        .list_repositories()
        .await?
        .iter()
        .map(|r| view(state, r, &users))
        .collect()
}

pub async fn get_repository(
    state: &AppState,
    who: &Principal,
    name: &str,
) -> Result<Repository, AppError> {
    who.require_admin()?;
    let r = by_name(state, name).await?;
    view(state, &r, &users_by_repository(state).await?)
}

pub async fn create_repository(
    state: &AppState,
    who: &Principal,
    req: &CreateRepositoryRequest,
) -> Result<Repository, AppError> {
    let r: Result<Repository, AppError> = async {
        who.require_admin()?;
        validate_name(&req.name).map_err(|e| AppError::invalid_field("name", e))?;
        if let Some(c) = &req.credential {
            check_credential(c)?;
        }
        check_url(&req.url, req.credential.as_ref())?;
        if let Some(s) = &req.webhook_secret {
            check_webhook_secret("webhook_secret", s)?;
        }
        let r = state
            .store
            .insert_repository(
                &NewRepository {
                    name: &req.name,
                    url: &req.url,
                    credential: req.credential.as_ref(),
                    webhook_secret: req.webhook_secret.as_deref(),
                    created_by: who.user.id,
                },
                state.clock.now_ms(),
            )
            .await
            .map_err(super::error::already_exists(|| {
                format!("a repository named {:?} already exists", req.name)
            }))?;
        tracing::info!(repository = %r.name, url = %r.url, by = %who.user.username,
            credential = ?req.credential.as_ref().map(GitCredential::kind),
            webhook = req.webhook_secret.is_some(), "gitops repository registered");
        view(state, &r, &BTreeMap::new())
    }
    .await;
    audit::audited(
        state,
        who,
        "gitops.create_repository",
        audit::Target::named("gitops_repository", &req.name),
        r,
    )
    .await
}

/// Removes a repository no source uses; one in use is refused naming its sources.
pub async fn delete_repository(
    state: &AppState,
    who: &Principal,
    name: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        let r = by_name(state, name).await?;
        let in_use = |users: &[String]| {
            AppError::conflict(
                "in_use",
                format!(
                    "repository {name:?} is used by source(s) {}; remove them first \
                     (warren agent gitops set)",
                    users.join(", ")
                ),
            )
        };
        if let Some(users) = users_by_repository(state).await?.get(&r.id) {
            return Err(in_use(users));
        }
        match state.store.delete_repository(r.id).await {
            Ok(true) => {
                tracing::info!(repository = %name, by = %who.user.username, "gitops repository removed");
                Ok(())
            }
            Ok(false) => Err(not_found(name)),
            // A source was given this repository since we looked.
            Err(crate::store::StoreError::Conflict(_)) => {
                let users = users_by_repository(state).await?;
                Err(in_use(users.get(&r.id).map_or(&[][..], Vec::as_slice)))
            }
            Err(e) => Err(e.into()),
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "gitops.delete_repository",
        audit::Target::named("gitops_repository", name),
        r,
    )
    .await
}

/// Sets (or with `None` removes) a repository's credential.
pub async fn set_credential(
    state: &AppState,
    who: &Principal,
    name: &str,
    credential: Option<&GitCredential>,
) -> Result<Repository, AppError> {
    let r: Result<Repository, AppError> = async {
        who.require_admin()?;
        let r = by_name(state, name).await?;
        if let Some(c) = credential {
            check_credential(c)?;
            check_url(&r.url, Some(c))?;
        }
        let r = state
            .store
            .set_repository_credential(r.id, credential, state.clock.now_ms())
            .await?
            .ok_or_else(|| not_found(name))?;
        tracing::info!(repository = %name, by = %who.user.username,
            credential = ?credential.map(GitCredential::kind), "gitops repository credential changed");
        view(state, &r, &users_by_repository(state).await?)
    }
    .await;
    audit::audited_with(
        state,
        who,
        "gitops.set_credential",
        audit::Target::named("gitops_repository", name),
        if credential.is_some() {
            "set".to_owned()
        } else {
            "removed".to_owned()
        },
        r,
    )
    .await
}

/// Sets (or with `None` removes) a repository's webhook secret.
pub async fn set_webhook_secret(
    state: &AppState,
    who: &Principal,
    name: &str,
    secret: Option<&str>,
) -> Result<Repository, AppError> {
    let r: Result<Repository, AppError> = async {
        who.require_admin()?;
        let r = by_name(state, name).await?;
        if let Some(s) = secret {
            check_webhook_secret("secret", s)?;
        }
        let r = state
            .store
            .set_webhook_secret(r.id, secret, state.clock.now_ms())
            .await?
            .ok_or_else(|| not_found(name))?;
        tracing::info!(repository = %name, by = %who.user.username, set = secret.is_some(),
            "gitops webhook secret changed");
        view(state, &r, &users_by_repository(state).await?)
    }
    .await;
    audit::audited_with(
        state,
        who,
        "gitops.set_webhook_secret",
        audit::Target::named("gitops_repository", name),
        if secret.is_some() {
            "set".to_owned()
        } else {
            "removed".to_owned()
        },
        r,
    )
    .await
}

async fn agent_id(state: &AppState, key: &str) -> Result<warren_types::AgentId, AppError> {
    Ok(state
        .store
        .agent_by_key(key)
        .await?
        // A connector's row is a machine its user controls: no repository goes there.
        .filter(|a| !a.is_connector())
        .ok_or_else(|| AppError::not_found(format!("agent {key:?}")))?
        .id)
}

/// An agent's sources.
pub async fn agent_gitops(
    state: &AppState,
    who: &Principal,
    agent: &str,
) -> Result<AgentGitops, AppError> {
    who.require_admin()?;
    let id = agent_id(state, agent).await?;
    Ok(AgentGitops {
        sources: state.store.agent_sources(id).await?,
    })
}

/// Replaces an agent's sources after checking them all against the registered
/// repositories and the policy.
pub async fn set_agent_gitops(
    state: &AppState,
    who: &Principal,
    agent: &str,
    config: &AgentGitops,
) -> Result<AgentGitops, AppError> {
    let r: Result<AgentGitops, AppError> = async {
        who.require_admin()?;
        let id = agent_id(state, agent).await?;
        let repositories: BTreeMap<String, RepositoryId> = state
            .store
            .list_repositories()
            .await?
            .into_iter()
            .map(|r| (r.name, r.id))
            .collect();
        let policy = state.store.gitops_policy().await?;
        warren_gitops::validate_sources(config, &policy, &|r| repositories.contains_key(r))
            .map_err(|p| refusal(&p))?;
        let rows: Vec<_> = config
            .sources
            .iter()
            .filter_map(|s| Some((s.clone(), *repositories.get(&s.repository)?)))
            .collect();
        state
            .store
            .set_agent_sources(id, &rows, state.clock.now_ms())
            .await
            .map_err(|e| match e {
                crate::store::StoreError::NotFound(_) => AppError::conflict(
                    "conflict",
                    "a repository was removed while the sources were being set; try again",
                ),
                e => e.into(),
            })?;
        tracing::info!(agent = %agent, by = %who.user.username, sources = rows.len(),
            "gitops sources set");
        // The agent learns its sources with the next reconcile answer: ask for one now.
        state.signals.notify(id);
        agent_gitops(state, who, agent).await
    }
    .await;
    audit::audited(
        state,
        who,
        "gitops.set_agent",
        audit::Target::named("agent", agent),
        r,
    )
    .await
}

pub async fn policy(state: &AppState, who: &Principal) -> Result<Policy, AppError> {
    who.require_admin()?;
    Ok(state.store.gitops_policy().await?)
}

/// Replaces the policy; sources already configured are held to it when they sync.
pub async fn set_policy(
    state: &AppState,
    who: &Principal,
    policy: &Policy,
) -> Result<Policy, AppError> {
    let r: Result<Policy, AppError> = async {
        who.require_admin()?;
        warren_gitops::validate_policy(policy).map_err(|p| refusal(&p))?;
        state
            .store
            .set_gitops_policy(policy, state.clock.now_ms())
            .await?;
        tracing::info!(by = %who.user.username, deny = ?policy.deny,
            allow_cluster_mode = policy.allow_cluster_mode, "gitops policy set");
        Ok(policy.clone())
    }
    .await;
    audit::audited(
        state,
        who,
        "gitops.set_policy",
        audit::Target::named("gitops_policy", ""),
        r,
    )
    .await
}

/// The agent a relay's JWT speaks for.
pub(super) async fn relay_agent(
    state: &AppState,
    bearer: Option<&str>,
) -> Result<crate::store::agents::AgentRow, AppError> {
    let claims = super::auth::relay(state, bearer)?;
    let id: warren_types::AgentId = claims
        .sub
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| AppError::unauthenticated("relay JWT lacks the agent id in `sub`"))?;
    state
        .store
        .agent_by_id(id)
        .await?
        .ok_or_else(|| AppError::unauthenticated(format!("agent {id} does not exist")))
}

/// A relay's question before each poll: is the agent's token (the one it connected with)
/// still its token, does it still have this source — and if so, what to read and how.
pub async fn authorize_source(
    state: &AppState,
    bearer: Option<&str>,
    req: &AuthorizeSourceRequest,
) -> Result<SourceGrant, AppError> {
    let agent = relay_agent(state, bearer).await?;
    let current = state.store.agent_token_digest(agent.id).await?;
    if !current.is_some_and(|d| crate::crypto::ct_eq(&d, &req.token_digest)) {
        return Err(AppError::unauthenticated(format!(
            "agent {:?} connected with a token that is no longer valid",
            agent.name
        )));
    }
    let (source, repository) = state
        .store
        .agent_source(agent.id, &req.source)
        .await?
        .ok_or_else(|| {
            AppError::not_found(format!("source {:?} of agent {:?}", req.source, agent.name))
        })?;
    Ok(SourceGrant {
        credential: state.store.repository_credential(&repository)?,
        policy: state.store.gitops_policy().await?,
        repository: repository.name,
        url: repository.url,
        source,
    })
}

/// An agent's report of a sync, through its relay.
pub async fn report_status(
    state: &AppState,
    bearer: Option<&str>,
    status: &SourceStatus,
) -> Result<(), AppError> {
    let agent = relay_agent(state, bearer).await?;
    let previous = state
        .store
        .source_statuses(agent.id)
        .await?
        .into_iter()
        .find(|s| s.source == status.source)
        .and_then(|s| s.commit);
    state
        .store
        .set_source_status(agent.id, status, state.clock.now_ms())
        .await?;
    let labels = [
        ("agent", agent.name.clone()),
        ("source", status.source.clone()),
    ];
    // Once per commit: from a relay seeing it at the ref to the agent having applied it.
    if let (Some(seen), true) = (status.detected_at, status.commit != previous) {
        let lag = (status.synced_at - seen).num_milliseconds().max(0) as f64 / 1000.0;
        metrics::histogram!("warren_gitops_apply_lag_seconds", &labels).record(lag);
        metrics::gauge!("warren_gitops_last_apply_lag_seconds", &labels).set(lag);
    }
    metrics::counter!("warren_gitops_syncs_total", &labels).increment(1);
    metrics::gauge!("warren_gitops_errors", &labels).set(status.errors.len() as f64);
    metrics::gauge!("warren_gitops_last_sync_timestamp_seconds", &labels)
        .set(status.synced_at.timestamp() as f64);
    if !status.errors.is_empty() {
        metrics::counter!("warren_gitops_sync_errors_total", &labels)
            .increment(status.errors.len() as u64);
    }
    Ok(())
}

/// The last status of each of an agent's sources.
pub async fn agent_status(
    state: &AppState,
    who: &Principal,
    agent: &str,
) -> Result<Vec<SourceStatus>, AppError> {
    who.require_admin()?;
    let id = agent_id(state, agent).await?;
    Ok(state.store.source_statuses(id).await?)
}

pub use super::webhooks::WebhookProof;

/// Checks a push webhook against the repository's secret (constant-time) and tells every
/// relay to poll the sources reading it now; answers how many relays took it.
pub async fn webhook(
    state: &AppState,
    repository: &str,
    proof: &WebhookProof,
    body: &[u8],
) -> Result<usize, AppError> {
    let r = by_name(state, repository).await?;
    let Some(secret) = state.store.webhook_secret(&r)? else {
        return Err(AppError::not_found(format!(
            "a webhook for repository {repository:?} (it has no webhook secret)"
        )));
    };
    if let Err(e) = super::webhooks::verify(&secret, proof, body, "the repository's") {
        tracing::warn!(repository = %repository, "gitops webhook refused: {}", e.message);
        return Err(e);
    }
    metrics::counter!("warren_gitops_webhooks_total").increment(1);
    let relays = poke_relays(state, &r.url).await;
    tracing::info!(repository = %repository, relays, "gitops webhook accepted; relays polling");
    Ok(relays)
}

/// Tells each relay to poll the sources reading `url` now; how many answered.
async fn poke_relays(state: &AppState, url: &str) -> usize {
    let Ok(client) = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
    else {
        return 0;
    };
    let token = crate::relay::jwt::mint(
        &state.relay_secret,
        warren_types::internal::SERVER_JWT_ISSUER,
        warren_types::internal::RELAY_JWT_AUDIENCE,
        None,
        warren_jwt::now_secs(),
        warren_types::internal::INTERNAL_JWT_MAX_VALIDITY_SECS,
    );
    let body = warren_types::gitops::PollRequest {
        url: url.to_owned(),
    };
    let sends = state.relay_urls.iter().map(|base| {
        let req = client
            .post(format!(
                "{}{}",
                base.trim_end_matches('/'),
                warren_types::gitops::POLL_PATH
            ))
            .bearer_auth(&token)
            .json(&body);
        async move { matches!(req.send().await, Ok(r) if r.status().is_success()) }
    });
    futures::future::join_all(sends)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
}
