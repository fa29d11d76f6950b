//! The shell scripts of a workspace's start: quoting, one command's script, and the wrapper
//! that runs the startup work (clone, `postStart`) beside the container's own command.

use super::RenderRequest;
use crate::model::{CommandAction, Container, Devfile};

/// Single-quotes a string for `/bin/sh`.
pub(super) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Double-quotes a path for `/bin/sh`, leaving `$VAR` expansion (devfiles write
/// `${PROJECT_SOURCE}` in `workingDir`).
pub(super) fn sh_dquote_expand(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        if matches!(ch, '"' | '\\' | '`') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('"');
    out
}

/// `cd <workingDir> && export …; <commandLine>` for one exec command.
/// `default_dir` applies when the command gives no `workingDir`: the project for postStart
/// commands, the sources root for preStart ones (they run before the clone).
pub(super) fn command_script(
    command_line: &str,
    working_dir: Option<&str>,
    default_dir: &str,
    env: &[crate::model::EnvVar],
) -> String {
    let mut s = String::new();
    // Exec command env names are checked to be shell identifiers at parse time.
    for e in env {
        s.push_str(&format!("export {}={}\n", e.name, sh_quote(&e.value)));
    }
    let wd = working_dir.unwrap_or(default_dir);
    s.push_str(&format!("cd {} || exit 1\n", sh_dquote_expand(wd)));
    s.push_str(command_line);
    s.push('\n');
    s
}

/// Creates `$HOME` on first start (marked by `.warren-home`), seeded with a copy of the
/// image's home: the user's `/etc/passwd` entry, else the image's `HOME`-less default. A home of
/// `/` (what Podman writes for a user the image does not know) is no home to copy.
const HOME_SEED: &str = r#"if [ -n "${HOME:-}" ] && [ ! -e "$HOME/.warren-home" ]; then
  image_home="$(awk -F: -v u="$(id -u)" '$3 == u { print $6; exit }' /etc/passwd 2>/dev/null)"
  if mkdir -p "$HOME" 2>/dev/null; then
    if [ -n "$image_home" ] && [ "$image_home" != / ] && [ "$image_home" != "$HOME" ] && [ -d "$image_home" ]; then
      cp -a "$image_home/." "$HOME/" 2>/dev/null
      echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) home $HOME created from the image's $image_home" >>"$log"
    else
      echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) home $HOME created" >>"$log"
    fi
    touch "$HOME/.warren-home"
  else
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) cannot create home $HOME; using /tmp" >>"$log"
    export HOME=/tmp
  fi
fi
"#;

/// Clones the owner's dotfiles into `~/.dotfiles` once, then runs the first install script
/// found, or links the repository's top-level dotfiles into the home; failures are logged and
/// never fatal.
const DOTFILES: &str = r#"  if [ -n "${WARREN_DOTFILES_URL:-}" ] && [ -n "${HOME:-}" ] && [ ! -e "$HOME/.dotfiles" ]; then
    if ! command -v git >/dev/null 2>&1; then
      say "cannot install dotfiles: git is not installed in this image"
    elif git clone --quiet --depth 1 -- "$WARREN_DOTFILES_URL" "$HOME/.dotfiles"; then
      say "cloned dotfiles from $WARREN_DOTFILES_URL"
      script=""
      for f in install.sh install bootstrap.sh bootstrap script/bootstrap setup.sh setup script/setup; do
        if [ -f "$HOME/.dotfiles/$f" ]; then script="$f"; break; fi
      done
      if [ -n "$script" ]; then
        if (cd "$HOME/.dotfiles" && /bin/sh "./$script"); then
          say "dotfiles installed by $script"
        else
          say "dotfiles install script $script failed with status $?; the workspace runs on"
        fi
      else
        for f in "$HOME"/.dotfiles/.[!.]*; do
          [ -e "$f" ] || continue
          n="$(basename "$f")"
          [ "$n" = .git ] && continue
          [ -e "$HOME/$n" ] || ln -s "$f" "$HOME/$n"
        done
        say "dotfiles linked into $HOME (no install script)"
      fi
    else
      rm -rf "$HOME/.dotfiles"
      say "cloning dotfiles from $WARREN_DOTFILES_URL failed; the workspace runs on"
    fi
  fi
"#;

