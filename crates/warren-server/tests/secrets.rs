//! A user's own secrets and identity (issue 41, item 5) on SQLite and (when configured)
//! PostgreSQL: set once, sealed at rest, never shown again, given to that user's workspaces
//! only — those matching the secret's projects, and not those others may use (a team space,
//! a softlink grant) unless it allows them — and followed by the workspaces when they change.

use crate::common;

use base64::Engine;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Whether `config` gives `key` the value `value` (a Secret's data, base64).
fn gives(config: &str, key: &str, value: &str) -> bool {
    config.contains(&format!("{key}: {}", b64(value)))
}

async fn set_secret(s: &TestServer, token: &str, name: &str, body: Value) -> (u16, Value) {
    s.call(
        Method::PUT,
        &format!("/api/v1/users/me/secrets/{name}"),
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn a_users_secrets_reach_their_workspaces_and_no_one_elses() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;

        // Set: 201 the first time, 200 after; the answer never holds the value.
        let (st, b) = set_secret(&s, &alice, "API_TOKEN", json!({"value": "tok-1"})).await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(
            (b["name"].as_str(), b["kind"].as_str()),
            (Some("API_TOKEN"), Some("env")),
            "[{l}] {b}"
        );
        let (st, b) = set_secret(&s, &alice, "API_TOKEN", json!({"value": "tok-2-s3cret"})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, _) = set_secret(
            &s,
            &alice,
            "npmrc",
            json!({"value": "//reg/:_authToken=n9m", "kind": "file"}),
        )
        .await;
        assert_eq!(st, 201, "[{l}]");
        let (st, _) = set_secret(
            &s,
            &alice,
            "WEB_ONLY",
            json!({"value": "w3b", "projects": "web-*, shop"}),
        )
        .await;
        assert_eq!(st, 201, "[{l}]");
        let (st, b) = s
            .call(
                Method::PUT,
                "/api/v1/users/me/profile",
                Some(&alice),
                Some(json!({"full_name": "Alice Liddell"})),
            )
            .await;
        assert_eq!(
            (st, b["full_name"].as_str()),
            (200, Some("Alice Liddell")),
            "[{l}] {b}"
        );
        let (st, list) = s.get(&alice, "/api/v1/users/me/secrets").await;
        assert_eq!(st, 200, "[{l}] {list}");
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["name"].as_str())
            .collect();
        assert_eq!(names, ["API_TOKEN", "WEB_ONLY", "npmrc"], "[{l}] {list}");
        assert!(
            !list.to_string().contains("tok-2") && !list.to_string().contains("n9m"),
            "[{l}] values never shown: {list}"
        );
        assert_eq!(list[1]["projects"], "web-*, shop", "[{l}] {list}");
        let (_, bobs) = s.get(&bob, "/api/v1/users/me/secrets").await;
        assert_eq!(bobs, json!([]), "[{l}] each user sees their own");

        // Sealed at rest.
        let rows: Vec<(String,)> = sqlx::query_as("SELECT value FROM user_secrets")
            .fetch_all(&s.state.store.db.pool)
            .await
            .unwrap();
        assert_eq!(rows.len(), 3, "[{l}]");
        for (v,) in &rows {
            assert!(
                !v.contains("tok-2") && !v.contains("n9m") && !v.contains(&b64("tok-2-s3cret")),
                "[{l}] plaintext at rest: {v}"
            );
        }

        // Alice's workspace (her personal space, no project): her identity, her secrets but
        // the project-scoped one.
        s.workspace(&alice, json!({"name": "aw"})).await;
        let c = s.config_of(agent, "aw").await;
        assert!(gives(&c, "API_TOKEN", "tok-2-s3cret"), "[{l}] {c}");
        assert!(
            gives(&c, "npmrc", "//reg/:_authToken=n9m"),
            "[{l}] the file secret: {c}"
        );
        assert!(
            gives(&c, "GIT_AUTHOR_NAME", "Alice Liddell")
                && gives(&c, "GIT_COMMITTER_NAME", "Alice Liddell"),
            "[{l}] {c}"
        );
        assert!(
            !c.contains("WEB_ONLY"),
            "[{l}] not matching its projects: {c}"
        );
        // A workspace's own variable wins over her secret of the same name.
        s.workspace(
            &alice,
            json!({"name": "aw2", "variables": [{"key": "API_TOKEN", "value": "own-value"}]}),
        )
        .await;
        let c = s.config_of(agent, "aw2").await;
        assert!(
            gives(&c, "API_TOKEN", "own-value") && !c.contains(&b64("tok-2-s3cret")),
            "[{l}] {c}"
        );

        // Bob's workspace has none of hers.
        s.workspace(&bob, json!({"name": "bw"})).await;
        let c = s.config_of(agent, "bw").await;
        assert!(
            !c.contains("API_TOKEN") && !c.contains("npmrc") && !c.contains(&b64("tok-2-s3cret")),
            "[{l}] {c}"
        );
        assert!(
            gives(&c, "GIT_AUTHOR_NAME", "bob") && !c.contains("GIT_AUTHOR_EMAIL"),
            "[{l}] his username, no email: {c}"
        );

        // Changes follow into her workspaces without a restart: a new email, a removed secret.
        let (st, _) = s
            .call(
                Method::PUT,
                "/api/v1/users/me/profile",
                Some(&alice),
                Some(json!({"full_name": "Alice Liddell", "email": "alice@example.com"})),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let (st, _) = s.delete(&alice, "/api/v1/users/me/secrets/npmrc").await;
        assert_eq!(st, 204, "[{l}]");
        let c = s.config_of(agent, "aw").await;
        assert!(
            gives(&c, "GIT_AUTHOR_EMAIL", "alice@example.com"),
            "[{l}] {c}"
        );
        assert!(
            !c.contains("npmrc"),
            "[{l}] removed from the workspace: {c}"
        );
        let (_, w) = s.get(&alice, "/api/v1/workspaces/aw").await;
        assert_eq!(w["desired_state"], "Running", "[{l}] not restarted: {w}");
        let (st, b) = s.delete(&alice, "/api/v1/users/me/secrets/npmrc").await;
        assert_eq!(st, 404, "[{l}] {b}");

        // A team space's workspace (its developers may use it): withheld, said; a secret
        // that allows shared workspaces goes.
        s.space_with("team", "alice").await;
        let (st, _) = set_secret(
            &s,
            &alice,
            "SHARED_OK",
            json!({"value": "sh4red", "shared_workspaces": true}),
        )
        .await;
        assert_eq!(st, 201, "[{l}]");
        let w = s
            .workspace(&alice, json!({"name": "tw", "space": "team"}))
            .await;
        assert!(
            w["notices"].to_string().contains("API_TOKEN")
                && w["notices"].to_string().contains("--shared-workspaces"),
            "[{l}] {w}"
        );
        let c = s.config_of(agent, "tw").await;
        assert!(
            !c.contains(&b64("tok-2-s3cret")) && gives(&c, "SHARED_OK", "sh4red"),
            "[{l}] {c}"
        );

        // A softlink grant on her personal workspace: the secrets leave it, and it restarts
        // so none stays in its processes; taken back, they return.
        let (st, b) = s
            .call(
                Method::PUT,
                "/api/v1/workspaces/aw/grants/bob",
                Some(&alice),
                None,
            )
            .await;
        assert!(st == 200 || st == 201, "[{l}] {st} {b}");
        let c = s.config_of(agent, "aw").await;
        assert!(
            !c.contains(&b64("tok-2-s3cret")) && gives(&c, "SHARED_OK", "sh4red"),
            "[{l}] {c}"
        );
        let (_, w) = s.get(&alice, "/api/v1/workspaces/aw").await;
        assert_eq!(w["desired_state"], "RestartRequested", "[{l}] {w}");
        let (st, b) = s.delete(&alice, "/api/v1/workspaces/aw/grants/bob").await;
        assert!(st == 200 || st == 204, "[{l}] {st} {b}");
        let c = s.config_of(agent, "aw").await;
        assert!(gives(&c, "API_TOKEN", "tok-2-s3cret"), "[{l}] {c}");

        // A project-scoped secret goes to a matching project's workspace.
        let (st, b) = s
            .admin(Method::POST, "/api/v1/projects", Some(json!({"name": "web-shop", "git_url": "https://git.example.com/web-shop.git", "visibility": "internal"})))
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.workspace(
            &alice,
            json!({"name": "pw", "project": "web-shop", "devfile": WEB_DEVFILE}),
        )
        .await;
        let c = s.config_of(agent, "pw").await;
        assert!(gives(&c, "WEB_ONLY", "w3b"), "[{l}] {c}");
        s.stop().await;
    }
}

/// Attack: names Warren needs, names no shell or file system takes, oversized values, too
/// many secrets, broken globs and a forged identity are refused by field; nothing is stored.
#[tokio::test]
async fn attack_bad_secrets_and_identities_are_refused_by_name() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    let alice = s.user("alice", &["api"]).await;
    for (name, body, field, words) in [
        (
            "WARREN_AGENT",
            json!({"value": "x"}),
            "name",
            "reserved for Warren",
        ),
        (
            "PROJECT_SOURCE",
            json!({"value": "x"}),
            "name",
            "reserved for Warren",
        ),
        (
            "1BAD",
            json!({"value": "x"}),
            "name",
            "not an environment variable name",
        ),
        (
            "a%2Fb",
            json!({"value": "x", "kind": "file"}),
            "name",
            "not a file name",
        ),
        (
            "bad%20name",
            json!({"value": "x", "kind": "file"}),
            "name",
            "not a file name",
        ),
        (
            "BIG",
            json!({"value": "x".repeat(64 * 1024 + 1), "kind": "file"}),
            "value",
            "longer than",
        ),
        (
            "GLOB",
            json!({"value": "x", "projects": "web-[a"}),
            "projects",
            "not a glob",
        ),
    ] {
        let (st, b) = set_secret(&s, &alice, name, body).await;
        assert_eq!(st, 400, "{name}: {b}");
        assert!(
            msg(&b).starts_with(&format!("{field}: ")) && msg(&b).contains(words),
            "{name}: {b}"
        );
        assert!(
            !b.to_string().contains("xxxxxxxx"),
            "{name}: the value is never echoed"
        );
    }
    let (st, b) = set_secret(&s, &alice, "X", json!({"value": "x", "unknown": 1})).await;
    assert_eq!(st, 400, "{b}");
    for (body, field) in [
        (json!({"email": "not-an-address"}), "email"),
        (json!({"email": "a@b\nX-Evil: 1"}), "email"),
        (json!({"full_name": "Eve\nInjected"}), "full_name"),
        (json!({"full_name": "x".repeat(300)}), "full_name"),
    ] {
        let (st, b) = s
            .call(
                Method::PUT,
                "/api/v1/users/me/profile",
                Some(&alice),
                Some(body.clone()),
            )
            .await;
        assert_eq!(st, 400, "{body}: {b}");
        assert!(msg(&b).starts_with(&format!("{field}: ")), "{body}: {b}");
    }
    for i in 0..100 {
        let (st, b) = set_secret(&s, &alice, &format!("S{i}"), json!({"value": "v"})).await;
        assert_eq!(st, 201, "{b}");
    }
    let (st, b) = set_secret(&s, &alice, "ONE_MORE", json!({"value": "v"})).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (409, Some("too_many_secrets")),
        "{b}"
    );
    let (st, _) = set_secret(&s, &alice, "S7", json!({"value": "replaced"})).await;
    assert_eq!(st, 200, "replacing one is not one more");
    let (_, list) = s.get(&alice, "/api/v1/users/me/secrets").await;
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(100),
        "nothing refused was stored"
    );
    // Without a token, or with a read-only one, nothing is set.
    let (st, _) = set_secret(&s, "wrn_not_a_token", "A", json!({"value": "v"})).await;
    assert_eq!(st, 401);
    let reader = s.user("reader", &["read_api"]).await;
    let (st, _) = set_secret(&s, &reader, "A", json!({"value": "v"})).await;
    assert_eq!(st, 403);
    s.stop().await;
}

