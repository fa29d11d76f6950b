//! The web UI's regions page (Admin → Regions and proxies) over HTTP, on SQLite and
//! (when configured) PostgreSQL: an admin registers, changes and removes a region with the
//! API's rules and errors beside their fields; a proxy's presence shows; others see nothing.

use crate::common;
use crate::ui::{csrf_of, form_with, signed_in};

use common::*;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn admins_register_change_and_remove_regions_in_the_web_ui() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let mut admin = signed_in(&s, "admin", &s.admin_password).await;
        let p = admin.get("/admin").await;
        assert!(p.body.contains(r#"href="/admin/regions""#), "[{l}] linked");
        let p = admin.get("/admin/regions").await;
        assert_eq!(p.status, 200, "[{l}] {}", p.body);
        assert!(p.body.contains("No regions"), "[{l}] {}", p.body);
        assert!(p.body.contains("No proxy has said"), "[{l}] {}", p.body);
        let csrf = csrf_of(&p);
        // An agent naming a region no admin registered is pointed out.
        s.agent(
            "far",
            json!({"region": "eu", "workspace_domain": "ws.example"}),
        )
        .await;
        let p = admin.get("/admin/regions").await;
        assert!(
            p.body
                .contains("Agents far name region <strong>eu</strong>, which is not registered"),
            "[{l}] {}",
            p.body
        );

        // Bad input: the API's message beside its field, 400, the values kept, nothing stored.
        let good = [
            ("name", "eu"),
            ("workspace_domain", "ws.eu.example:443"),
            ("public_scheme", "https"),
            ("ssh_address", "ssh.eu.example:22"),
        ];
        for (field, bad, words) in [
            ("name", "EU!", "is not a region name"),
            ("workspace_domain", "ws eu.example", "is not a host name"),
            ("public_scheme", "ftp", "must be http or https"),
            ("ssh_address", "-oProxyCommand=x:22", "is not host:port"),
        ] {
            let pairs: Vec<(&str, &str)> = good
                .iter()
                .map(|&(k, v)| if k == field { (k, bad) } else { (k, v) })
                .collect();
            let p = admin
                .post_form("/admin/regions", &form_with(&csrf, &pairs))
                .await;
            assert_eq!(p.status, 400, "[{l}] {field}: {}", p.body);
            assert!(
                p.body.contains(&format!(r#"id="{field}-error""#)) && p.body.contains(words),
                "[{l}] {field}: {}",
                p.body
            );
            if field != "public_scheme" {
                let kept = format!(r#"value="{bad}""#);
                assert!(p.body.contains(&kept), "[{l}] {field} kept: {}", p.body);
            }
        }
        let (_, listed) = s.get(&s.admin_token, "/api/v1/regions").await;
        assert_eq!(listed, json!([]), "[{l}] nothing stored");

        // Registered: the door as browsers write it, not yet served.
        let p = admin
            .post_form("/admin/regions", &form_with(&csrf, &good))
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        assert_eq!(p.location.as_deref(), Some("/admin/regions"), "[{l}]");
        let (_, listed) = s.get(&s.admin_token, "/api/v1/regions").await;
        assert_eq!(
            listed[0]["workspace_domain"], "ws.eu.example",
            "[{l}] {listed}"
        );
        assert_eq!(listed[0]["serving"], false, "[{l}] {listed}");
        let p = admin.get("/admin/regions").await;
        assert!(
            p.body
                .contains("https://*.ws.eu.example with SSH at ssh.eu.example:22")
                && p.body.contains("<td>far</td>")
                && !p.body.contains("which is not registered")
                && p.body.contains("no proxy serving"),
            "[{l}] {}",
            p.body
        );

        // A proxy of the region says it serves that door: the page shows it served, and
        // the proxy in the proxies' table.
        let presence = json!({
            "instance": "eu-proxy-0123456789",
            "region": "eu",
            "workspace_domain": "ws.eu.example",
            "public_scheme": "https",
            "ssh_address": "ssh.eu.example:22",
        });
        let (st, b) = s
            .call(
                Method::PUT,
                "/internal/proxy/presence",
                Some(&proxy_jwt()),
                Some(presence),
            )
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let p = admin.get("/admin/regions").await;
        assert!(p.body.contains("served by its proxy"), "[{l}] {}", p.body);
        assert!(
            p.body.contains("<td>eu</td>") && p.body.contains(">serving<"),
            "[{l}] {}",
            p.body
        );

        // A change of the door (SSH back to the central proxy) is a new door: not served
        // until a proxy says it.
        let changed = [
            ("name", "eu"),
            ("workspace_domain", "ws.eu.example"),
            ("public_scheme", "https"),
            ("ssh_address", ""),
        ];
        let p = admin
            .post_form("/admin/regions", &form_with(&csrf, &changed))
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, listed) = s.get(&s.admin_token, "/api/v1/regions").await;
        assert!(listed[0]["ssh_address"].is_null(), "[{l}] {listed}");
        assert_eq!(listed[0]["serving"], false, "[{l}] {listed}");

        // Without the form's CSRF token nothing changes.
        let p = admin
            .post_form("/admin/regions/eu/delete", &[("x".into(), "y".into())])
            .await;
        assert_eq!(p.status, 403, "[{l}] {}", p.body);

        // Others: no such page, no such form.
        s.user("bob", &["api"]).await;
        let mut bob = signed_in(&s, "bob", "password-123").await;
        let bobs = csrf_of(&bob.get("/").await);
        assert_eq!(bob.get("/admin/regions").await.status, 404, "[{l}]");
        for path in ["/admin/regions", "/admin/regions/eu/delete"] {
            let p = bob.post_form(path, &form_with(&bobs, &changed)).await;
            assert_eq!(p.status, 404, "[{l}] {path}");
        }
        let (_, listed) = s.get(&s.admin_token, "/api/v1/regions").await;
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "[{l}] {listed}");

        // Removed; removing again is a not-found page.
        let p = admin
            .post_form("/admin/regions/eu/delete", &form_with(&csrf, &[]))
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, listed) = s.get(&s.admin_token, "/api/v1/regions").await;
        assert_eq!(listed, json!([]), "[{l}]");
        let p = admin
            .post_form("/admin/regions/eu/delete", &form_with(&csrf, &[]))
            .await;
        assert_eq!(p.status, 404, "[{l}] {}", p.body);
        s.stop().await;
    }
}
