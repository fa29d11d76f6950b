//! A new workspace's volume started as a copy of a prebuild's (issue 43), on a real Podman:
//! copied only from the volume of the very prebuild its claim names (that workspace's name
//! and id, the prebuild mark), never from another workspace's volume however the claim names
//! it, and only when the agent creates the volume. On Podman the stopped prebuild is saved
//! as a snapshot and the new volume is a copy-on-write clone of it; without one, a copy.

use crate::common;

use anyhow::{Context, Result};
use common::*;
use serde_json::{json, Value};
use warren_agent::runtime::{ObservedWorkspace, WorkspaceRuntime};
use warren_types::prebuild::{PREBUILD_LABEL, SEED_FROM_ANNOTATION, SEED_FROM_ID_ANNOTATION};
use warren_types::reconcile::TerminationProgress;
use warren_types::state::ActualState;

/// `ws`'s fixture objects with workspace id `id`, marked as a prebuild's when `prebuild`, its
/// claim naming `seed` (workspace, id) when given.
fn objects(ws: &Workspace, id: &str, prebuild: bool, seed: Option<(&str, &str)>) -> Vec<Value> {
    let mut objects = ws.objects();
    for o in &mut objects {
        if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
            labels.insert("warren.dev/workspace-id".into(), json!(id));
            if prebuild {
                labels.insert(PREBUILD_LABEL.into(), json!("true"));
            }
        }
        if o["kind"] == "PersistentVolumeClaim" {
            if let Some((from, from_id)) = seed {
                o["metadata"]["annotations"] = json!({
                    SEED_FROM_ANNOTATION: from,
                    SEED_FROM_ID_ANNOTATION: from_id,
                });
            }
        }
    }
    objects
}

async fn run(h: &Harness, ws: &Workspace, objects: &[Value]) -> Result<()> {
    h.runtime.apply(&ws.key, objects).await?;
    wait_state(&h.runtime, ws, ActualState::Running).await?;
    Ok(())
}

fn listing(ws: &Workspace) -> Result<String> {
    Ok(exec(ws, "dev", "ls -A /projects | sort | tr '\\n' ' '")?
        .trim()
        .to_owned())
}

#[tokio::test]
async fn a_new_volume_is_copied_only_from_the_prebuild_its_claim_names() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    // The prebuild: its volume holds the checkout and the setup's result; then it stops.
    let prebuild = Workspace::new("prebuilt", h.agent_id);
    let prebuild_objects = objects(&prebuild, "7001", true, None);
    run(&h, &prebuild, &prebuild_objects).await?;
    exec(
        &prebuild,
        "dev",
        "mkdir -p /projects/app/node_modules && echo built > /projects/app/node_modules/marker && chmod 640 /projects/app/node_modules/marker",
    )?;
    h.runtime
        .apply(&prebuild.key, &with_replicas(prebuild_objects.clone(), 0))
        .await?;
    let stopped = wait_state(&h.runtime, &prebuild, ActualState::Stopped).await?;
    let kept = stored_bytes(&stopped).context("a stopped prebuild reports what it keeps")?;

    // Another tenant's workspace, with a secret in its volume.
    let victim = Workspace::new("victim", h.agent_id);
    run(&h, &victim, &objects(&victim, "7002", false, None)).await?;
    exec(&victim, "dev", "echo s3cret > /projects/secret.txt")?;

    // A claim naming that workspace (its true id even) gets an empty volume: not a prebuild's.
    let thief = Workspace::new("thief", h.agent_id);
    run(
        &h,
        &thief,
        &objects(&thief, "7003", false, Some((victim.name(), "7002"))),
    )
    .await?;
    let seen = listing(&thief)?;
    assert!(
        !seen.contains("secret.txt"),
        "copied another's volume: {seen}"
    );

    // The prebuild's name with another id (a name taken again after it went): not copied.
    let stale = Workspace::new("stale", h.agent_id);
    run(
        &h,
        &stale,
        &objects(&stale, "7004", false, Some((prebuild.name(), "7999"))),
    )
    .await?;
    let seen = listing(&stale)?;
    assert!(
        !seen.contains("app"),
        "copied from a prebuild of another id: {seen}"
    );

    // The prebuild was saved as a snapshot when it stopped, labelled as its own.
    let prebuild_volume = volume_of(&prebuild)?;
    let snapshot = format!("localhost/warren-snapshot/{prebuild_volume}:id-7001");
    assert_eq!(
        cli_run(&[
            "image",
            "inspect",
            "--format",
            "{{index .Labels \"warren.dev/snapshot-of\"}}",
            &snapshot
        ])?
        .trim(),
        prebuild_volume
    );
    // What it keeps: its volume's blocks and that snapshot.
    let image_size: u64 = cli_run(&["image", "inspect", "--format", "{{.Size}}", &snapshot])?
        .trim()
        .parse()?;
    assert!(
        kept >= image_size + 4096,
        "the volume and its snapshot ({image_size} bytes) take {kept} bytes"
    );

    // Without its snapshot (gone, or never saved: Docker), a new volume is a copy, made
    // before the pod started, with owners and modes kept.
    cli_run(&["rmi", &snapshot])?;
    let copied = Workspace::new("copied", h.agent_id);
    let copied_objects = objects(&copied, "7006", false, Some((prebuild.name(), "7001")));
    run(&h, &copied, &copied_objects).await?;
    assert_eq!(driver_of(&copied)?, "local");
    assert_started_from_prebuild(&copied)?;

    // Applied stopped again, the prebuild saves its snapshot again; until then it is not
    // reported stopped.
    h.runtime
        .apply(&prebuild.key, &with_replicas(prebuild_objects.clone(), 0))
        .await?;
    wait_state(&h.runtime, &prebuild, ActualState::Stopped).await?;
    cli_run(&["image", "inspect", &snapshot]).context("saved again")?;

    // With it, a new volume is a copy-on-write clone of the snapshot: the same files, owners
    // and modes, and its root open to the pod's user.
    let fresh = Workspace::new("fresh", h.agent_id);
    let fresh_objects = objects(&fresh, "7005", false, Some((prebuild.name(), "7001")));
    run(&h, &fresh, &fresh_objects).await?;
    assert_eq!(driver_of(&fresh)?, "image");
    assert_started_from_prebuild(&fresh)?;
    // The workspace writes its own volume, and the prebuild's stays as it was.
    exec(
        &fresh,
        "dev",
        "echo mine > /projects/app/node_modules/marker && touch /projects/new",
    )?;

    // Applied again (a restart, a re-render): its volume exists, so nothing is copied over it.
    restart_keeps_own_files(&h, &fresh, &fresh_objects).await?;
    assert!(listing(&fresh)?.contains("new"), "{}", listing(&fresh)?);
    run(&h, &prebuild, &prebuild_objects).await?;
    assert_eq!(
        exec(&prebuild, "dev", "cat /projects/app/node_modules/marker")?.trim(),
        "built",
        "the prebuild's volume is untouched"
    );
    assert!(
        !listing(&prebuild)?.contains("new"),
        "the prebuild's volume is untouched"
    );

    // The prebuild removed, the clone keeps its files (the engine keeps the snapshot while a
    // volume is made of it); the clone removed too, the snapshot goes.
    assert_eq!(
        h.runtime.delete(&prebuild.key).await?,
        TerminationProgress::Terminated
    );
    assert!(
        prebuild.leftovers().is_empty(),
        "{:?}",
        prebuild.leftovers()
    );
    cli_run(&["image", "inspect", &snapshot]).context("kept while cloned")?;
    restart_keeps_own_files(&h, &fresh, &fresh_objects).await?;
    assert_eq!(
        h.runtime.delete(&fresh.key).await?,
        TerminationProgress::Terminated
    );
    assert!(
        cli_run(&["image", "inspect", &snapshot]).is_err(),
        "the snapshot of a removed prebuild outlived its last clone"
    );
    Ok(())
}