/// The web UI's secrets page: a secret set from the form is listed by name (its value never
/// on the page), a bad name is said beside its field with the form kept, the commit identity
/// is saved, and a secret is removed.
#[tokio::test]
async fn the_secrets_page_sets_lists_and_removes() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    let alice = s.user("alice", &["api"]).await;
    let mut b = crate::ui::signed_in(&s, "alice", "password-123").await;
    let account = b.get("/account").await;
    assert!(
        account.body.contains("href=\"/account/secrets\""),
        "{}",
        account.body
    );
    let page = b.get("/account/secrets").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("No secrets yet."), "{}", page.body);
    let csrf = crate::ui::csrf_of(&page);
    let form = |pairs: &[(&str, &str)]| crate::ui::form_with(&csrf, pairs);

    let p = b
        .post_form(
            "/account/secrets",
            &form(&[
                ("name", "1BAD"),
                ("kind", "env"),
                ("value", "v4lue-not-shown"),
                ("projects", "web-*"),
            ]),
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains("id=\"name-error\"") && p.body.contains("not an environment variable name"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains("value=\"web-*\""),
        "the form is kept: {}",
        p.body
    );
    assert!(
        !p.body.contains("v4lue-not-shown"),
        "the value is not echoed"
    );

    let p = b
        .post_form(
            "/account/secrets",
            &form(&[
                ("name", "NPM_TOKEN"),
                ("kind", "env"),
                ("value", "v4lue-not-shown"),
                ("shared_workspaces", "true"),
            ]),
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (303, Some("/account/secrets")),
        "{}",
        p.body
    );
    let page = b.get("/account/secrets").await;
    assert!(
        page.body.contains("<code>NPM_TOKEN</code>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("v4lue-not-shown"), "never shown again");
    let (_, list) = s.get(&alice, "/api/v1/users/me/secrets").await;
    assert_eq!(
        (
            list[0]["name"].as_str(),
            list[0]["shared_workspaces"].as_bool()
        ),
        (Some("NPM_TOKEN"), Some(true)),
        "{list}"
    );

    let p = b
        .post_form(
            "/account/profile",
            &form(&[("full_name", "Alice L"), ("email", "nope")]),
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("id=\"email-error\""), "{}", p.body);
    let p = b
        .post_form(
            "/account/profile",
            &form(&[("full_name", "Alice L"), ("email", "alice@example.com")]),
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let page = b.get("/account/secrets").await;
    assert!(
        page.body.contains("Alice L") && page.body.contains("alice@example.com"),
        "{}",
        page.body
    );

    // A Git credential: a wrong host is named by field, the form kept, the token never
    // echoed; saved, listed by host; removed.
    let p = b
        .post_form(
            "/account/git-credentials",
            &form(&[
                ("host", "ftp://git.example.com"),
                ("kind", "token"),
                ("secret", "gh-tok-not-shown"),
            ]),
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains("id=\"host-error\"") && p.body.contains("value=\"ftp://git.example.com\""),
        "{}",
        p.body
    );
    assert!(
        !p.body.contains("gh-tok-not-shown"),
        "the token is not echoed"
    );
    let p = b
        .post_form(
            "/account/git-credentials",
            &form(&[
                ("host", "https://Git.Example.com/team/app.git"),
                ("kind", "token"),
                ("secret", "gh-tok-not-shown"),
            ]),
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let page = b.get("/account/secrets").await;
    assert!(
        page.body.contains("<code>https://git.example.com</code>")
            && !page.body.contains("gh-tok-not-shown"),
        "{}",
        page.body
    );
    let (_, creds) = s.get(&alice, "/api/v1/users/me/git-credentials").await;
    let id = creds[0]["id"].as_i64().unwrap_or_default();
    let p = b
        .post_form(&format!("/account/git-credentials/{id}/delete"), &form(&[]))
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let (_, creds) = s.get(&alice, "/api/v1/users/me/git-credentials").await;
    assert_eq!(creds, json!([]));

    let p = b
        .post_form("/account/secrets/NPM_TOKEN/delete", &form(&[]))
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let (_, list) = s.get(&alice, "/api/v1/users/me/secrets").await;
    assert_eq!(list, json!([]));
    // Another form's token does not do it (a forged form).
    let p = b
        .post_form(
            "/account/secrets",
            &[
                ("name".into(), "X".into()),
                ("value".into(), "v".into()),
                ("csrf_token".into(), "forged".into()),
            ],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    s.stop().await;
}

/// Issue 41, item 5: a user's own Git credential opens their private repository by URL and
/// goes to their workspace's credential helper; a refused one and one withheld from a team
/// space's workspace are said to be theirs, with what to do; its secret is never shown; a
/// project's workspace gets the user's instead of the project's; removed, it leaves.
#[tokio::test]
async fn your_git_credential_opens_your_private_repositories() {
    if !warren_testkit::git_http::have_git() {
        return;
    }
    let forge = warren_testkit::git_http::GitHttpServer::start("ann", "s3cret-pass")
        .await
        .unwrap();
    forge
        .create_repo("private", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    let url = forge.url("private");
    let host = url.split("/private").next().unwrap_or_default().to_owned();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let add = |body: Value| {
            let s = &s;
            let ann = ann.clone();
            async move {
                s.call(
                    Method::POST,
                    "/api/v1/users/me/git-credentials",
                    Some(&ann),
                    Some(body),
                )
                .await
            }
        };
        // A key is not for an https host; a host that is not one is named.
        let (st, b) = add(json!({"host": url, "credential": {"kind": "ssh_key", "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----"}})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).starts_with("credential: a private key is for ssh:// hosts"),
            "[{l}] {b}"
        );
        let (st, b) =
            add(json!({"host": "file:///etc", "credential": {"kind": "token", "token": "t"}}))
                .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("host: "), "[{l}] {b}");

        // A wrong password: the repository's refusal names her credential.
        let (st, b) = add(json!({"host": url, "credential": {"kind": "basic", "username": "ann", "password": "wrong"}})).await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(
            (b["host"].as_str(), b["kind"].as_str()),
            (Some(host.as_str()), Some("basic")),
            "[{l}] {b}"
        );
        let (st, b) = s
            .post(&ann, "/api/v1/workspaces", json!({"repository": url}))
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "repository_auth_failed", "[{l}] {b}");
        assert!(
            msg(&b).contains(&format!("your credential for {host} was refused")),
            "[{l}] {b}"
        );

        // Replaced (200, one per host): the repository opens, and her workspace's helper has
        // it; no answer shows it.
        let (st, b) = add(json!({"host": host, "credential": {"kind": "basic", "username": "ann", "password": "s3cret-pass"}})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, list) = s.get(&ann, "/api/v1/users/me/git-credentials").await;
        assert_eq!(st, 200, "[{l}] {list}");
        assert_eq!(list.as_array().map(Vec::len), Some(1), "[{l}] {list}");
        assert!(!list.to_string().contains("s3cret"), "[{l}] {list}");
        let w = s
            .workspace(&ann, json!({"repository": url, "name": "mine"}))
            .await;
        assert!(
            w["url"].as_str().unwrap_or("").contains("8080-mine."),
            "[{l}] its devfile was read with her credential: {w}"
        );
        let c = s.config_of(agent, "mine").await;
        assert!(
            gives(&c, "credentials", "username=ann\npassword=s3cret-pass\n"),
            "[{l}] {c}"
        );

        // A rebuild reads the private repository again with her credential.
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/mine/rebuild",
                Some(&ann),
                Some(json!({"dry_run": true})),
            )
            .await;
        assert_eq!((st, b["changes"].clone()), (200, json!([])), "[{l}] {b}");

        // A team space's workspace: withheld, and the refusal says so.
        s.space_with("team", "ann").await;
        let (st, b) = s
            .post(
                &ann,
                "/api/v1/workspaces",
                json!({"repository": url, "space": "team"}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(
            msg(&b).contains("not given to a workspace others may use")
                && msg(&b).contains("--shared-workspaces"),
            "[{l}] {b}"
        );

        // A project's workspace: her credential instead of the project's.
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/projects",
                Some(
                    json!({"name": "app", "git_url": url, "visibility": "internal",
                    "credential": {"kind": "token", "token": "project-tok", "username": "ann"}}),
                ),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.workspace(
            &ann,
            json!({"project": "app", "name": "pw", "devfile": WEB_DEVFILE}),
        )
        .await;
        let c = s.config_of(agent, "pw").await;
        assert!(
            gives(&c, "credentials", "username=ann\npassword=s3cret-pass\n")
                && !c.contains(&b64("project-tok")),
            "[{l}] {c}"
        );

        // Removed: her workspaces follow (the project's again; none for the repository).
        let id = list[0]["id"].as_i64().unwrap_or_default();
        let (st, b) = s
            .delete(&ann, &format!("/api/v1/users/me/git-credentials/{id}"))
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let c = s.config_of(agent, "pw").await;
        assert!(
            gives(&c, "credentials", "username=ann\npassword=project-tok\n"),
            "[{l}] {c}"
        );
        let c = s.config_of(agent, "mine").await;
        assert!(
            !c.contains(&b64("username=ann\npassword=s3cret-pass\n")),
            "[{l}] {c}"
        );
        let (st, b) = s
            .delete(&ann, &format!("/api/v1/users/me/git-credentials/{id}"))
            .await;
        assert_eq!(st, 404, "[{l}] {b}");
        s.stop().await;
    }
}
