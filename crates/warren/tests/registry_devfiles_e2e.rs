//! The "Done when" of devfiles as people publish them: every devfile of the registry
//! snapshot (`testdata/devfiles/registry`), unmodified, given to `warren ws create --devfile`
//! on Podman through `warren up`, gives a Running workspace with its projects fetched and a
//! command runnable with `warren ws run`.
//!
//! The machine reaches no image registry and no GitHub, so local stand-ins take their
//! place, as a mirror would: one image (the test image, with a system Git configuration that
//! sends `https://github.com/` to a Git server the test runs, and an entrypoint and `bash`
//! that run what the image has and otherwise idle as the missing daemon would) tagged with
//! every image name the devfiles use, and that Git server holding a
//! repository, with the branches and tags the devfiles ask for, for every GitHub remote they
//! name; images pinned by digest, which no tag can stand in for, reach the stand-in through
//! the agent's `image_mirrors`, as an air-gapped site's would reach its copies. Zip archives
//! (code.quarkus.io) have no stand-in: their download fails and the
//! workspace says so, still Running (`ws create --wait` ends with the startup's failure, naming
//! the step). The images the registry uses hold the language
//! toolchains; the stand-in does not, so a command's exit code is whatever its shell gives
//! (127 for a missing tool) — what is checked is that it runs, in its container, and that
//! its code comes back.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{ensure_image, host_address, podman_available, unique_name, Up, IMAGE};
use warren_devfile::{CommandAction, ProjectOrigin};
use warren_testkit::git_http::{git, GitHttpServer};
use warren_testkit::process::output_ok;

/// Workspaces started at once.
const PARALLEL: usize = 6;

fn registry() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/devfiles/registry");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("testdata/devfiles/registry")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).expect("read"),
            )
        })
        .collect();
    files.sort();
    files
}

/// The image tags made for the stand-in, removed however the test ends.
struct Tags(Vec<String>);

impl Drop for Tags {
    fn drop(&mut self) {
        for t in &self.0 {
            let _ = Command::new("podman").args(["rmi", "-f", t]).output();
        }
    }
}

fn podman(args: &[&str]) {
    output_ok(Command::new("podman").args(args));
}

/// What one devfile should give.
struct Expect {
    file: String,
    text: String,
    main: String,
    /// (project name, fetched by git: else a zip that cannot be downloaded here)
    projects: Vec<(String, bool)>,
    /// An exec command and its container.
    command: Option<(String, String)>,
}