/// One fetch of the startup script: into `dest` (a shell word, relative to the sources
/// root), through a temporary directory, never over an existing one.
struct Fetch<'a> {
    /// The project's name, for the log (a checked name: DNS-label characters).
    label: &'a str,
    dest: &'a str,
    /// Name of the temporary directory under `$state`.
    tmp: &'a str,
    /// Shell words (quoted literals or quoted variables).
    url: &'a str,
    git_ref: &'a str,
    sub_dir: Option<&'a str>,
    /// The image, made safe for a double-quoted log line.
    image: &'a str,
}

/// After a successful fetch into `$tmp`: keeps the sub-directory asked for, and moves the
/// result to `$dest`.
fn place(f: &Fetch<'_>, verb: &str) -> String {
    let from = match f.sub_dir {
        Some(d) => format!("\"$tmp\"/{}", sh_quote(d)),
        None => "\"$tmp\"".into(),
    };
    format!(
        r#"      if [ -d {from} ] && mkdir -p "$(dirname "$dest")" && mv {from} "$dest"; then
        say "{verb} project {label} into $dest"
      else
        fail "project {label}: {missing}"
      fi
"#,
        label = f.label,
        missing = match f.sub_dir {
            Some(d) => format!(
                "its sub-directory {} is not in the source",
                d.replace(['"', '`', '$', '\\'], "_")
            ),
            None => "moving it into place failed".into(),
        },
    )
}

/// Clones a Git repository (shallow: by branch or tag, else by commit; then unshallowed in
/// the background when the whole clone is kept).
fn git_fetch(f: &Fetch<'_>) -> String {
    let mut s = format!(
        r#"  dest="$root"/{dest}
  tmp="$state"/{tmp}-{label}
  err="$logs"/{tmp}-{label}.err
  url={url}
  ref={git_ref}
  if [ -e "$dest" ]; then
    say "project {label} already present in $dest, not cloning"
  elif ! command -v git >/dev/null 2>&1; then
    fail "cannot clone project {label}: git is not installed in image {image}"
  else
    rm -rf "$tmp"
    status ": cloning project {label}"
    say "cloning project {label} (shallow)"
    if {{ {{ [ -n "$ref" ] && git clone --quiet --depth 1 --branch "$ref" -- "$url" "$tmp"; }} ||
       {{ [ -z "$ref" ] && git clone --quiet --depth 1 -- "$url" "$tmp"; }} ||
       {{ rm -rf "$tmp" && git init --quiet "$tmp" && git -C "$tmp" remote add origin "$url" &&
          git -C "$tmp" fetch --quiet --depth 1 origin "$ref" && git -C "$tmp" checkout --quiet FETCH_HEAD; }}; }} 2>"$err"; then
"#,
        dest = f.dest,
        tmp = f.tmp,
        label = f.label,
        url = f.url,
        git_ref = f.git_ref,
        image = f.image,
    );
    s.push_str(&place(f, "cloned"));
    if f.sub_dir.is_none() {
        s.push_str(&format!(
            r#"      [ -d "$dest/.git" ] && (
        git -C "$dest" config remote.origin.fetch '+refs/heads/*:refs/remotes/origin/*' &&
          git -C "$dest" fetch --quiet --unshallow --tags origin && say "unshallowed project {label}" ||
          say "unshallowing project {label} failed; the shallow clone stays usable"
      ) &
"#,
            label = f.label
        ));
    }
    s.push_str(&format!(
        r#"    else
      # Git's own words: its last `fatal:` says why (an unreachable host, a missing ref).
      cat "$err" 2>/dev/null
      reason="$(grep '^fatal:' "$err" 2>/dev/null | tail -n 1 | tr -d '\r')"
      [ -n "$reason" ] || reason="$(grep -v '^[[:space:]]*$' "$err" 2>/dev/null | tail -n 1 | tr -d '\r')"
      fail "cloning project {label} failed: ${{reason:-git said nothing}}"
    fi
    rm -rf "$tmp" "$err"
  fi
"#,
        label = f.label
    ));
    s
}

/// Whether a workspace's first start leaves the catch-up from a prebuild to a later one: a
/// prebuild's own (it is the prebuild), and one waiting in a warm pool (its taker's start).
fn catches_up_later(req: &RenderRequest<'_>) -> bool {
    req.prebuild || req.seed.is_some_and(|s| s.pooled)
}

