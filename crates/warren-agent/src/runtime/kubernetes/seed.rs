//! A new workspace's volume started as a copy of its project's prebuild, on Kubernetes.
//!
//! A prebuild's claim lives in the prebuild's own namespace and a pod mounts claims of its own
//! namespace only, and the one-node cluster (like many) has no CSI snapshots to clone from.
//! So the agent carries the files itself, through the API server, on any storage:
//!
//! - Applying a workspace whose claims name a prebuild ([`SEED_FROM_ANNOTATION`]) puts one
//!   init container per such claim first in its pod ([`with_seed_containers`]). On a volume
//!   that holds nothing yet it marks the volume ([`SEEDING_MARKER`]) and unpacks a tar archive
//!   from its stdin (`stdinOnce`), then waits for the end of stdin; on any other volume it
//!   exits at once. So the pod waits for its files, and a restarted workspace does not.
//! - Seeing such a container running (`list`), the agent checks that the claim named is this
//!   agent's prebuild's (its labels, as the engine checks a volume's), starts a reader pod in
//!   the prebuild's namespace with that claim mounted read-only, and pipes the reader's
//!   `tar c` into an attach to the init container. Only when the reader's archive was whole
//!   does it leave a verdict file (an exec into the init container) before it ends the attach.
//! - The init container keeps the files only with that verdict: otherwise (a file the reader
//!   could not read, a source that is not a prebuild's, an agent gone mid-way) the volume is
//!   emptied and the workspace's startup says it starts without the prebuild. The marker
//!   stays only if the container itself was cut off, which the startup reports by name.
//!
//! The files are unpacked beside the volume's root and moved in: the root directory is the
//! provisioner's and its mode cannot be set by the pod's user.

use super::{status, KubernetesRuntime, AGENT_ID_LABEL};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, AttachParams, DeleteParams, PostParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use warren_types::prebuild::{
    PREBUILD_LABEL, SEEDING_MARKER, SEED_FROM_ANNOTATION, SEED_FROM_ID_ANNOTATION,
};

/// The init containers this module adds are named with it (and only they: a pod template's
/// own container of that name is dropped, so no devfile can point the agent at a volume).
pub const SEED_CONTAINER_PREFIX: &str = "warren-seed-";
/// Where the seeded claim is in the init container.
const MOUNT: &str = "/warren-seed";
/// The reader's verdict, at the volume's root until the init container has read it.
const VERDICT: &str = ".warren-seed-ok";
/// Where the archive is unpacked before its files are moved in.
const STAGING: &str = ".warren-seed-staging";
/// The env of the init container that says where its files come from.
const FROM_ENV: &str = "WARREN_SEED_FROM";
const FROM_ID_ENV: &str = "WARREN_SEED_FROM_ID";
const FROM_CLAIM_ENV: &str = "WARREN_SEED_FROM_CLAIM";
/// How long the reader pod may take to run, and the copy as a whole.
const READER_TIMEOUT: Duration = Duration::from_secs(300);
const COPY_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// A tar archive with nothing in it: what an init container is sent when there is nothing to
/// copy, so that it goes on at once.
const EMPTY_ARCHIVE: [u8; 1024] = [0; 1024];

