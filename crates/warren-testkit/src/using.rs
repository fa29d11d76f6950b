//! What a test does with a running [`Stack`]: users, workspaces and their states, agents
//! added or relays stopped, GitOps sources, and the URLs and clients that reach workspaces.

use super::*;

impl Stack {
    /// Registers a GitOps repository as the admin (`body` as `POST /gitops/repositories`
    /// takes it); the answer.
    pub async fn gitops_repository(&self, body: Value) -> Result<Value> {
        self.api(
            reqwest::Method::POST,
            "/api/v1/gitops/repositories",
            &self.admin.token,
            Some(body),
        )
        .await
    }

    /// Replaces `agent`'s GitOps sources as the admin (`{"sources": [...]}`); the answer.
    pub async fn gitops_sources(&self, agent: &str, sources: Value) -> Result<Value> {
        self.api(
            reqwest::Method::PUT,
            &format!("/api/v1/agents/{agent}/gitops"),
            &self.admin.token,
            Some(sources),
        )
        .await
    }

    /// The configuration of one more proxy in front of this stack (plain HTTP, the stack's
    /// server, relay and OAuth client, activity reported every second), its state in
    /// `state_dir`: for tests that run a proxy of their own making.
    pub fn another_proxy(
        &self,
        state_dir: std::path::PathBuf,
    ) -> Result<warren_proxy::ProxyConfig> {
        Ok(warren_proxy::ProxyConfig {
            shared_secret: self.shared_secret.clone(),
            oauth_client_id: OAUTH_CLIENT_ID.into(),
            oauth_client_secret: self.oauth_client_secret.clone(),
            session_lifetime_secs: 3600,
            activity_report_secs: 1,
            ..warren_proxy::ProxyConfig::new(
                state_dir,
                DOMAIN,
                self.api_url.parse()?,
                self.relay_internal_url.parse()?,
            )
        })
    }

    /// Stops relay `index` (of [`StackOptions::relays`]): its listeners close and its agent
    /// connections end, so the agents reconnect to another relay through the balancer.
    pub fn stop_relay(&self, index: usize) {
        self.relay_stops[index].cancel();
    }

    /// Stops proxy replica `index` as a terminated pod stops (its shutdown): its listeners
    /// close, open connections finish what they are doing, and the balancers send new
    /// connections to the others.
    pub fn stop_proxy(&self, index: usize) {
        self.proxy_stops[index].0.cancel();
    }

    /// Kills proxy replica `index` as a crashed process dies: its listeners and every
    /// connection it holds close at once, whatever was in flight.
    pub fn kill_proxy(&self, index: usize) {
        let (stop, task) = &self.proxy_stops[index];
        task.abort();
        // Its background tasks (key polls, activity reports) end with it.
        stop.cancel();
    }

    /// Registers another agent (as an admin would) and runs it on its own simulated runtime
    /// against the same relay; its runtime.
    pub async fn add_agent(&mut self, name: &str) -> Result<Arc<SimulatedRuntime>> {
        let runtime = simulated();
        self.add_agent_with_runtime(name, runtime.clone()).await?;
        Ok(runtime)
    }

    /// Registers another agent and runs it on `runtime` (a Kubernetes runtime on a test
    /// control plane, say) against the same relay; its id.
    pub async fn add_agent_with_runtime(
        &mut self,
        name: &str,
        runtime: Arc<dyn warren_agent::runtime::WorkspaceRuntime>,
    ) -> Result<i64> {
        let created = self
            .api(
                reqwest::Method::POST,
                "/api/v1/agents",
                &self.admin.token,
                Some(serde_json::json!({ "name": name })),
            )
            .await?;
        let token = created["token"]
            .as_str()
            .context("the new agent's token")?
            .to_owned();
        let id = created["agent"]["id"]
            .as_i64()
            .context("the new agent's id")?;
        let tasks = spawn_agent(
            &self.relay_agents_url,
            token,
            id.to_string(),
            runtime,
            self.tls.as_ref().map(|p| p.ca.ca_file.clone()),
            &self.shutdown,
        )?;
        self.tasks.extend(tasks);
        Ok(id)
    }