/// The first start of a workspace made from a prebuild's volume: the project's checkout is
/// the prebuild's (its commit in `$prebuilt/sources`), brought forward to the ref's newest
/// commit (a fast-forward: the prebuild's checkout has no one's work) before the clone step
/// finds it present. A ref that no longer leads on from that commit (history rewritten, moved
/// back) fails the start rather than leave other sources than asked for unsaid. The marker goes
/// only once that worked, so a start that failed (a network blip) tries again. New commits
/// mean the prebuild's commands ran on other sources: their markers go, and
/// `WARREN_SOURCES_UPDATED` lets a dev container's `updateContentCommand` run again.
fn from_prebuild(name: &str, seed: Option<&str>) -> String {
    // Rendered from a prebuild whose volume did not reach this one (the copy failed, or the
    // prebuild was collected meanwhile): a cold start, said as such.
    let cold = seed.map(|commit| {
        let commit: String = commit.chars().filter(char::is_ascii_hexdigit).collect();
        format!(
            "  elif [ ! -d \"$root\"/{dest}/.git ]; then\n    say \"project {name}: the prebuild of {commit} was not copied into this workspace's volume; starting without it\"\n",
            dest = sh_quote(name),
        )
    });
    let cut = if seed.is_some() {
        format!(
            "  if [ -e \"$root\"/{marker} ]; then\n    fail \"project {name}: copying the prebuild into this workspace's volume was cut short; make the workspace again\"\n  el",
            marker = warren_types::prebuild::SEEDING_MARKER,
        )
    } else {
        "  ".to_owned()
    };
    format!(
        r#"{cut}if [ -f "$prebuilt/sources" ] && [ -d "$root"/{dest}/.git ]; then
    was="$(cat "$prebuilt/sources")"
    err="$logs"/update-{label}.err
    status ": bringing project {label} up to date from its prebuild"
    if ! git -C "$root"/{dest} fetch --quiet origin "${{WARREN_PROJECT_GIT_REF:-HEAD}}" 2>"$err" ||
       {{ git -C "$root"/{dest} merge-base --is-ancestor HEAD FETCH_HEAD 2>>"$err" &&
          ! git -C "$root"/{dest} merge --quiet --ff-only FETCH_HEAD >>"$err" 2>&1; }}; then
      cat "$err" 2>/dev/null
      reason="$(grep '^fatal:' "$err" 2>/dev/null | tail -n 1 | tr -d '\r')"
      [ -n "$reason" ] || reason="$(grep -v '^[[:space:]]*$' "$err" 2>/dev/null | tail -n 1 | tr -d '\r')"
      fail "bringing project {label} up to date from the prebuild of $was failed: ${{reason:-git said nothing}}"
    elif [ "$(git -C "$root"/{dest} rev-parse HEAD)" != "$(git -C "$root"/{dest} rev-parse FETCH_HEAD)" ]; then
      fail "project {label}: its ref no longer leads on from the prebuild's commit $was (history rewritten or moved back); make the workspace again to start from the ref"
    else
      now="$(git -C "$root"/{dest} rev-parse HEAD)"
      rm -f "$prebuilt/sources"
      if [ "$now" = "$was" ]; then
        say "project {label} started from the prebuild of $was, the ref's newest commit"
      else
        rm -f "$prebuilt"/step-*
        export WARREN_SOURCES_UPDATED=1
        say "project {label} started from the prebuild of $was, now at $now: the prebuild's commands run again for the new commits"
      fi
    fi
    rm -f "$err"
{cold}  fi
"#,
        dest = sh_quote(name),
        label = name,
        cold = cold.unwrap_or_default(),
    )
}

/// Downloads and extracts a zip archive (curl or wget, then unzip, from the image).
fn zip_fetch(f: &Fetch<'_>) -> String {
    let mut s = format!(
        r#"  dest="$root"/{dest}
  tmp="$state"/{tmp}-{label}
  url={url}
  if [ -e "$dest" ]; then
    say "project {label} already present in $dest, not downloading"
  else
    rm -rf "$tmp" "$tmp.zip" && mkdir -p "$tmp"
    status ": downloading project {label}"
    say "downloading project {label}"
    if {{ command -v curl >/dev/null 2>&1 && curl -fsSL -o "$tmp.zip" -- "$url"; }} ||
       {{ command -v wget >/dev/null 2>&1 && wget -q -O "$tmp.zip" "$url"; }}; then
      if unzip -q "$tmp.zip" -d "$tmp"; then
"#,
        dest = f.dest,
        tmp = f.tmp,
        label = f.label,
        url = f.url,
    );
    s.push_str(&place(f, "extracted"));
    s.push_str(&format!(
        r#"      else
        fail "extracting project {label} failed: image {image} needs unzip, and the download must be a zip archive"
      fi
    else
      fail "downloading project {label} failed: image {image} needs curl or wget, and the location must be reachable"
    fi
    rm -rf "$tmp" "$tmp.zip"
  fi
"#,
        label = f.label,
        image = f.image,
    ));
    s
}

