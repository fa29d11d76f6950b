//! Prebuilds on the one-node cluster: a new workspace whose claims name a prebuild starts with
//! a copy of the prebuild's volume, carried by the agent from a reader pod in the prebuild's
//! namespace into the new pod's seeding init container (files, modes, links and dotfiles as
//! they were); one naming a workspace that is not that prebuild, or whose prebuild cannot be
//! read whole, starts empty (no marker, no half copy).

use crate::kube_common::eventually;
use crate::kube_node::{exec, exec_ok, live_pods, setup, terminate, wait_state, Setup};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::Value;
use warren_agent::runtime::{WorkspaceKey, WorkspaceRuntime};
use warren_types::prebuild::{Seed, SEEDING_MARKER};
use warren_types::state::ActualState;
use warren_types::{AgentId, DesiredState, WorkspaceId};

const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: seeded
components:
  - name: dev
    container:
      image: localhost/warren-test:node
      command: ["/bin/sh", "-c", "exec sleep 2147483647"]
      memoryLimit: 256Mi
"#;

/// What the server renders for workspace `name` (id `id`) on this agent.
fn render(
    s: &Setup,
    name: &str,
    id: i64,
    prebuild: bool,
    seed: Option<Seed<'_>>,
    desired: DesiredState,
) -> (WorkspaceKey, Vec<Value>) {
    let mut cfg = warren_types::config::AgentConfig::default();
    cfg.editor.name = warren_types::config::EditorName::None;
    let devfile = warren_devfile::parse_devfile(DEVFILE).expect("the test devfile");
    let rendered = warren_devfile::render(
        &devfile,
        &warren_devfile::RenderRequest {
            workspace_name: name,
            workspace_id: WorkspaceId(id),
            agent_id: AgentId(s.agent),
            agent_config: &cfg,
            project: None,
            resources: None,
            machine: None,
            variables: &[],
            desired_state: desired,
            dotfiles_url: None,
            starter: None,
            prebuild,
            seed,
        },
    )
    .expect("render");
    let key = WorkspaceKey {
        name: name.to_owned(),
        namespace: rendered.namespace.clone(),
    };
    (key, rendered.objects)
}