/// Stops and starts `ws` again: its volume exists, so nothing is copied or cloned over its
/// own change to the marker.
/// The space a stopped prebuild's report says it keeps.
fn stored_bytes(o: &ObservedWorkspace) -> Option<u64> {
    o.deployment
        .as_ref()?
        .pointer("/metadata/annotations")?
        .get(warren_types::prebuild::STORED_BYTES_ANNOTATION)?
        .as_str()?
        .parse()
        .ok()
}

async fn restart_keeps_own_files(h: &Harness, ws: &Workspace, objects: &[Value]) -> Result<()> {
    h.runtime
        .apply(&ws.key, &with_replicas(objects.to_vec(), 0))
        .await?;
    wait_state(&h.runtime, ws, ActualState::Stopped).await?;
    run(h, ws, objects).await?;
    assert_eq!(
        exec(ws, "dev", "cat /projects/app/node_modules/marker")?.trim(),
        "mine"
    );
    Ok(())
}

/// The one volume of `ws`.
fn volume_of(ws: &Workspace) -> Result<String> {
    let filter = format!("label=warren.dev/workspace-name={}", ws.name());
    let volumes = cli_lines(&["volume", "ls", "-q", "--filter", &filter]);
    match volumes.as_slice() {
        [one] => Ok(one.clone()),
        other => anyhow::bail!("{} has volumes {other:?}", ws.name()),
    }
}

/// The driver of the one volume of `ws`.
fn driver_of(ws: &Workspace) -> Result<String> {
    let volume = volume_of(ws)?;
    Ok(
        cli_run(&["volume", "inspect", "--format", "{{.Driver}}", &volume])?
            .trim()
            .to_owned(),
    )
}

/// The prebuild's result is in `ws`'s volume, owners and modes kept, the volume's root
/// writable by the pod's user, no copying marker left.
fn assert_started_from_prebuild(ws: &Workspace) -> Result<()> {
    assert_eq!(
        exec(ws, "dev", "cat /projects/app/node_modules/marker")?.trim(),
        "built"
    );
    assert_eq!(
        exec(
            ws,
            "dev",
            "stat -c '%u %a' /projects/app/node_modules/marker"
        )?
        .trim(),
        "5001 640"
    );
    exec(ws, "dev", "touch /projects/mine && rm /projects/mine")
        .context("the volume's root is the pod user's to write")?;
    assert!(
        !listing(ws)?.contains(warren_types::prebuild::SEEDING_MARKER),
        "a finished copy leaves no marker"
    );
    Ok(())
}