/// The starter project a workspace without a project starts from: the one the request
/// names, else the first.
pub(super) fn starter<'d>(
    devfile: &'d Devfile,
    req: &RenderRequest<'_>,
) -> Option<&'d crate::model::DevfileProject> {
    req.starter
        .and_then(|n| devfile.starter_projects.iter().find(|p| p.name == n))
        .or_else(|| devfile.starter_projects.first())
}

/// The fetch of one of the devfile's projects.
fn project_fetch(p: &crate::model::DevfileProject, tmp: &str, image: &str) -> String {
    let dest = sh_quote(&p.clone_path);
    match &p.origin {
        crate::model::ProjectOrigin::Git { url, revision } => git_fetch(&Fetch {
            label: &p.name,
            dest: &dest,
            tmp,
            url: &sh_quote(url),
            git_ref: &sh_quote(revision.as_deref().unwrap_or("")),
            sub_dir: p.sub_dir.as_deref(),
            image,
        }),
        crate::model::ProjectOrigin::Zip { location } => zip_fetch(&Fetch {
            label: &p.name,
            dest: &dest,
            tmp,
            url: &sh_quote(location),
            git_ref: "''",
            sub_dir: p.sub_dir.as_deref(),
            image,
        }),
    }
}

/// What the startup says for Warren to read back: a `warren: ` line in the container's own
/// output (file descriptor 3 when the startup's output is not copied there already), and in
/// the startup log. `status` lines are the startup's state ([`warren_types::startup`]).
const TELL: &str = r#"teed=
command -v tee >/dev/null 2>&1 && teed=1
tell() { say "warren: $*"; [ -n "$teed" ] || echo "warren: $*" >&3; }
"#;

/// The startup's last word: done, or failed with the first failure's reason.
const OUTCOME: &str = r#"  if [ "$ok" = 1 ]; then
    status " done"
  else
    status " failed: $why"
  fi
"#;

/// Lines of the startup that fail it: the first failure is its reason; the later steps are
/// skipped, and the editor still starts, to fix things in.
const FAIL: &str = r#"  ok=1
  why=
  fail() { say "$*"; ok=0; [ -n "$why" ] || why="$*"; }
"#;

