//! Features fetched from a real registry (Debian's docker-registry): by digest, cached and
//! checked, with the agent's credentials and certificate trust; their dependencies followed
//! and put first; local ones through the agent's source; what is not a Feature refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use warren_features::oci::Registries;
use warren_features::{resolve, FeatureError, LocalFeatures};
use warren_netguard::Guard;
use warren_testkit::registry::{self, borrowed, simple_feature, Registry, RegistryOptions};
use warren_types::features::{FeatureBuild, FeatureRequest, FeatureSource, FeatureValue};

/// Local Features from a map of folder → archive.
struct Local(BTreeMap<String, Vec<u8>>);

#[async_trait::async_trait]
impl LocalFeatures for Local {
    async fn fetch(&self, dir: &str) -> Result<(Vec<u8>, Option<String>), String> {
        self.0
            .get(dir)
            .map(|a| (a.clone(), None))
            .ok_or_else(|| format!("no folder {dir}"))
    }
}

fn no_local() -> Local {
    Local(BTreeMap::new())
}

fn registries(r: &Registry, cache: &std::path::Path, certs: &std::path::Path) -> Registries {
    Registries {
        certs_dir: certs.to_owned(),
        plain_http: if r.ca_pem.is_none() {
            vec![r.addr.clone()]
        } else {
            vec![]
        },
        cache_dir: cache.to_owned(),
        credentials: Arc::new(|_: &str| None),
        guard: None,
    }
}

fn request(reference: &str) -> FeatureRequest {
    FeatureRequest {
        source: FeatureSource::Oci(reference.to_owned()),
        options: BTreeMap::new(),
    }
}

fn build(features: Vec<FeatureRequest>) -> FeatureBuild {
    FeatureBuild {
        features,
        ..Default::default()
    }
}

/// Resolves, collecting the log.
async fn run(
    b: &FeatureBuild,
    regs: &Registries,
    local: &dyn LocalFeatures,
) -> (
    Result<Vec<warren_features::Resolved>, FeatureError>,
    Vec<String>,
) {
    let lines = Mutex::new(vec![]);
    let mut log = |l: String| lines.lock().unwrap().push(l);
    let r = resolve(b, regs, local, &mut log).await;
    (r, lines.into_inner().unwrap())
}

#[tokio::test]
async fn a_published_feature_is_fetched_by_digest_and_kept_by_it() {
    if !registry::available() {
        return;
    }
    let r = Registry::start(&RegistryOptions::default()).await.unwrap();
    let hello = simple_feature("hello", "", "hello");
    let (reference, digest) = r
        .push_feature("features/hello:1", &borrowed(&hello), None)
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    // Through the agent's guard: a plain-HTTP registry the operator named is trusted by name.
    let regs = Registries {
        guard: Some(Guard::default()),
        ..registries(&r, cache.path(), cache.path())
    };
    let b = build(vec![request(&reference)]);

    let (first, log) = run(&b, &regs, &no_local()).await;
    let first = first.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].digest, digest);
    assert_eq!(first[0].metadata.id, "hello");
    assert!(!log.iter().any(|l| l.contains("cache")), "{log:?}");
    let cached: Vec<_> = std::fs::read_dir(cache.path()).unwrap().flatten().collect();
    assert_eq!(cached.len(), 1, "the archive is kept by its digest");

    // Again: the manifest is asked for (a tag moves), the archive comes from the cache.
    let (again, log) = run(&b, &regs, &no_local()).await;
    assert_eq!(again.unwrap()[0].digest, digest);
    assert!(
        log.iter().any(|l| l.contains("from the agent's cache")),
        "{log:?}"
    );

    // A damaged copy is not used: fetched again, and replaced.
    std::fs::write(cached[0].path(), b"not the archive").unwrap();
    let (third, log) = run(&b, &regs, &no_local()).await;
    assert_eq!(third.unwrap()[0].metadata.id, "hello");
    assert!(
        !log.iter().any(|l| l.contains("from the agent's cache")),
        "{log:?}"
    );
    assert_ne!(std::fs::read(cached[0].path()).unwrap(), b"not the archive");
}

