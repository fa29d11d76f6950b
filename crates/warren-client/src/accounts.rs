//! The client's calls for accounts: the session, users, OAuth clients, tokens, SSH keys and
//! agents.

use super::*;

/// The query keys of `GET /audit`.
const AUDIT_FILTERS: [&str; 10] = [
    "actor",
    "target",
    "target_kind",
    "action",
    "outcome",
    "space",
    "since",
    "until",
    "limit",
    "cursor",
];

impl Client {
    // ---- session, users ----

    /// `POST /session`: exchanges a username and password for a new token.
    pub async fn login(&self, req: &PasswordLoginRequest) -> Result<CreatedToken> {
        self.with_body(Method::POST, &routes::session(), req).await
    }

    /// One page of `GET /audit`, newest first.
    pub async fn audit(
        &self,
        query: &warren_types::api::AuditQuery,
    ) -> Result<Page<warren_types::api::AuditEntry>> {
        // The filters as the server reads them: each set field a `key=value` pair.
        let pairs: Vec<(&str, String)> = match serde_json::to_value(query) {
            Ok(serde_json::Value::Object(m)) => m
                .into_iter()
                .filter_map(|(k, v)| {
                    let key = AUDIT_FILTERS.iter().find(|f| **f == k)?;
                    let value = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    Some((*key, value))
                })
                .collect(),
            _ => vec![],
        };
        self.call(Method::GET, &routes::audit(), &pairs, None::<&()>)
            .await
    }

    /// `POST /audit/verify`: checks the log's hash chain (admin).
    pub async fn verify_audit(&self) -> Result<warren_types::api::AuditVerification> {
        self.with_body(Method::POST, &routes::audit_verify(), &())
            .await
    }

    pub async fn me(&self) -> Result<User> {
        self.get(&routes::me()).await
    }

    /// How workspaces are reached besides the API (the proxy's SSH address).
    pub async fn access(&self) -> Result<AccessInfo> {
        self.get(&routes::access()).await
    }

    /// Every proxy the server heard from in the last day (admin).
    pub async fn proxies(&self) -> Result<Vec<warren_types::api::RegionProxy>> {
        self.get(&routes::proxies()).await
    }

    /// The registered regions and their doors (admin).
    pub async fn regions(&self) -> Result<Vec<warren_types::api::Region>> {
        self.get(&routes::regions()).await
    }

    /// Registers region `name` with its door, or changes it (admin).
    pub async fn set_region(
        &self,
        name: &str,
        door: &warren_types::api::RegionSpec,
    ) -> Result<warren_types::api::Region> {
        self.with_body(Method::PUT, &routes::region(name), door)
            .await
    }