#[test]
fn every_registry_devfile_runs_unmodified_on_podman() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let mut files = registry();
    assert_eq!(files.len(), 90, "the registry snapshot");
    // For looking into one stack: WARREN_REGISTRY_ONLY=go- runs the files whose name has it.
    if let Ok(only) = std::env::var("WARREN_REGISTRY_ONLY") {
        files.retain(|(f, _)| f.contains(&only));
    }

    // What each devfile asks for.
    let mut images = BTreeSet::new();
    let mut remotes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut sub_dirs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut expects = Vec::new();
    for (file, text) in &files {
        let d = warren_devfile::parse_devfile(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for c in &d.containers {
            images.insert(c.image.clone());
        }
        let fetched: Vec<&warren_devfile::DevfileProject> = if d.projects.is_empty() {
            d.starter_projects.iter().take(1).collect()
        } else {
            d.projects.iter().collect()
        };
        let mut projects = Vec::new();
        for p in fetched {
            match &p.origin {
                ProjectOrigin::Git { url, revision } => {
                    let path = url
                        .strip_prefix("https://github.com/")
                        .unwrap_or_else(|| panic!("{file}: a remote outside GitHub: {url}"))
                        .to_owned();
                    let refs = remotes.entry(path.clone()).or_default();
                    refs.insert(revision.clone().unwrap_or_else(|| "main".into()));
                    if let Some(s) = &p.sub_dir {
                        sub_dirs.entry(path).or_default().insert(s.clone());
                    }
                    projects.push((p.name.clone(), true));
                }
                ProjectOrigin::Zip { .. } => projects.push((p.name.clone(), false)),
            }
        }
        let command = d.commands.iter().find_map(|c| match &c.action {
            CommandAction::Exec { component, .. }
                if d.container(component).is_some_and(|k| !k.init_only) =>
            {
                Some((c.id.clone(), component.clone()))
            }
            _ => None,
        });
        expects.push(Expect {
            file: file.clone(),
            text: text.clone(),
            main: d.main_container().name.clone(),
            projects,
            command,
        });
    }

    // The Git stand-in: a repository per remote, with the refs asked for.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt
        .block_on(GitHttpServer::start_on(
            "0.0.0.0:0".parse().unwrap(),
            "",
            "",
        ))
        .expect("git server");
    for (path, refs) in &remotes {
        let bare_name = path.trim_end_matches(".git");
        let mut files: Vec<(String, String)> =
            vec![("README".into(), format!("stand-in for {path}\n"))];
        for s in sub_dirs.get(path).into_iter().flatten() {
            files.push((format!("{s}/README"), format!("sub-directory {s}\n")));
        }
        let borrowed: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        server.create_repo(bare_name, &borrowed).expect("mirror");
        let bare = server.path(bare_name);
        for r in refs {
            if r != "main" {
                git(&bare, &["tag", r, "main"]).expect("tag");
            }
        }
        // Remotes written without `.git` are served under that name too.
        if !path.ends_with(".git") {
            std::os::unix::fs::symlink(&bare, bare.with_extension("")).expect("symlink");
        }
    }
    let host = host_address();

    // The image stand-in, under every name the devfiles use.
    let context = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        context.path().join("gitconfig"),
        format!(
            "[url \"http://{host}:{}/\"]\n\tinsteadOf = https://github.com/\n",
            server.addr.port()
        ),
    )
    .expect("gitconfig");
    // The stand-in runs what it has; a program it lacks (the image's own daemon, a
    // `/bin/bash -c` script of one) ends at once, and the stand-in then idles as the daemon
    // would run, until stopped.
    let idle = "trap 'exit 0' TERM; while :; do sleep 1; done";
    let script = |body: &str| format!("#!/bin/sh\n{body}\n{idle}\n");
    let write_exec = |name: &str, text: String| {
        use std::os::unix::fs::PermissionsExt;
        let p = context.path().join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    write_exec(
        "standin",
        script("if [ $# -gt 0 ] && command -v \"$1\" >/dev/null 2>&1; then exec \"$@\"; fi"),
    );
    write_exec("bash", script("/bin/sh \"$@\""));
    std::fs::write(
        context.path().join("Containerfile"),
        format!(
            "FROM {IMAGE}\nCOPY gitconfig /etc/gitconfig\nCOPY standin /usr/local/bin/standin\nCOPY bash /bin/bash\nENTRYPOINT [\"/usr/local/bin/standin\"]\nCMD []\n"
        ),
    )
    .expect("Containerfile");
    let standin = format!("localhost/warren-registry-standin:{}", std::process::id());
    let mut tags = Tags(vec![standin.clone()]);
    podman(&[
        "build",
        "-q",
        "-t",
        &standin,
        context.path().to_str().unwrap(),
    ]);
    for image in images.iter().filter(|i| !i.contains('@')) {
        podman(&["tag", &standin, image]);
        tags.0.push(image.clone());
    }

    let up = Up::start();
    up.allow_egress_to(&host);
    // An image pinned by digest cannot be given a stand-in by tagging (no copy can have its
    // digest): the agent's image mirrors send those to the stand-in, as an air-gapped site
    // sends them to its own copies.
    let pinned: Vec<&String> = images.iter().filter(|i| i.contains('@')).collect();
    assert_eq!(pinned.len(), 5, "{pinned:?}");
    up.update_agent_config(|config| {
        for image in &pinned {
            config["image_mirrors"][image.as_str()] = serde_json::Value::String(standin.clone());
        }
    });
    let started = Instant::now();
    let mut report = Vec::new();
    // PARALLEL workers take the next devfile as each finishes its own: one slow devfile
    // holds up only its worker, not a whole batch.
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..PARALLEL)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(e) = expects.get(i) else { break done };
                        done.push((i, one(&up, e)));
                    }
                })
            })
            .collect();
        let mut outcomes: Vec<(usize, Result<String, String>)> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect();
        outcomes.sort_by_key(|(i, _)| *i);
        report.extend(outcomes.into_iter().map(|(_, r)| r));
    });
    let failures: Vec<&String> = report.iter().filter_map(|r| r.as_ref().err()).collect();
    // The failures first: CI shows only the start of a long output.
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    eprintln!(
        "{} registry devfiles in {:?}:\n{}",
        report.len(),
        started.elapsed(),
        report
            .iter()
            .map(|r| match r {
                Ok(s) => format!("  ok   {s}"),
                Err(s) => format!("  FAIL {s}"),
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        failures.is_empty(),
        "{} of 90 failed:\n{failures:#?}\n{}",
        failures.len(),
        up.log()
    );
    drop(tags);
}

/// One devfile: created and Running, projects fetched (or the download's failure said), a
/// command run, removed.
fn one(up: &Up, e: &Expect) -> Result<String, String> {
    let stem: String = e
        .file
        .trim_end_matches(".devfile.yaml")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(20)
        .collect();
    let name = unique_name(stem.trim_end_matches('-'));
    let path = up.home.path().join(format!("{name}.yaml"));
    std::fs::write(&path, &e.text).map_err(|x| x.to_string())?;
    let fail = |what: &str, out: &std::process::Output| {
        format!(
            "{}: {what}: {}{}",
            e.file,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let t0 = Instant::now();
    let out = up.cli(&[
        "ws",
        "create",
        "--name",
        &name,
        "--devfile",
        path.to_str().unwrap(),
        "--wait",
        "--timeout",
        "4m",
    ]);
    let result = (|| {
        // A startup step that cannot succeed here (a zip download, a toolchain the stand-in
        // lacks) fails the wait with the step's name, and the workspace runs on.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let startup = stderr
            .split("is Running, but its startup failed: ")
            .nth(1)
            .map(|r| {
                r.split("; it runs on")
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            });
        let said = startup
            .as_deref()
            .is_some_and(|r| r.contains("postStart command ") || r.contains(" project "));
        // Every Git remote has its stand-in: a clone that fails is a failure of Warren's.
        if (!out.status.success() && !said)
            || startup
                .as_deref()
                .is_some_and(|r| r.contains("cloning project"))
        {
            return Err(fail("ws create", &out));
        }
        let created = t0.elapsed();
        // Each project: cloned, or its download's failure said.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut pending: Vec<&(String, bool)> = e.projects.iter().collect();
        let mut logs = String::new();
        while !pending.is_empty() {
            // The startup script's own log, in the workspace's volume.
            let out = Command::new("podman")
                .args([
                    "exec",
                    &format!("warren-{name}.c.{}", e.main),
                    "sh",
                    "-c",
                    "cat /projects/.warren/logs/*.log 2>/dev/null",
                ])
                .output()
                .map_err(|x| x.to_string())?;
            logs = String::from_utf8_lossy(&out.stdout).into_owned();
            pending.retain(|(p, by_git)| {
                let done = if *by_git {
                    logs.contains(&format!("cloned project {p} into"))
                } else {
                    logs.contains(&format!("downloading project {p} failed"))
                };
                if *by_git && logs.contains(&format!("cloning project {p} failed")) {
                    return true;
                }
                !done
            });
            if Instant::now() > deadline {
                return Err(format!(
                    "{}: projects {pending:?} not fetched:\n{logs}",
                    e.file
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let fetched = t0.elapsed();
        let ran = match &e.command {
            None => "no exec command".to_owned(),
            Some((id, component)) => {
                let out = up.cli(&["ws", "run", &name, id]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                if !stderr.contains(&format!("==> {id} (exec in {component})")) {
                    return Err(fail(&format!("ws run {id}"), &out));
                }
                let code = out.status.code().unwrap_or(-1);
                let said = code == 0 || stderr.contains(&format!("failed (exit code {code})"));
                if !said {
                    return Err(fail(
                        &format!("ws run {id}: exit code {code} not reported"),
                        &out,
                    ));
                }
                format!("ws run {id}: exit {code}")
            }
        };
        let _ = logs;
        let startup = startup
            .map(|r| format!(", startup failed: {r}"))
            .unwrap_or_default();
        Ok(format!(
            "{}: Running, {} project(s), {ran}{startup} (created {created:.1?}, fetched {fetched:.1?}, ran {:.1?})",
            e.file,
            e.projects.len(),
            t0.elapsed()
        ))
    })();
    let out = up.cli(&["ws", "rm", &name, "--wait", "--timeout", "2m"]);
    if result.is_ok() && !out.status.success() {
        return Err(fail("ws rm", &out));
    }
    result.map(|r| format!("{r}, removed at {:.1?}", t0.elapsed()))
}
