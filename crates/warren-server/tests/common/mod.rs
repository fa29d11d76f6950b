//! Test helpers: a database per test (SQLite file, or a fresh PostgreSQL schema), and the
//! whole server on port 0 with a hand-moved clock.
#![allow(dead_code)]

pub mod browser;
pub mod generation;

use reqwest::Method;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_server::app::AppState;
use warren_server::clock::ManualClock;
use warren_server::relay::jwt;
use warren_server::{Server, ServerConfig};
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};

pub const RELAY_SECRET: &str = "test-relay-secret-0123456789abcdef";

/// A JWT as the proxy signs it for the server's internal endpoints, valid now.
pub fn proxy_jwt() -> String {
    jwt::mint(
        RELAY_SECRET.as_bytes(),
        warren_types::internal::PROXY_JWT_ISSUER,
        SERVER_JWT_AUDIENCE,
        None,
        chrono::Utc::now().timestamp(),
        30,
    )
}

/// Which database a test runs on.
#[derive(Debug, Clone)]
pub enum DbChoice {
    Sqlite,
    Postgres(String),
}

impl DbChoice {
    pub fn label(&self) -> &'static str {
        match self {
            DbChoice::Sqlite => "sqlite",
            DbChoice::Postgres(_) => "postgres",
        }
    }
}

/// SQLite always; PostgreSQL too when `WARREN_TEST_DATABASE_URL` is set.
pub fn databases() -> Vec<DbChoice> {
    let mut v = vec![DbChoice::Sqlite];
    match std::env::var("WARREN_TEST_DATABASE_URL") {
        Ok(u) if !u.is_empty() => v.push(DbChoice::Postgres(u)),
        _ => eprintln!("skipping the PostgreSQL run: WARREN_TEST_DATABASE_URL is not set"),
    }
    v
}

/// A database for one test; a PostgreSQL schema is dropped when this is dropped.
pub struct TestDb {
    pub url: String,
    pub dir: tempfile::TempDir,
    pg: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(choice: &DbChoice) -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        match choice {
            DbChoice::Sqlite => TestDb {
                url: format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("warren.db").display()
                ),
                dir,
                pg: None,
            },
            DbChoice::Postgres(base) => {
                let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
                sqlx::any::install_default_drivers();
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(base)
                    .await
                    .expect("connect postgres");
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&mut conn)
                    .await
                    .expect("create schema");
                let sep = if base.contains('?') { '&' } else { '?' };
                TestDb {
                    // Named after the schema, so the cleanup can end what still uses it.
                    url: format!(
                        "{base}{sep}options=-c%20search_path%3D{schema}&application_name={schema}"
                    ),
                    dir,
                    pg: Some((base.clone(), schema)),
                }
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((base, schema)) = self.pg.take() {
            // Drop runs outside async; a helper thread with its own runtime does the cleanup.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async {
                    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&base)
                        .await
                        .ok()?;
                    // A server dropped without `stop` may still hold a transaction open on the
                    // test's runtime, which this thread blocks: end its connections first, or
                    // the drop would wait for them forever.
                    sqlx::query(&format!(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = '{schema}' AND pid <> pg_backend_pid()"
                    ))
                    .execute(&mut conn)
                    .await
                    .ok()?;
                    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .execute(&mut conn)
                        .await
                        .ok()
                })
            })
            .join();
        }
    }
}