    /// Calls the REST API with a bearer token; a non-2xx answer is an error naming it.
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.api_url))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("{method} {path} answered {status}: {text}");
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: {text}"))
    }

    /// Creates a user (password [`PASSWORD`]) and a personal access token for it.
    pub async fn user(&self, username: &str) -> Result<TestUser> {
        let created = self
            .api(
                reqwest::Method::POST,
                "/api/v1/users",
                &self.admin.token,
                Some(json!({"username": username, "password": PASSWORD})),
            )
            .await?;
        let session = self
            .http
            .post(format!("{}/api/v1/session", self.api_url))
            .json(&json!({"username": username, "password": PASSWORD}))
            .send()
            .await?
            .error_for_status()?
            .json::<Value>()
            .await?;
        Ok(TestUser {
            id: created["id"].as_i64().context("created user has an id")?,
            username: username.into(),
            password: PASSWORD.into(),
            token: session["secret"]
                .as_str()
                .context("session answer has a secret")?
                .into(),
        })
    }

    /// Creates a workspace of `owner` from [`WEB_DEVFILE`] and waits until it runs.
    pub async fn workspace(&self, owner: &TestUser, name: &str) -> Result<TestWorkspace> {
        self.workspace_from(owner, name, WEB_DEVFILE).await
    }

    /// Creates a workspace of `owner` from `devfile` and waits until it runs.
    pub async fn workspace_from(
        &self,
        owner: &TestUser,
        name: &str,
        devfile: &str,
    ) -> Result<TestWorkspace> {
        let w = self
            .api(
                reqwest::Method::POST,
                "/api/v1/workspaces",
                &owner.token,
                Some(json!({"name": name, "devfile": devfile})),
            )
            .await?;
        let ws = TestWorkspace {
            id: w["id"].as_i64().context("workspace id")?,
            name: name.into(),
            namespace: w["namespace"].as_str().context("namespace")?.into(),
            agent_id: w["agent"].as_i64().context("agent id")?,
        };
        self.wait_state(owner, name, "Running").await?;
        Ok(ws)
    }

    /// Waits (up to 30 s, a hang guard) until the workspace's actual state is `state`.
    pub async fn wait_state(&self, owner: &TestUser, name: &str, state: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let w = self
                .api(
                    reqwest::Method::GET,
                    &format!("/api/v1/workspaces/{name}"),
                    &owner.token,
                    None,
                )
                .await?;
            if w["actual_state"] == state {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("workspace {name} did not become {state}: {w}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets the workspace's desired state (`Running`, `Stopped`, …) as `owner`.
    pub async fn set_desired(&self, owner: &TestUser, name: &str, desired: &str) -> Result<()> {
        self.api(
            reqwest::Method::PUT,
            &format!("/api/v1/workspaces/{name}/desired_state"),
            &owner.token,
            Some(json!({"desired_state": desired})),
        )
        .await
        .map(|_| ())
    }

    /// Makes `port` of the workspace reach `addr` (a local upstream of the test).
    pub fn set_endpoint(&self, ws: &TestWorkspace, port: u16, addr: SocketAddr) {
        self.runtime.set_endpoint(&ws.key(), port, addr);
    }

    /// `{port}-{workspace}.ws.localhost:{proxy port}`.
    pub fn host(&self, port: u16, workspace: &str) -> String {
        format!("{port}-{workspace}.{DOMAIN}:{}", self.proxy_addr.port())
    }

    /// The relay's listener for agents and connectors.
    pub fn relay_agents_url(&self) -> &str {
        &self.relay_agents_url
    }

    /// `http` or, with `StackOptions::tls`, `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// `http://{port}-{workspace}.ws.localhost:{proxy port}{path}`.
    pub fn url(&self, port: u16, workspace: &str, path: &str) -> String {
        format!("{}://{}{path}", self.scheme(), self.host(port, workspace))
    }

    /// `http://terminal-{workspace}.ws.localhost:{proxy port}{path}`.
    pub fn terminal_url(&self, workspace: &str, path: &str) -> String {
        format!(
            "{}://terminal-{workspace}.{DOMAIN}:{}{path}",
            self.scheme(),
            self.proxy_addr.port()
        )
    }

    /// A reqwest client that resolves every `*.ws.localhost` name the tests use to the
    /// proxy (glibc does not resolve `*.localhost` by itself) and follows no redirects.
    pub fn client_for(&self, hosts: &[String]) -> reqwest::Client {
        let mut b = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30));
        for h in hosts {
            let name = h.split(':').next().unwrap_or(h);
            b = b.resolve(name, self.proxy_addr);
        }
        if let Some(p) = &self.tls {
            b = p.ca.bundle().expect("the stack's CA").apply(b);
        }
        b.build().expect("reqwest client")
    }
}
