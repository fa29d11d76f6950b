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
         # background (log: $PROJECTS_ROOT/.warren/logs/{}.log), then the container's command runs.",
        c.name, req.workspace_name, c.name
    );
    let _ = writeln!(s, "root=\"${{PROJECTS_ROOT:-/projects}}\"");
    let _ = writeln!(s, "state=\"$root/.warren\"");
    let _ = writeln!(s, "logs=\"$state/logs\"");
    let _ = writeln!(s, "mkdir -p \"$logs\" 2>/dev/null || logs=/tmp");
    let _ = writeln!(s, "log=\"$logs/{}.log\"", c.name);
    let _ = writeln!(s, "say() {{ echo \"$(date -u +%Y-%m-%dT%H:%M:%SZ) $*\"; }}");
    if c.mount_sources {
        // Before the command runs, so it (and every later shell) finds its home.
        s.push_str(HOME_SEED);
    }
    let editor = editor.filter(|e| e.container == c.name);
    if editor.is_some() {
        // The container's own output, for what `warren ws logs` must show (the editor's fate).
        let _ = writeln!(s, "exec 3>&2");
    }
    let _ = writeln!(s, "(");
    let _ = writeln!(s, "  say \"starting container {}\"", c.name);
    let _ = writeln!(s, "  ok=1");
    if c.main {
        if let Some(p) = &req.project {
            let dest = sh_quote(p.name);
            let _ = write!(
                s,
                r#"  dest="$root"/{dest}
  tmp="$root"/.warren/clone-{name}
  url="$WARREN_PROJECT_GIT_URL"
  ref="$WARREN_PROJECT_GIT_REF"
  if [ -e "$dest" ]; then
    say "project {name} already present in $dest, not cloning"
  elif ! command -v git >/dev/null 2>&1; then
    say "cannot clone project {name}: git is not installed in image {image}"
  else
    rm -rf "$tmp"
    say "cloning project {name} (shallow)"
    if {{ [ -n "$ref" ] && git clone --quiet --depth 1 --branch "$ref" -- "$url" "$tmp"; }} ||
       {{ [ -z "$ref" ] && git clone --quiet --depth 1 -- "$url" "$tmp"; }} ||
       {{ rm -rf "$tmp" && git init --quiet "$tmp" && git -C "$tmp" remote add origin "$url" &&
          git -C "$tmp" fetch --quiet --depth 1 origin "$ref" && git -C "$tmp" checkout --quiet FETCH_HEAD; }}; then
      mv "$tmp" "$dest" && say "cloned project {name} into $dest"
      (
        git -C "$dest" config remote.origin.fetch '+refs/heads/*:refs/remotes/origin/*' &&
          git -C "$dest" fetch --quiet --unshallow --tags origin && say "unshallowed project {name}" ||
          say "unshallowing project {name} failed; the shallow clone stays usable"
      ) &
    else
      rm -rf "$tmp"
      say "cloning project {name} failed (see the messages above)"
    fi
  fi
"#,
                name = p.name.replace(['\n', '"', '`', '$', '\\'], "_"),
                image = c.image.replace(['\n', '"', '`', '$', '\\'], "_"),
            );
        }
        let _ = writeln!(s, "  touch \"$state/cloned\"");
        s.push_str(DOTFILES);
    } else if c.mount_sources && req.project.is_some() {
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
        if component != &c.name {
            continue;
        }
        let body = command_script(
            command_line,
            working_dir.as_deref(),
            "${PROJECT_SOURCE}",
            env,
        );
        // A failed command skips the later ones; the editor still starts, to fix things in.
        let _ = writeln!(s, "  if [ \"$ok\" = 1 ]; then");
        let _ = writeln!(s, "    say \"running postStart command {id}\"");
        let _ = writeln!(s, "    if /bin/sh -c {} ; then", sh_quote(&body));
        let _ = writeln!(s, "      say \"postStart command {id} succeeded\"");
        let _ = writeln!(s, "    else");
        let _ = writeln!(
            s,
            "      say \"postStart command {id} failed with status $?; not running the later ones\""
        );
        let _ = writeln!(s, "      ok=0");
        let _ = writeln!(s, "    fi");
        let _ = writeln!(s, "  fi");
    }
    let _ = writeln!(s, "  if [ \"$ok\" = 1 ]; then");
    let _ = writeln!(s, "    say \"startup of container {} done\"", c.name);
    let _ = writeln!(s, "  else");
    let _ = writeln!(s, "    say \"startup of container {} failed\"", c.name);
    let _ = writeln!(s, "  fi");
    if let Some(e) = editor {
        s.push_str(&super::editor::start_lines(e, c));
    }
    let _ = writeln!(s, ") >>\"$log\" 2>&1 &");
    if editor.is_some() {
        let _ = writeln!(s, "if [ \"$#\" -gt 0 ]; then exec \"$@\" 3>&-; fi");
        let _ = writeln!(s, "exec 3>&-");
    } else {
        let _ = writeln!(s, "if [ \"$#\" -gt 0 ]; then exec \"$@\"; fi");
    }
    let _ = writeln!(s, "trap 'exit 0' TERM INT");
    let _ = writeln!(s, "while :; do sleep 3600 & wait $!; done");
    s
}