/// A running server with an admin token.
pub struct TestServer {
    pub base: String,
    pub state: AppState,
    pub clock: ManualClock,
    pub admin_token: String,
    pub admin_password: String,
    pub http: reqwest::Client,
    pub shutdown: CancellationToken,
    pub db: TestDb,
    pub label: &'static str,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(choice: &DbChoice) -> TestServer {
        Self::start_with(choice, |_| {}).await
    }

    pub async fn start_with(
        choice: &DbChoice,
        tweak: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        Self::start_at(choice, |c, _| tweak(c)).await
    }

    /// Like [`TestServer::start_with`], `tweak` also told the server's base URL (bound
    /// before the configuration is made, for settings naming the server itself).
    pub async fn start_at(
        choice: &DbChoice,
        tweak: impl FnOnce(&mut ServerConfig, &str),
    ) -> TestServer {
        let db = TestDb::new(choice).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let mut config = ServerConfig::new(db.dir.path().join("home"));
        config.database_url = Some(db.url.clone());
        config.relay_secret = Some(RELAY_SECRET.into());
        config.max_db_connections = 5;
        // The tests' Git servers and registries listen on 127.0.0.1; the rest of loopback
        // stays refused, which the attack tests use.
        config.outbound_allow = vec!["127.0.0.1/32".parse().expect("cidr")];
        tweak(&mut config, &base);
        let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
        let server = Server::prepare_with_clock(config, Arc::new(clock.clone()))
            .await
            .expect("prepare");
        let admin = server
            .bootstrap_admin()
            .cloned()
            .expect("bootstrap admin on an empty database");
        let state = server.state().clone();
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let task = tokio::spawn(async move {
            server.serve(listener, s).await.expect("serve");
        });
        let http = reqwest::Client::new();
        let mut ts = TestServer {
            base,
            state,
            clock,
            admin_token: String::new(),
            admin_password: admin.password.clone(),
            http,
            shutdown,
            db,
            label: choice.label(),
            task: Some(task),
        };
        if !ts.state.password_login {
            // Passwords sign nobody in: the admin's token straight from the domain layer.
            let t = warren_server::app::tokens::issue_for(&ts.state, &admin.username, "test", 1)
                .await
                .expect("admin token");
            ts.admin_token = t.secret;
            return ts;
        }
        let (status, body) = ts
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": admin.username, "password": admin.password})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        ts.admin_token = body["secret"].as_str().expect("secret").to_owned();
        ts
    }

    /// Any request; returns the status and the JSON body (Null when empty or not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `GET path` as the holder of `token`.
    pub async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, Some(token), None).await
    }

    /// `DELETE path` as the holder of `token`.
    pub async fn delete(&self, token: &str, path: &str) -> (u16, Value) {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// `POST path` with JSON `body` as the holder of `token`.
    pub async fn post(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// `PUT path` with JSON `body` as the holder of `token`.
    pub async fn put(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    /// `PATCH path` with JSON `body` as the holder of `token`.
    pub async fn patch(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::PATCH, path, Some(token), Some(body))
            .await
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, path, Some(&self.admin_token.clone()), body)
            .await
    }

    /// Creates an agent; returns its id.
    pub async fn agent(&self, name: &str, config: Value) -> i64 {
        let (s, b) = self
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": name, "config": config})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        b["agent"]["id"].as_i64().expect("agent id")
    }

    /// Creates a user and a token with `scopes`; returns the token.
    pub async fn user(&self, name: &str, scopes: &[&str]) -> String {
        let (s, b) = self
            .admin(
                Method::POST,
                "/api/v1/users",
                Some(json!({"username": name, "password": "password-123"})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let (s, b) = self
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": name, "password": "password-123"})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let t = b["secret"].as_str().expect("secret").to_owned();
        if scopes == ["api", "workspace"] {
            return t;
        }
        let (s, b) = self
            .call(
                Method::POST,
                "/api/v1/users/me/tokens",
                Some(&t),
                Some(json!({"name": "t", "scopes": scopes})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        b["secret"].as_str().expect("secret").to_owned()
    }

    /// A relay JWT for `agent`.
    pub fn relay_jwt(&self, agent: i64) -> String {
        jwt::mint(
            RELAY_SECRET.as_bytes(),
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            Some(agent.to_string()),
            chrono::Utc::now().timestamp(),
            30,
        )
    }

    /// `POST /internal/agents/reconcile` as the relay for `agent`.
    /// The clock moves 1 ms first, as real time would between two calls.
    pub async fn reconcile(&self, agent: i64, body: Value) -> (u16, Value) {
        self.clock.advance_ms(1);
        let jwt = self.relay_jwt(agent);
        self.call(
            Method::POST,
            warren_types::reconcile::RECONCILE_PATH,
            Some(&jwt),
            Some(body),
        )
        .await
    }

    /// A reconcile that must succeed; returns the infos by workspace name.
    pub async fn reconcile_ok(
        &self,
        agent: i64,
        update_type: &str,
        infos: Value,
    ) -> serde_json::Map<String, Value> {
        let (s, b) = self
            .reconcile(
                agent,
                json!({"update_type": update_type, "workspace_agent_infos": infos}),
            )
            .await;
        assert_eq!(s, 201, "[{}] {b}", self.label);
        let mut out = serde_json::Map::new();
        for i in b["workspace_rails_infos"].as_array().expect("infos") {
            out.insert(i["name"].as_str().expect("name").to_owned(), i.clone());
        }
        out
    }

    /// Creates a workspace through the API (default devfile unless `extra` says otherwise).
    /// Workspace `name`'s objects as the agent receives them (a full reconcile).
    pub async fn config_of(&self, agent: i64, name: &str) -> String {
        let infos = self.reconcile_ok(agent, "full", json!([])).await;
        infos[name]["config_to_apply"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn workspace(&self, token: &str, extra: Value) -> Value {
        let (s, b) = self
            .call(Method::POST, "/api/v1/workspaces", Some(token), Some(extra))
            .await;
        assert_eq!(s, 201, "[{}] {b}", self.label);
        b
    }

    /// Space `path`, made by the admin, with `user` among its developers.
    pub async fn space_with(&self, path: &str, user: &str) {
        self.space(path).await;
        self.member(path, user, "developer").await;
    }

    /// Space `path`, made by the admin.
    pub async fn space(&self, path: &str) {
        let (st, b) = self
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({ "path": path })),
            )
            .await;
        assert_eq!(st, 201, "[{}] {b}", self.label);
    }

    /// The admin gives `user` the `role` in space `path`.
    pub async fn member(&self, path: &str, user: &str, role: &str) {
        let (st, b) = self
            .admin(
                Method::PUT,
                &format!("/api/v1/spaces/{path}/members/{user}"),
                Some(json!({ "role": role })),
            )
            .await;
        assert_eq!(st, 200, "[{}] {b}", self.label);
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A Deployment as an agent reports it.
pub fn deployment(
    name: &str,
    rv: Option<&str>,
    replicas: Option<i64>,
    progressing: Option<&str>,
    available: Option<&str>,
    counts: (Option<i64>, Option<i64>),
) -> Value {
    let mut conditions = vec![];
    if let Some(r) = progressing {
        conditions.push(
            json!({"type": "Progressing", "status": "True", "reason": r, "message": "progress"}),
        );
    }
    if let Some(r) = available {
        conditions.push(json!({"type": "Available", "status": "True", "reason": r}));
    }
    let mut status = json!({ "conditions": conditions });
    if let Some(a) = counts.0 {
        status["availableReplicas"] = json!(a);
    }
    if let Some(u) = counts.1 {
        status["unavailableReplicas"] = json!(u);
    }
    let mut spec = json!({});
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    let mut metadata = json!({"name": name});
    if let Some(rv) = rv {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec, "status": status})
}

pub const NRA: &str = "NewReplicaSetAvailable";
pub const MRA: &str = "MinimumReplicasAvailable";
pub const MRU: &str = "MinimumReplicasUnavailable";

/// The report of a running workspace.
pub fn running(name: &str, rv: &str) -> Value {
    json!({"name": name, "namespace": format!("warren-ws-{name}"),
           "latest_k8s_deployment_info": deployment(name, Some(rv), Some(1), Some(NRA), Some(MRA), (Some(1), None))})
}

/// The message of an API error body; panics on anything else.
pub fn msg(b: &Value) -> &str {
    b["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an API error: {b}"))
}

/// The report of a stopped workspace.
pub fn stopped(name: &str, rv: &str) -> Value {
    json!({"name": name, "namespace": format!("warren-ws-{name}"),
           "latest_k8s_deployment_info": deployment(name, Some(rv), Some(0), Some(NRA), Some(MRA), (None, None))})
}

/// A one-container devfile with a public and an internal endpoint.
pub const WEB_DEVFILE: &str = "schemaVersion: 2.2.0
metadata:
  name: web
components:
  - name: dev
    container:
      image: alpine:3
      memoryLimit: 1Gi
      cpuLimit: '1'
      endpoints:
        - name: web
          targetPort: 8080
          exposure: public
        - name: debug
          targetPort: 5005
          exposure: internal
";

/// A valid OpenSSH public key.
pub const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEmv+5QZ8fnzg9O8BUgrxNvCI4fmArD7xgQnXxlfb9xh me@laptop";