/// The init container's script (module docs).
fn script() -> String {
    format!(
        r#"to={MOUNT}
rm -rf "$to/{STAGING}" "$to/{VERDICT}"
left="$(ls -A "$to" | grep -v -x -e lost+found -e '{SEEDING_MARKER}')"
if [ -n "$left" ]; then exit 0; fi
: > "$to/{SEEDING_MARKER}" || exit 0
mkdir "$to/{STAGING}" || exit 0
echo "warren: copying the prebuild's files into this workspace's volume"
tar x -C "$to/{STAGING}" -f -
unpacked=$?
cat > /dev/null
if [ "$unpacked" = 0 ] && [ -e "$to/{VERDICT}" ]; then
  for f in "$to/{STAGING}"/* "$to/{STAGING}"/.[!.]* "$to/{STAGING}"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    mv "$f" "$to"/ || exit 1
  done
  echo "warren: copied"
else
  echo "warren: the prebuild's files were not copied (tar exit code $unpacked); starting without them"
fi
rm -rf "$to/{STAGING}" "$to/{VERDICT}"
rm -f "$to/{SEEDING_MARKER}"
"#
    )
}

/// `objects` with a seeding init container first in the Deployment's pod for each claim that
/// starts as a copy of a prebuild's; any container of the template already named so goes.
///
/// A partial apply (the Deployment alone, no claims) keeps the seeding containers `live` has:
/// the template must not change between a full and a partial apply, or the pod would be
/// replaced.
pub(super) fn with_seed_containers(objects: &[Value], live: Option<&Deployment>) -> Vec<Value> {
    let mut objects = objects.to_vec();
    let partial = !objects.iter().any(|o| o["kind"] == "PersistentVolumeClaim");
    let seeds: Vec<(String, String, String)> = objects
        .iter()
        .filter(|o| o["kind"] == "PersistentVolumeClaim")
        .filter_map(|o| {
            let annotations = o.pointer("/metadata/annotations")?;
            Some((
                o.pointer("/metadata/name")?.as_str()?.to_owned(),
                annotations.get(SEED_FROM_ANNOTATION)?.as_str()?.to_owned(),
                annotations
                    .get(SEED_FROM_ID_ANNOTATION)?
                    .as_str()?
                    .to_owned(),
            ))
        })
        .collect();
    let Some(deployment) = objects.iter_mut().find(|o| o["kind"] == "Deployment") else {
        return objects;
    };
    let workspace = deployment
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(pod) = deployment.pointer_mut("/spec/template/spec") else {
        return objects;
    };
    if let Some(inits) = pod.get_mut("initContainers").and_then(Value::as_array_mut) {
        inits.retain(|c| {
            !c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(SEED_CONTAINER_PREFIX))
        });
    }
    let main = pod.pointer("/containers/0").cloned().unwrap_or(Value::Null);
    let mut added = Vec::new();
    if partial {
        let kept = live
            .and_then(|d| {
                d.spec
                    .as_ref()?
                    .template
                    .spec
                    .as_ref()?
                    .init_containers
                    .clone()
            })
            .unwrap_or_default();
        added.extend(
            kept.into_iter()
                .filter(|c| c.name.starts_with(SEED_CONTAINER_PREFIX))
                .filter_map(|c| serde_json::to_value(c).ok()),
        );
    }
    for (claim, from, from_id) in seeds {
        // The pod's volume of the claim; a claim no container mounts has nothing to wait for.
        let volume = pod["volumes"].as_array().and_then(|vs| {
            vs.iter()
                .find(|v| v.pointer("/persistentVolumeClaim/claimName") == Some(&json!(claim)))
                .and_then(|v| v["name"].as_str())
        });
        let (Some(volume), Some(suffix)) = (volume, claim.strip_prefix(&format!("{workspace}-")))
        else {
            continue;
        };
        let mut container = json!({
            "name": format!("{SEED_CONTAINER_PREFIX}{}", added.len()),
            "image": main["image"],
            "command": ["/bin/sh", "-c", script()],
            "stdin": true,
            "stdinOnce": true,
            "env": [
                {"name": FROM_ENV, "value": from},
                {"name": FROM_ID_ENV, "value": from_id},
                {"name": FROM_CLAIM_ENV, "value": format!("{from}-{suffix}")},
            ],
            "volumeMounts": [{"name": volume, "mountPath": MOUNT}],
        });
        // As the workspace's own container runs: the same user and restrictions (so the pod
        // meets its namespace's Pod Security level) and resources (within its quota).
        for field in ["imagePullPolicy", "securityContext", "resources"] {
            if !main[field].is_null() {
                container[field] = main[field].clone();
            }
        }
        added.push(container);
    }
    if added.is_empty() {
        return objects;
    }
    let inits = pod
        .as_object_mut()
        .map(|p| p.entry("initContainers").or_insert_with(|| json!([])));
    if let Some(Value::Array(inits)) = inits {
        inits.splice(0..0, added);
    }
    objects
}

/// Where one seeding init container's files come from.
struct SeedJob {
    namespace: String,
    pod: String,
    container: String,
    /// How often the container restarted: a restarted one waits for its files again.
    restarts: i32,
    /// The prebuild workspace, its id and its claim.
    from: String,
    from_id: String,
    from_claim: String,
    /// The init container as the template has it, and its pod's security context: the
    /// reader runs as that.
    spec: k8s_openapi::api::core::v1::Container,
    pod_security: Option<k8s_openapi::api::core::v1::PodSecurityContext>,
}

impl KubernetesRuntime {
    /// Starts a copy for each seeding init container that runs and has none yet (module docs).
    pub(super) fn start_seeding(&self) {
        let pods = self.pods.state();
        // Forgotten with their pods: a key is asked for once per pod's container.
        let uids: std::collections::HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.seeding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k| k.split('/').next().is_some_and(|uid| uids.contains(uid)));
        for pod in &pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            for job in seed_jobs(pod) {
                let key = format!(
                    "{}/{}/{}/{}",
                    pod.metadata.uid.as_deref().unwrap_or_default(),
                    job.pod,
                    job.container,
                    job.restarts
                );
                if !self
                    .seeding
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key)
                {
                    continue;
                }
                let this = self.handle();
                tokio::spawn(async move {
                    let what = format!("{}/{}", job.namespace, job.pod);
                    let from = job.from.clone();
                    let outcome = tokio::time::timeout(COPY_TIMEOUT, this.seed(&job)).await;
                    match outcome {
                        Ok(Ok(true)) => {
                            tracing::info!(pod = %what, from = %from, "volume started from the prebuild")
                        }
                        Ok(Ok(false)) => {}
                        Ok(Err(reason)) => {
                            tracing::warn!(pod = %what, from = %from, reason = %reason, "volume not copied from the prebuild: the workspace starts without it")
                        }
                        Err(_) => {
                            tracing::warn!(pod = %what, from = %from, "copying the prebuild took over {COPY_TIMEOUT:?}: the workspace starts without it")
                        }
                    }
                    // The pod's container is through with its stdin either way; a restarted
                    // pod has a new container to copy into (the same key is not asked again).
                    this.delete_reader(&job).await;
                });
            }
        }
    }

    /// Fills one seeding container's volume: the prebuild's files when its claim is the
    /// prebuild's, else an empty archive (the container then goes on without them). `false`
    /// when the container was gone before it could be given anything.
    async fn seed(&self, job: &SeedJob) -> Result<bool, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &job.namespace);
        let params = AttachParams {
            container: Some(job.container.clone()),
            stdin: true,
            stdout: false,
            stderr: false,
            ..Default::default()
        };
        let source = self.check_source(job).await;
        let mut attached = match pods.attach(&job.pod, &params).await {
            Ok(a) => a,
            Err(e) => {
                // Most often it ended at once (its volume holds files already: a restart),
                // between the look at the pod and this attach. Nothing was to be copied.
                tracing::debug!(pod = %job.pod, container = %job.container, error = %e, "the seeding container cannot be attached to");
                return Ok(false);
            }
        };
        let mut stdin = attached.stdin().ok_or("the attach has no stdin")?;
        let copied = match source {
            Err(reason) => Err(reason),
            Ok(namespace) => self.pipe_from_reader(job, &namespace, &mut stdin).await,
        };
        if copied.is_err() {
            // Nothing, or part of an archive, went; an archive's end lets the container go on
            // (without a verdict it keeps none of it).
            let _ = stdin.write_all(&EMPTY_ARCHIVE).await;
        }
        let _ = stdin.flush().await;
        // The end of the attach is the end of the container's stdin (`stdinOnce`).
        drop(stdin);
        let _ = attached.join().await;
        copied.map(|()| true)
    }

    /// The prebuild's namespace, when `job`'s claim is this agent's prebuild workspace's (by
    /// name and id) and marked as a prebuild's.
    async fn check_source(&self, job: &SeedJob) -> Result<String, String> {
        let deployment: Option<Arc<Deployment>> = self.deployments.state().into_iter().find(|d| {
            d.metadata.name.as_deref() == Some(job.from.as_str())
                && labels_of(&d.metadata).get(super::super::WORKSPACE_ID_LABEL)
                    == Some(&job.from_id)
        });
        let Some(namespace) = deployment.and_then(|d| d.metadata.namespace.clone()) else {
            return Err(format!(
                "prebuild workspace {} (id {}) is not on this agent any more",
                job.from, job.from_id
            ));
        };
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        let claim = claims
            .get_opt(&job.from_claim)
            .await
            .map_err(|e| format!("reading claim {namespace}/{}: {e}", job.from_claim))?
            .ok_or_else(|| {
                format!(
                    "the prebuild's claim {namespace}/{} is gone",
                    job.from_claim
                )
            })?;
        let labels = labels_of(&claim.metadata);
        let is_prebuilds = labels.get(AGENT_ID_LABEL) == Some(&self.agent_id)
            && labels.get(super::super::WORKSPACE_ID_LABEL) == Some(&job.from_id)
            && labels.get(PREBUILD_LABEL).map(String::as_str) == Some("true")
            && !labels.contains_key(super::super::GITOPS_SOURCE_LABEL);
        if !is_prebuilds {
            return Err(format!(
                "claim {namespace}/{} is not prebuild workspace {}'s (id {}) on this agent",
                job.from_claim, job.from, job.from_id
            ));
        }
        Ok(namespace)
    }

    /// Runs the reader pod in `namespace` and copies its `tar c` of the prebuild's claim to
    /// `to`; on success the verdict is left in the seeding container.
    async fn pipe_from_reader(
        &self,
        job: &SeedJob,
        namespace: &str,
        to: &mut (impl tokio::io::AsyncWrite + Unpin),
    ) -> Result<(), String> {
        let reader = self.start_reader(job, namespace).await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = AttachParams {
            container: Some("reader".into()),
            stdin: false,
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let mut tar = pods
            .exec(&reader, ["tar", "c", "-C", "/from", "."], &params)
            .await
            .map_err(|e| format!("running tar in the reader: {e}"))?;
        let status = tar.take_status();
        // All of stderr is read (an unread one would hold up stdout); its end is kept.
        let mut errors: Vec<u8> = Vec::new();
        let stderr = tar.stderr();
        let collect = async {
            let Some(stderr) = stderr else { return };
            let mut chunks = tokio_util::io::ReaderStream::new(stderr);
            while let Some(Ok(chunk)) = chunks.next().await {
                errors.extend_from_slice(&chunk);
                let over = errors.len().saturating_sub(4096);
                errors.drain(..over);
            }
        };
        let mut stdout = tar.stdout().ok_or("the reader's exec has no stdout")?;
        let (copied, ()) = tokio::join!(tokio::io::copy(&mut stdout, to), collect);
        copied.map_err(|e| format!("carrying the prebuild's files: {e}"))?;
        let exit = super::exec::exit_from_status(match status {
            Some(s) => s.await,
            None => None,
        });
        if exit.code != Some(0) {
            let said = String::from_utf8_lossy(&errors);
            let said = said.lines().last().unwrap_or_default().trim().to_owned();
            return Err(format!(
                "reading the prebuild's files failed ({}){}",
                exit.code
                    .map(|c| format!("exit code {c}"))
                    .or(exit.message)
                    .unwrap_or_default(),
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            ));
        }
        to.flush()
            .await
            .map_err(|e| format!("carrying the prebuild's files: {e}"))?;
        self.leave_verdict(job).await
    }

    /// Says to the seeding container that what it unpacked is whole.
    async fn leave_verdict(&self, job: &SeedJob) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &job.namespace);
        let params = AttachParams {
            container: Some(job.container.clone()),
            stdin: false,
            stdout: false,
            stderr: true,
            ..Default::default()
        };
        let mut touch = pods
            .exec(
                &job.pod,
                ["/bin/sh", "-c", &format!(": > {MOUNT}/{VERDICT}")],
                &params,
            )
            .await
            .map_err(|e| format!("leaving the verdict: {e}"))?;
        let status = touch.take_status();
        let exit = super::exec::exit_from_status(match status {
            Some(s) => s.await,
            None => None,
        });
        match exit.code {
            Some(0) => Ok(()),
            _ => Err(format!(
                "leaving the verdict failed: {}",
                exit.message.unwrap_or_else(|| format!("{:?}", exit.code))
            )),
        }
    }

    /// The reader pod's name for `job` (one per seeding container, in the prebuild's
    /// namespace).
    fn reader_name(job: &SeedJob) -> String {
        let name = format!("warren-seed-reader-{}-{}", job.pod, job.container);
        if name.len() <= 63 {
            return name;
        }
        use sha2::Digest;
        let digest = hex::encode(sha2::Sha256::digest(name.as_bytes()));
        format!("warren-seed-reader-{}", &digest[..32])
    }

    /// Creates the reader pod (the prebuild's claim read-only, the seeding container's image
    /// and user) and waits until it runs; its name.
    async fn start_reader(&self, job: &SeedJob, namespace: &str) -> Result<String, String> {
        let name = Self::reader_name(job);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut container = json!({
            "name": "reader",
            "image": job.spec.image,
            "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 5; done"],
            "volumeMounts": [{"name": "from", "mountPath": "/from", "readOnly": true}],
        });
        for (field, value) in [
            (
                "imagePullPolicy",
                serde_json::to_value(&job.spec.image_pull_policy),
            ),
            (
                "securityContext",
                serde_json::to_value(&job.spec.security_context),
            ),
            ("resources", serde_json::to_value(&job.spec.resources)),
        ] {
            match value {
                Ok(v) if !v.is_null() => container[field] = v,
                _ => {}
            }
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {AGENT_ID_LABEL: self.agent_id, "warren.dev/seed-reader": "true"},
            },
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
                "securityContext": job.pod_security,
                "enableServiceLinks": false,
                "containers": [container],
                "volumes": [{
                    "name": "from",
                    "persistentVolumeClaim": {"claimName": job.from_claim, "readOnly": true},
                }],
            },
        }))
        .map_err(|e| format!("the reader pod: {e}"))?;
        // One left by an agent that stopped mid-way is made again: its spec may be stale.
        let _ = pods
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
        let deadline = tokio::time::Instant::now() + READER_TIMEOUT;
        loop {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => break,
                // The one just deleted is still going.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(format!("creating reader pod {namespace}/{name}: {e}")),
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "reader pod {namespace}/{name} is still being removed"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        loop {
            let pod = pods
                .get_opt(&name)
                .await
                .map_err(|e| format!("reading reader pod {namespace}/{name}: {e}"))?;
            let phase = pod
                .as_ref()
                .and_then(|p| p.status.as_ref()?.phase.clone())
                .unwrap_or_default();
            match phase.as_str() {
                "Running" => return Ok(name),
                "Failed" | "Succeeded" => {
                    return Err(format!("reader pod {namespace}/{name} ended ({phase})"))
                }
                _ => {}
            }
            if let Some(failure) = pod.as_ref().and_then(status::pod_failure) {
                return Err(format!(
                    "reader pod {namespace}/{name} cannot run: {}: {}",
                    failure.reason, failure.message
                ));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "reader pod {namespace}/{name} did not run within {READER_TIMEOUT:?} ({phase})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Removes `job`'s reader pod wherever it is (the prebuild's namespace as found now).
    async fn delete_reader(&self, job: &SeedJob) {
        let name = Self::reader_name(job);
        let namespaces: Vec<String> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.name.as_deref() == Some(name.as_str()))
            .filter_map(|p| p.metadata.namespace.clone())
            .collect();
        for namespace in namespaces {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            if let Err(e) = pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
            {
                if !matches!(&e, kube::Error::Api(a) if a.code == 404) {
                    tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "removing the prebuild's reader pod");
                }
            }
        }
    }
}

fn labels_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The seeding init containers of `pod` that run now, with where their files come from.
fn seed_jobs(pod: &Pod) -> Vec<SeedJob> {
    let (Some(spec), Some(status), Some(name), Some(namespace)) = (
        pod.spec.as_ref(),
        pod.status.as_ref(),
        pod.metadata.name.clone(),
        pod.metadata.namespace.clone(),
    ) else {
        return vec![];
    };
    let running: BTreeMap<&str, i32> = status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|s| s.state.as_ref().is_some_and(|st| st.running.is_some()))
        .map(|s| (s.name.as_str(), s.restart_count))
        .collect();
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| c.name.starts_with(SEED_CONTAINER_PREFIX))
        .filter_map(|c| {
            let restarts = *running.get(c.name.as_str())?;
            let env = |key: &str| {
                c.env
                    .iter()
                    .flatten()
                    .find(|e| e.name == key)
                    .and_then(|e| e.value.clone())
            };
            Some(SeedJob {
                namespace: namespace.clone(),
                pod: name.clone(),
                container: c.name.clone(),
                restarts,
                from: env(FROM_ENV)?,
                from_id: env(FROM_ID_ENV)?,
                from_claim: env(FROM_CLAIM_ENV)?,
                spec: c.clone(),
                pod_security: spec.security_context.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(annotated: bool) -> Vec<Value> {
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ws-warren-data"},
        });
        if annotated {
            claim["metadata"]["annotations"] = json!({
                SEED_FROM_ANNOTATION: "prebuild-a", SEED_FROM_ID_ANNOTATION: "7",
            });
        }
        vec![
            claim,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "ws"},
                "spec": {"template": {"spec": {
                    "containers": [{"name": "dev", "image": "img:1",
                        "securityContext": {"runAsUser": 5001}}],
                    "initContainers": [
                        {"name": "warren-seed-0", "image": "evil", "env": []},
                        {"name": "prestart", "image": "img:1"},
                    ],
                    "volumes": [{"name": "data",
                        "persistentVolumeClaim": {"claimName": "ws-warren-data"}}],
                }}},
            }),
        ]
    }

    fn inits(objects: &[Value]) -> Vec<Value> {
        objects[1]
            .pointer("/spec/template/spec/initContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn a_seeded_claim_gets_a_container_first_and_a_templates_own_is_dropped() {
        let out = with_seed_containers(&objects(true), None);
        let inits = inits(&out);
        let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["warren-seed-0", "prestart"]);
        let seed = &inits[0];
        assert_eq!(seed["image"], "img:1");
        assert_eq!(seed["stdinOnce"], true);
        assert_eq!(seed["securityContext"]["runAsUser"], 5001);
        assert_eq!(seed["volumeMounts"][0]["name"], "data");
        let env: BTreeMap<&str, &str> = seed["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
            .collect();
        assert_eq!(env[FROM_ENV], "prebuild-a");
        assert_eq!(env[FROM_ID_ENV], "7");
        assert_eq!(env[FROM_CLAIM_ENV], "prebuild-a-warren-data");
    }

    #[test]
    fn without_a_seed_nothing_is_added_and_no_impostor_stays() {
        let out = with_seed_containers(&objects(false), None);
        let names: Vec<String> = inits(&out)
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(names, ["prestart"]);
    }
}