pub(super) fn startup_script(
    devfile: &Devfile,
    c: &Container,
    req: &RenderRequest<'_>,
    editor: Option<&super::editor::EditorPlan>,
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/sh");
    let _ = writeln!(
        s,
        "# Warren startup for container {} of workspace {}: the startup work runs in the\n\
         # background (log: $PROJECTS_ROOT/.warren/logs/{}.log, and the container's output),\n\
         # then the container's command runs.",
        c.name, req.workspace_name, c.name
    );
    let _ = writeln!(s, "root=\"${{PROJECTS_ROOT:-/projects}}\"");
    let _ = writeln!(s, "state=\"$root/.warren\"");
    // What a prebuild did, for the first start of a workspace made from its volume.
    let _ = writeln!(s, "prebuilt=\"$state/prebuilt\"");
    let _ = writeln!(s, "logs=\"$state/logs\"");
    let _ = writeln!(s, "mkdir -p \"$logs\" 2>/dev/null || logs=/tmp");
    let _ = writeln!(s, "log=\"$logs/{}.log\"", c.name);
    let _ = writeln!(s, "say() {{ echo \"$(date -u +%Y-%m-%dT%H:%M:%SZ) $*\"; }}");
    if c.mount_sources {
        // Before the command runs, so it (and every later shell) finds its home.
        s.push_str(HOME_SEED);
    }
    let editor = editor.filter(|e| e.container == c.name && !req.prebuild);
    // The container's own output, where `warren ws logs` and the startup status read.
    let _ = writeln!(s, "exec 3>&2");
    s.push_str(TELL);
    let _ = writeln!(
        s,
        "status() {{ tell \"startup of container {}$*\"; }}",
        c.name
    );
    let _ = writeln!(s, "startup() {{");
    let _ = writeln!(s, "  status \": starting\"");
    s.push_str(FAIL);
    let ready = |s: &mut String| {
        let _ = writeln!(s, "  [ \"$ok\" = 1 ] && status \" ready\"");
    };
    if c.main {
        let image = c.image.replace(['\n', '"', '`', '$', '\\'], "_");
        if let (Some(p), false) = (&req.project, catches_up_later(req)) {
            s.push_str(&from_prebuild(p.name, req.seed.map(|s| s.commit)));
        }
        if let Some(p) = &req.project {
            s.push_str(&git_fetch(&Fetch {
                label: p.name,
                dest: &sh_quote(p.name),
                tmp: "clone",
                url: "\"$WARREN_PROJECT_GIT_URL\"",
                git_ref: "\"$WARREN_PROJECT_GIT_REF\"",
                sub_dir: None,
                image: &image,
            }));
            if req.prebuild {
                // The unshallow finishes before the volume is kept: a fetch cut short there
                // would leave a lock the workspace's catch-up trips on.
                let _ = writeln!(
                    s,
                    "  wait; [ \"$ok\" = 1 ] && mkdir -p \"$prebuilt\" && git -C \"$root\"/{} rev-parse HEAD >\"$prebuilt/sources\"",
                    sh_quote(p.name)
                );
            }
        }
        for (i, p) in devfile.projects.iter().enumerate() {
            s.push_str(&project_fetch(p, &format!("project-{i}"), &image));
        }
        // A starter project starts a workspace that has no repository of its own.
        if req.project.is_none() {
            if let Some(p) = starter(devfile, req) {
                s.push_str(&project_fetch(p, "starter", &image));
            }
        }
        let _ = writeln!(s, "  touch \"$state/cloned\"");
        // A prebuild belongs to no one: the dotfiles are each workspace owner's.
        if !req.prebuild {
            s.push_str(DOTFILES);
        }
        if devfile.wait_for.as_deref() == Some("") {
            ready(&mut s);
        }
    } else if c.mount_sources
        && (req.project.is_some()
            || !devfile.projects.is_empty()
            || !devfile.starter_projects.is_empty())
    {
        let _ = writeln!(s, "  status \": waiting for the sources\"");
        let _ = writeln!(
            s,
            "  i=0; while [ ! -e \"$state/cloned\" ] && [ \"$i\" -lt 600 ]; do sleep 1; i=$((i+1)); done"
        );
    }
    for id in &devfile.post_start {
        let Some(cmd) = devfile.command(id) else {
            continue;
        };
        let CommandAction::Exec {
            component,
            command_line,
            working_dir,
            env,
        } = &cmd.action
        else {
            continue;
        };
        let in_prebuilds = devfile.prebuild.contains(id);
        if component != &c.name || (req.prebuild && !in_prebuilds) {
            continue;
        }
        let body = command_script(
            command_line,
            working_dir.as_deref(),
            "${PROJECT_SOURCE}",
            env,
        );
        let label = cmd.label.as_deref();
        s.push_str(&post_start_step(
            id,
            label,
            &body,
            in_prebuilds,
            Run::of(req),
        ));
        if devfile.wait_for.as_deref() == Some(id.as_str()) {
            ready(&mut s);
        }
    }
    s.push_str(OUTCOME);
    if let Some(e) = editor {
        s.push_str(&super::editor::start_lines(e, c));
    }
    let _ = writeln!(s, "}}");
    // Copied to the container's output when the image has `tee`, so `warren ws logs` shows
    // each step's output; the status lines reach it either way.
    let _ = writeln!(s, "if [ -n \"$teed\" ]; then");
    let _ = writeln!(s, "  startup 2>&1 | tee -a \"$log\" >&3 &");
    let _ = writeln!(s, "else");
    let _ = writeln!(s, "  startup >>\"$log\" 2>&1 &");
    let _ = writeln!(s, "fi");
    let _ = writeln!(s, "if [ \"$#\" -gt 0 ]; then exec \"$@\" 3>&-; fi");
    let _ = writeln!(s, "exec 3>&-");
    let _ = writeln!(s, "trap 'exit 0' TERM INT");
    let _ = writeln!(s, "while :; do sleep 3600 & wait $!; done");
    s
}

/// Whose start a script is, as far as a prebuild's commands go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// The prebuild's own: it runs them and marks each done in the volume.
    Prebuild,
    /// A warm pool's workspace waiting for someone: it skips them and keeps their marks for
    /// the first start of whoever takes it.
    Pooled,
    /// Any other workspace's.
    Workspace,
}