    /// Removes region `name` (admin).
    pub async fn delete_region(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::region(name)).await
    }

    /// Rotates the proxies' cookie-signing key (admin).
    pub async fn rotate_proxy_cookie_key(&self) -> Result<ProxyKeyRotation> {
        self.with_body(
            Method::POST,
            &routes::rotate_proxy_cookie_key(),
            &serde_json::json!({}),
        )
        .await
    }

    pub async fn list_users(&self) -> Result<Vec<User>> {
        self.get(&routes::users()).await
    }

    pub async fn create_user(&self, req: &CreateUserRequest) -> Result<User> {
        self.with_body(Method::POST, &routes::users(), req).await
    }

    pub async fn get_user(&self, key: &str) -> Result<User> {
        self.get(&routes::user(key)).await
    }

    /// `PATCH /users/{user}`: admin rights, disabled, password reset.
    pub async fn update_user(&self, key: &str, req: &UpdateUserRequest) -> Result<User> {
        self.with_body(Method::PATCH, &routes::user(key), req).await
    }

    /// `DELETE /users/{user}`: `None` once the account is gone, the account while its
    /// workspaces are terminating.
    pub async fn delete_user(&self, key: &str, terminate_workspaces: bool) -> Result<Option<User>> {
        let url = self.url(&routes::user(key));
        let query = [("terminate_workspaces", terminate_workspaces.to_string())];
        let (status, bytes) = self
            .send(Method::DELETE, url.clone(), &query, None::<&()>)
            .await?;
        if status == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| Error::Decode {
                url: url.to_string(),
                status: status.as_u16(),
                source,
            })
    }

    /// `PUT /users/me/working-hours` (or `DELETE` with `None`).
    pub async fn set_working_hours(
        &self,
        hours: Option<&warren_types::schedule::WorkingHours>,
    ) -> Result<User> {
        match hours {
            Some(h) => {
                self.call(Method::PUT, &routes::working_hours(), &[], Some(h))
                    .await
            }
            None => {
                self.call(Method::DELETE, &routes::working_hours(), &[], None::<&()>)
                    .await
            }
        }
    }

    // ---- the user's own secrets and identity ----

    pub async fn list_secrets(&self) -> Result<Vec<UserSecret>> {
        self.get(&routes::secrets()).await
    }

    /// `PUT /users/me/secrets/{name}`: sets (or replaces) one.
    pub async fn set_secret(&self, name: &str, req: &SetSecretRequest) -> Result<UserSecret> {
        self.with_body(Method::PUT, &routes::secret(name), req)
            .await
    }

    pub async fn delete_secret(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::secret(name)).await
    }

    pub async fn list_git_credentials(&self) -> Result<Vec<UserGitCredential>> {
        self.get(&routes::git_credentials()).await
    }

    /// `POST /users/me/git-credentials`: sets (or replaces) the one for a host.
    pub async fn set_git_credential(
        &self,
        req: &SetGitCredentialRequest,
    ) -> Result<UserGitCredential> {
        self.with_body(Method::POST, &routes::git_credentials(), req)
            .await
    }

    pub async fn delete_git_credential(&self, id: i64) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::git_credential(id))
            .await
    }

    /// `PUT /users/me/profile`: the name and email address commits are made with.
    pub async fn set_profile(&self, req: &SetProfileRequest) -> Result<User> {
        self.with_body(Method::PUT, &routes::profile(), req).await
    }

    /// `PUT /users/me/dotfiles` (or `DELETE` with `None`).
    pub async fn set_dotfiles(&self, url: Option<&str>) -> Result<User> {
        match url {
            Some(url) => {
                self.call(
                    Method::PUT,
                    &routes::dotfiles(),
                    &[],
                    Some(&SetDotfilesRequest {
                        url: url.to_owned(),
                    }),
                )
                .await
            }
            None => {
                self.call(Method::DELETE, &routes::dotfiles(), &[], None::<&()>)
                    .await
            }
        }
    }

    /// `POST /users/me/password`.
    pub async fn change_password(&self, req: &ChangePasswordRequest) -> Result<()> {
        let url = self.url(&routes::password());
        self.send(Method::POST, url, &[], Some(req))
            .await
            .map(|_| ())
    }

    // ---- OAuth clients ----

    pub async fn create_oauth_client(&self, req: &CreateOAuthClient) -> Result<CreatedOAuthClient> {
        self.with_body(Method::POST, &routes::oauth_clients(), req)
            .await
    }

    pub async fn list_oauth_clients(&self) -> Result<Vec<OAuthClient>> {
        self.get(&routes::oauth_clients()).await
    }

    pub async fn delete_oauth_client(&self, client_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::oauth_client(client_id))
            .await
    }

    // ---- tokens ----

    pub async fn list_tokens(&self) -> Result<Vec<Token>> {
        self.get(&routes::tokens()).await
    }

    pub async fn create_token(&self, req: &CreateTokenRequest) -> Result<CreatedToken> {
        self.with_body(Method::POST, &routes::tokens(), req).await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::token(id)).await
    }

    // ---- SSH keys ----

    pub async fn list_ssh_keys(&self) -> Result<Vec<SshKey>> {
        self.get(&routes::ssh_keys()).await
    }

    pub async fn add_ssh_key(&self, req: &AddSshKeyRequest) -> Result<SshKey> {
        self.with_body(Method::POST, &routes::ssh_keys(), req).await
    }

    pub async fn delete_ssh_key(&self, id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::ssh_key(id)).await
    }

    // ---- agents ----

    pub async fn list_agents(&self) -> Result<Vec<Agent>> {
        self.get(&routes::agents()).await
    }

    pub async fn create_agent(&self, req: &CreateAgentRequest) -> Result<CreatedAgent> {
        self.with_body(Method::POST, &routes::agents(), req).await
    }

    pub async fn get_agent(&self, name_or_id: &str) -> Result<Agent> {
        self.get(&routes::agent(name_or_id)).await
    }

    pub async fn update_agent(&self, name_or_id: &str, req: &UpdateAgentRequest) -> Result<Agent> {
        self.with_body(Method::PUT, &routes::agent(name_or_id), req)
            .await
    }

    /// Deletes an agent with no workspaces left (admins only); its token stops working.
    pub async fn delete_agent(&self, name_or_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::agent(name_or_id))
            .await
    }

    /// A new token for the agent (admins only); the old one stops working.
    pub async fn reset_agent_token(&self, name_or_id: &str) -> Result<CreatedAgent> {
        let mut route = routes::agent(name_or_id);
        route.push("token".into());
        self.call(Method::POST, &route, &[], None::<&()>).await
    }
}