#[tokio::test]
async fn the_registry_is_reached_with_the_agents_credentials_and_certificate_trust() {
    if !registry::available() {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let r = Registry::start(&RegistryOptions {
        trust_in: Some(certs.path().to_owned()),
        user: Some(("ann".into(), "feature-pass-1".into())),
    })
    .await
    .unwrap();
    let hello = simple_feature("hello", "", "hello");
    let (reference, _) = r
        .push_feature(
            "team/hello:1",
            &borrowed(&hello),
            Some(("ann", "feature-pass-1")),
        )
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let b = build(vec![request(&reference)]);

    let anonymous = registries(&r, cache.path(), certs.path());
    let (e, _) = run(&b, &anonymous, &no_local()).await;
    let e = warren_types::error_chain(&e.unwrap_err());
    assert!(
        e.contains(&reference) && e.to_lowercase().contains("auth"),
        "{e}"
    );

    let wrong = Registries {
        credentials: Arc::new(|_: &str| Some(("ann".into(), "wrong".into()))),
        ..anonymous.clone()
    };
    assert!(run(&b, &wrong, &no_local()).await.0.is_err());

    let addr = r.addr.clone();
    let right = Registries {
        credentials: Arc::new(move |registry: &str| {
            (registry == addr).then(|| ("ann".into(), "feature-pass-1".into()))
        }),
        ..anonymous.clone()
    };
    let (ok, _) = run(&b, &right, &no_local()).await;
    assert_eq!(ok.unwrap()[0].metadata.id, "hello");
    // Through the agent's guard too: a registry with certificates in certs.d is trusted by
    // name, its TLS carried in a tunnel.
    let tunnelled = Registries {
        guard: Some(Guard::default()),
        cache_dir: cache.path().join("tunnelled"),
        ..right.clone()
    };
    let (ok, _) = run(&b, &tunnelled, &no_local()).await;
    assert_eq!(ok.unwrap()[0].metadata.id, "hello");

    // The certificate is trusted for that registry only because certs.d says so.
    let elsewhere = tempfile::tempdir().unwrap();
    let untrusted = Registries {
        certs_dir: elsewhere.path().to_owned(),
        cache_dir: elsewhere.path().join("cache"),
        ..right
    };
    let (e, _) = run(&b, &untrusted, &no_local()).await;
    let e = warren_types::error_chain(&e.unwrap_err());
    assert!(
        e.to_lowercase().contains("certificate") || e.contains("tls"),
        "{e}"
    );
}

#[tokio::test]
async fn dependencies_are_fetched_and_installed_first_and_a_cycle_is_refused() {
    if !registry::available() {
        return;
    }
    let r = Registry::start(&RegistryOptions::default()).await.unwrap();
    let a = &r.addr;
    let common = simple_feature(
        "common",
        r#", "options": {"flavor": {"type": "string", "default": "plain"}}"#,
        "common $FLAVOR",
    );
    let node = simple_feature(
        "node",
        &format!(r#", "dependsOn": {{ "{a}/f/common:1": {{ "flavor": "zsh" }} }}"#),
        "node",
    );
    let tool = simple_feature(
        "tool",
        &format!(r#", "installsAfter": ["{a}/f/node"]"#),
        "tool",
    );
    for (path, files) in [
        ("f/common:1", &common),
        ("f/node:1", &node),
        ("f/tool:1", &tool),
    ] {
        r.push_feature(path, &borrowed(files), None).await.unwrap();
    }
    let cache = tempfile::tempdir().unwrap();
    let regs = registries(&r, cache.path(), cache.path());
    // The user names tool before node, and common not at all.
    let b = build(vec![
        request(&format!("{a}/f/tool:1")),
        request(&format!("{a}/f/node:1")),
    ]);
    let (resolved, _) = run(&b, &regs, &no_local()).await;
    let resolved = resolved.unwrap();
    let ids: Vec<&str> = resolved.iter().map(|r| r.metadata.id.as_str()).collect();
    assert_eq!(ids, ["common", "node", "tool"]);
    assert!(!resolved[0].requested && resolved[1].requested);
    assert_eq!(
        resolved[0].options["flavor"],
        FeatureValue::String("zsh".into())
    );

    // The user's order cannot pull tool before node (installsAfter).
    let mut forced = b.clone();
    forced.install_order = vec![format!("{a}/f/tool")];
    let (resolved, _) = run(&forced, &regs, &no_local()).await;
    let ids: Vec<String> = resolved
        .unwrap()
        .iter()
        .map(|r| r.metadata.id.clone())
        .collect();
    assert_eq!(ids, ["common", "node", "tool"]);

    let x = simple_feature(
        "x",
        &format!(r#", "dependsOn": {{ "{a}/f/y:1": {{}} }}"#),
        "x",
    );
    let y = simple_feature(
        "y",
        &format!(r#", "dependsOn": {{ "{a}/f/x:1": {{}} }}"#),
        "y",
    );
    r.push_feature("f/x:1", &borrowed(&x), None).await.unwrap();
    r.push_feature("f/y:1", &borrowed(&y), None).await.unwrap();
    let (e, _) = run(
        &build(vec![request(&format!("{a}/f/x:1"))]),
        &regs,
        &no_local(),
    )
    .await;
    let e = e.unwrap_err().to_string();
    assert!(e.contains("depend on each other"), "{e}");
}

#[tokio::test]
async fn what_is_not_a_feature_is_refused_and_local_features_come_from_the_repository() {
    if !registry::available() {
        return;
    }
    let r = Registry::start(&RegistryOptions::default()).await.unwrap();
    let (image, _) = r
        .push_artifact(
            "team/app:1",
            b"not a feature",
            "application/vnd.oci.image.config.v1+json",
            None,
        )
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let regs = registries(&r, cache.path(), cache.path());
    let (e, _) = run(&build(vec![request(&image)]), &regs, &no_local()).await;
    let e = e.unwrap_err().to_string();
    assert!(e.contains("not a Dev Container Feature"), "{e}");
    let (e, _) = run(
        &build(vec![request(&format!("{}/team/absent:1", r.addr))]),
        &regs,
        &no_local(),
    )
    .await;
    assert!(warren_types::error_chain(&e.unwrap_err()).contains("absent"));

    // A local Feature depending on another local one, beside it.
    let a = simple_feature("a", r#", "dependsOn": { "./b": {} }"#, "a");
    let b = simple_feature("b", "", "b");
    let tar = |f: &[(String, u32, Vec<u8>)]| registry::feature_tar(&borrowed(f)).unwrap();
    let local = Local(BTreeMap::from([
        (".devcontainer/a".to_owned(), tar(&a)),
        (".devcontainer/b".to_owned(), tar(&b)),
    ]));
    let req = FeatureRequest {
        source: FeatureSource::Local(".devcontainer/a".into()),
        options: BTreeMap::new(),
    };
    let (resolved, _) = run(&build(vec![req]), &regs, &local).await;
    let ids: Vec<String> = resolved
        .unwrap()
        .iter()
        .map(|r| r.metadata.id.clone())
        .collect();
    assert_eq!(ids, ["b", "a"]);
}