/// The names of the pods in `namespace` (the prebuild's: its reader's while it copies).
async fn pod_names(s: &Setup, namespace: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    pods.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_workspace_starts_with_a_copy_of_its_prebuilds_volume() {
    let Some(s) = setup().await else { return };
    let prebuild = crate::kube_common::fixtures::unique("pb");
    let prebuild_id = 7100 + i64::from(std::process::id() % 1000);

    // The prebuild runs, leaves files in its volume, and is stopped, as the server does.
    let (pkey, objs) = render(
        &s,
        &prebuild,
        prebuild_id,
        true,
        None,
        DesiredState::Running,
    );
    s.runtime
        .apply(&pkey, &objs)
        .await
        .expect("apply the prebuild");
    wait_state(&s, &pkey, ActualState::Running).await;
    exec_ok(
        &s,
        &pkey,
        None,
        "mkdir -p /projects/app/node_modules/a && echo built > /projects/app/out && \
         echo dep > /projects/app/node_modules/a/index.js && printf '#!/bin/sh\\n' > /projects/app/run && \
         chmod 750 /projects/app/run && ln -s out /projects/app/link && echo 1 > /projects/.ready",
    )
    .await;
    let listing = exec_ok(&s, &pkey, None, "ls -A /projects").await;
    let (_, objs) = render(
        &s,
        &prebuild,
        prebuild_id,
        true,
        None,
        DesiredState::Stopped,
    );
    s.runtime
        .apply(&pkey, &objs)
        .await
        .expect("stop the prebuild");
    let stopped = wait_state(&s, &pkey, ActualState::Stopped).await;
    // Its report says what it keeps: the capacity of its bound claims.
    let claims = kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        s.client.clone(),
        &pkey.namespace,
    )
    .list(&Default::default())
    .await
    .expect("claims");
    let capacity: u64 = claims
        .items
        .iter()
        .filter_map(|c| {
            c.status
                .as_ref()?
                .capacity
                .as_ref()?
                .get("storage")
                .cloned()
        })
        .map(|q| warren_types::quantity::parse_memory_bytes(&q.0).expect("a quantity"))
        .sum();
    let reported = stopped
        .deployment
        .as_ref()
        .and_then(|d| d.pointer("/metadata/annotations"))
        .and_then(|a| a.get(warren_types::prebuild::STORED_BYTES_ANNOTATION))
        .cloned();
    assert!(capacity > 0, "{claims:?}");
    assert_eq!(reported, Some(Value::String(capacity.to_string())));

    // A new workspace from it: its pod waits for the files, then runs with them.
    let seed = Seed {
        workspace: &prebuild,
        workspace_id: WorkspaceId(prebuild_id),
        commit: "0123456789abcdef0123456789abcdef01234567",
        pooled: false,
    };
    let name = crate::kube_common::fixtures::unique("from-pb");
    let (key, objs) = render(
        &s,
        &name,
        prebuild_id + 1,
        false,
        Some(seed),
        DesiredState::Running,
    );
    s.runtime
        .apply(&key, &objs)
        .await
        .expect("apply the new workspace");
    wait_state(&s, &key, ActualState::Running).await;
    assert_eq!(
        exec_ok(
            &s,
            &key,
            None,
            "cat /projects/app/out /projects/app/node_modules/a/index.js /projects/.ready; \
             stat -c %a /projects/app/run; readlink /projects/app/link; ls -A /projects"
        )
        .await,
        format!("built\ndep\n1\n750\nout\n{listing}"),
        "the prebuild's files, as they were, and nothing of the copy's own"
    );
    let pod = live_pods(&s.client, &key).await.remove(0);
    let seeding = pod
        .status
        .and_then(|st| st.init_container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name.starts_with("warren-seed-"))
        .expect("a seeding init container");
    assert_eq!(
        seeding
            .state
            .and_then(|st| st.terminated)
            .map(|t| t.exit_code),
        Some(0)
    );
    // Its reader is gone from the prebuild's namespace.
    eventually(60, "the reader pod to go", || async {
        let left = pod_names(&s, &pkey.namespace).await;
        (!left.iter().any(|n| n.starts_with("warren-seed-reader-"))).then_some(())
    })
    .await;

    // Stopped and started again (a partial apply's pod template is the full one's): the
    // volume is the workspace's now, and the files it changed stay.
    exec_ok(&s, &key, None, "echo mine > /projects/app/out").await;
    let (_, stopped) = render(
        &s,
        &name,
        prebuild_id + 1,
        false,
        Some(seed),
        DesiredState::Stopped,
    );
    s.runtime.apply(&key, &stopped).await.expect("stop");
    wait_state(&s, &key, ActualState::Stopped).await;
    s.runtime.apply(&key, &objs).await.expect("start");
    wait_state(&s, &key, ActualState::Running).await;
    assert_eq!(
        exec_ok(&s, &key, None, "cat /projects/app/out").await,
        "mine"
    );

    // A seed naming the prebuild under another id is not this agent's prebuild: an empty
    // volume, no marker left, and the pod runs.
    let other = crate::kube_common::fixtures::unique("not-pb");
    let wrong = Seed {
        workspace_id: WorkspaceId(prebuild_id + 500),
        ..seed
    };
    let (okey, objs) = render(
        &s,
        &other,
        prebuild_id + 2,
        false,
        Some(wrong),
        DesiredState::Running,
    );
    s.runtime.apply(&okey, &objs).await.expect("apply");
    wait_state(&s, &okey, ActualState::Running).await;
    let (out, err, code) = exec(
        &s,
        &okey,
        None,
        &format!(
            "ls -A /projects; test ! -e /projects/app && test ! -e /projects/.ready && \
             test ! -e /projects/{SEEDING_MARKER}"
        ),
    )
    .await;
    assert_eq!(
        code,
        Some(0),
        "none of the prebuild's files, no marker: {out}{err}"
    );

    // A prebuild with a file its user cannot read: the reader's archive is not whole, so
    // nothing of it is kept (not half a checkout).
    let (_, running) = render(
        &s,
        &prebuild,
        prebuild_id,
        true,
        None,
        DesiredState::Running,
    );
    s.runtime
        .apply(&pkey, &running)
        .await
        .expect("start the prebuild");
    wait_state(&s, &pkey, ActualState::Running).await;
    exec_ok(&s, &pkey, None, "chmod 000 /projects/app/out").await;
    let (_, stopped) = render(
        &s,
        &prebuild,
        prebuild_id,
        true,
        None,
        DesiredState::Stopped,
    );
    s.runtime
        .apply(&pkey, &stopped)
        .await
        .expect("stop the prebuild");
    wait_state(&s, &pkey, ActualState::Stopped).await;
    let partial = crate::kube_common::fixtures::unique("part-pb");
    let (tkey, objs) = render(
        &s,
        &partial,
        prebuild_id + 3,
        false,
        Some(seed),
        DesiredState::Running,
    );
    s.runtime.apply(&tkey, &objs).await.expect("apply");
    wait_state(&s, &tkey, ActualState::Running).await;
    let (out, err, code) = exec(
        &s,
        &tkey,
        None,
        &format!(
            "ls -A /projects; test ! -e /projects/app && test ! -e /projects/.ready && \
             test ! -e /projects/{SEEDING_MARKER}"
        ),
    )
    .await;
    assert_eq!(
        code,
        Some(0),
        "nothing of a copy that was not whole: {out}{err}"
    );

    for k in [&tkey, &okey, &key, &pkey] {
        terminate(&s, k).await;
    }
}