impl Run {
    fn of(req: &RenderRequest<'_>) -> Run {
        if req.prebuild {
            Run::Prebuild
        } else if catches_up_later(req) {
            Run::Pooled
        } else {
            Run::Workspace
        }
    }
}

/// One `postStart` command's lines in the startup: run unless an earlier step failed. A
/// prebuild's run marks it done in the volume; a command a prebuild runs is, at the first
/// start after that prebuild, skipped once (its marker consumed) — by the start of whoever
/// takes a pooled workspace, not by the pooled workspace's own.
fn post_start_step(
    id: &str,
    label: Option<&str>,
    body: &str,
    in_prebuilds: bool,
    run: Run,
) -> String {
    let prebuild = run == Run::Prebuild;
    use std::fmt::Write;
    let mut s = String::new();
    // The label (a dev container's property name) is what its author knows it by.
    let what = match label {
        Some(l) => format!("postStart command {id} ({})", safe_word(l)),
        None => format!("postStart command {id}"),
    };
    let marker = format!("\"$prebuilt\"/{}", sh_quote(&format!("step-{id}")));
    if in_prebuilds && run == Run::Pooled {
        let _ = writeln!(s, "  if [ \"$ok\" = 1 ] && [ -e {marker} ]; then");
        let _ = writeln!(
            s,
            "    say \"{what} ran in the prebuild; not again (kept so for whoever takes this workspace)\""
        );
        let _ = writeln!(s, "  elif [ \"$ok\" = 1 ]; then");
    } else if in_prebuilds && !prebuild {
        // Once: the workspace's later starts run it as any workspace's do.
        let _ = writeln!(s, "  if [ \"$ok\" = 1 ] && [ -e {marker} ]; then");
        let _ = writeln!(s, "    rm -f {marker}");
        let _ = writeln!(s, "    say \"{what} ran in the prebuild; not again\"");
        let _ = writeln!(s, "  elif [ \"$ok\" = 1 ]; then");
    } else {
        let _ = writeln!(s, "  if [ \"$ok\" = 1 ]; then");
    }
    let _ = writeln!(s, "    status \": running {what}\"");
    let _ = writeln!(s, "    if /bin/sh -c {} ; then", sh_quote(body));
    let _ = writeln!(s, "      say \"{what} succeeded\"");
    if prebuild {
        let _ = writeln!(s, "      mkdir -p \"$prebuilt\" && : >{marker}");
    }
    let _ = writeln!(s, "    else");
    let _ = writeln!(
        s,
        "      fail \"{what} exited with code $?\"; say \"not running the later ones\""
    );
    let _ = writeln!(s, "    fi");
    let _ = writeln!(s, "  fi");
    s
}

/// `s` made safe inside a double-quoted shell word of one line.
fn safe_word(s: &str) -> String {
    s.replace(['\n', '\r', '"', '`', '$', '\\'], "_")
}

/// The script run whenever a session attaches ([`crate::POST_ATTACH_SCRIPT`]): the devfile's
/// post-attach commands in order, each in a shell of its own (a failure is said and the next
/// runs), their output in the `post-attach` log. `None` when the devfile has none.
pub(super) fn post_attach_script(devfile: &Devfile) -> Option<String> {
    use std::fmt::Write;
    if devfile.post_attach.is_empty() {
        return None;
    }
    let mut s = String::from("#!/bin/sh\n# Warren: the commands run when a session attaches.\n");
    s.push_str("root=\"${PROJECTS_ROOT:-/projects}\"\nlogs=\"$root/.warren/logs\"\n");
    s.push_str("mkdir -p \"$logs\" 2>/dev/null || logs=/tmp\n");
    s.push_str("say() { echo \"$(date -u +%Y-%m-%dT%H:%M:%SZ) $*\"; }\n{\n");
    for id in &devfile.post_attach {
        let Some(CommandAction::Exec {
            command_line,
            working_dir,
            env,
            ..
        }) = devfile.command(id).map(|c| &c.action)
        else {
            continue;
        };
        let script = super::exec_command_script(command_line, working_dir.as_deref(), env);
        let _ = writeln!(
            s,
            "  say {}",
            sh_quote(&format!("running postAttach command {id}"))
        );
        let _ = writeln!(
            s,
            "  /bin/sh -c {} || say {}\"$?\"",
            sh_quote(&script),
            sh_quote(&format!("postAttach command {id} failed with status "))
        );
    }
    s.push_str("} >>\"$logs/post-attach.log\" 2>&1\n");
    Some(s)
}
