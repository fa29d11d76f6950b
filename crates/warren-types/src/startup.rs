//! A workspace's startup as its own output tells it: the `warren: startup of container …`
//! lines the startup script writes (clone, `postStart` commands, a dev container's lifecycle
//! commands), read back into one status for `warren ws show`, `--wait` and the web UI.
//!
//! The script is the only party that knows how its steps went, and the container's output
//! is where it can say so on every runtime; reading it on demand costs the agent nothing
//! while nobody asks.

use serde::{Deserialize, Serialize};

/// The prefix of every line Warren's scripts write for Warren to read back.
pub const SAID_PREFIX: &str = "warren: ";

/// Annotation on a workspace's Deployment: the containers whose output tells the startup's
/// status (those running Warren's startup script), the main one first, comma-separated. A
/// workspace rendered without it (before Warren's startup told its status) is `untold`.
pub const STARTUP_CONTAINERS_ANNOTATION: &str = "warren.dev/startup-containers";

/// Where a workspace's startup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StartupState {
    /// Its output says nothing of a startup (yet, or at all: a runtime without Warren's
    /// startup script, output that rolled over).
    Unknown,
    /// Steps run, and the workspace is not usable yet.
    Starting,
    /// Usable: the steps a dev container's `waitFor` names ran; later ones go on.
    Ready,
    /// Every step ran.
    Done,
    /// A step failed; the later ones did not run. The workspace runs on, to be fixed in.
    Failed,
    /// Its status cannot be had: the workspace was rendered before Warren's startup told it (a
    /// change that renders it again, such as a resize, makes it tell), or the server reads no
    /// workspace's output (it has no relay).
    Untold,
}

impl StartupState {
    /// Whether someone waiting for the workspace to be usable may stop waiting.
    pub fn is_settled(self) -> bool {
        !matches!(self, StartupState::Starting | StartupState::Unknown)
    }
}

/// The startup of a workspace's main container (`GET /api/v1/workspaces/{w}/startup`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspaceStartup {
    pub state: StartupState,
    /// The container the status is of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The step under way (`Starting`, `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// What failed, with the command's exit code (`Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// This run reached the point a dev container's `waitFor` names before it failed: the
    /// workspace was usable, and a later command failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub was_ready: bool,
}

impl WorkspaceStartup {
    pub fn unknown() -> Self {
        Self::of(StartupState::Unknown)
    }

    pub fn of(state: StartupState) -> Self {
        WorkspaceStartup {
            state,
            container: None,
            step: None,
            reason: None,
            was_ready: false,
        }
    }

    /// One status of the workspace out of its containers' (the main one first): a failure of
    /// any, else a step still under way in any, else ready or done.
    pub fn combine(mut each: Vec<WorkspaceStartup>) -> WorkspaceStartup {
        let Some(main) = each.first().cloned() else {
            return Self::unknown();
        };
        // A container other than the main one says which it is in the reason.
        for (i, s) in each.iter_mut().enumerate() {
            if let (true, Some(c), Some(r)) = (i > 0, &s.container, &mut s.reason) {
                *r = format!("in container {c}: {r}");
            }
        }
        if let Some(failed) = each.iter().find(|s| s.state == StartupState::Failed) {
            return failed.clone();
        }
        if let Some(busy) = each
            .iter()
            .find(|s| s.state == StartupState::Starting)
            .or_else(|| each.iter().find(|s| s.state == StartupState::Unknown))
        {
            if busy.state == StartupState::Unknown && main.state == StartupState::Unknown {
                return Self::unknown();
            }
            let mut busy = busy.clone();
            busy.state = StartupState::Starting;
            return busy;
        }
        if each.iter().all(|s| s.state == StartupState::Done) {
            return main;
        }
        let mut ready = main;
        ready.state = StartupState::Ready;
        ready
    }

    /// One line for people: `done`, `starting: cloning project app`, `failed: …`.
    pub fn describe(&self) -> String {
        let state = match self.state {
            StartupState::Untold => "not told by this workspace",
            StartupState::Unknown => "unknown",
            StartupState::Starting => "starting",
            StartupState::Ready => "ready",
            StartupState::Done => "done",
            StartupState::Failed => "failed",
        };
        match (&self.reason, &self.step) {
            (Some(r), _) => format!("{state}: {r}"),
            (None, Some(s)) if self.state == StartupState::Ready => {
                format!("{state} (still running: {s})")
            }
            (None, Some(s)) => format!("{state}: {s}"),
            (None, None) => state.to_owned(),
        }
    }
}

/// What a line written by Warren's scripts says, without the log's timestamp: `say`
/// prefixes an RFC 3339 time when the line also went to the startup log.
pub fn said(line: &str) -> Option<&str> {
    let line = line.trim();
    let line = match line.split_once(' ') {
        Some((first, rest))
            if first.len() >= 20
                && first.ends_with('Z')
                && first.as_bytes()[..4].iter().all(u8::is_ascii_digit)
                && first.as_bytes()[10] == b'T' =>
        {
            rest
        }
        _ => line,
    };
    line.strip_prefix(SAID_PREFIX)
}

/// The startup status the output of a container tells (its last run's, when it restarted).
pub fn startup_status(container_output: &[u8]) -> WorkspaceStartup {
    let mut status = WorkspaceStartup::unknown();
    for line in String::from_utf8_lossy(container_output).lines() {
        let Some(rest) = said(line).and_then(|l| l.strip_prefix("startup of container ")) else {
            continue;
        };
        let end = rest.find([' ', ':']).unwrap_or(rest.len());
        let (container, rest) = rest.split_at(end);
        // The workspace wrote it: no terminal control sequence reaches whoever reads it.
        let what: String = rest.chars().filter(|c| !c.is_control()).collect();
        let what = what.trim_start_matches(':').trim();
        status.container = Some(container.chars().filter(|c| !c.is_control()).collect());
        if what == "starting" {
            status.state = StartupState::Starting;
            status.step = None;
            status.reason = None;
            status.was_ready = false;
        } else if what == "done" {
            status.state = StartupState::Done;
            status.step = None;
        } else if what == "ready" || what.starts_with("ready ") {
            status.state = StartupState::Ready;
            status.step = None;
            status.was_ready = true;
        } else if let Some(reason) = what.strip_prefix("failed") {
            status.state = StartupState::Failed;
            status.step = None;
            let reason = reason.trim_start_matches(':').trim();
            status.reason = Some(if reason.is_empty() {
                "a step failed (the workspace's logs say which)".into()
            } else {
                reason.to_owned()
            });
        } else if !what.is_empty() && status.state != StartupState::Failed {
            if status.state == StartupState::Unknown {
                status.state = StartupState::Starting;
            }
            status.step = Some(what.to_owned());
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_startup_is_read_from_its_lines_with_or_without_timestamps() {
        let out = b"hello from the image\n\
2026-11-30T10:00:00Z warren: startup of container dev: starting\n\
2026-11-30T10:00:01Z warren: startup of container dev: cloning project app\n\
cloning...\n";
        let s = startup_status(out);
        assert_eq!(s.state, StartupState::Starting);
        assert_eq!(s.container.as_deref(), Some("dev"));
        assert_eq!(s.step.as_deref(), Some("cloning project app"));
        assert_eq!(s.describe(), "starting: cloning project app");

        let out = [
            &out[..],
            b"warren: startup of container dev ready\nwarren: startup of container dev: running postStart command post-start\n",
        ]
        .concat();
        let s = startup_status(&out);
        assert_eq!(s.state, StartupState::Ready);
        assert!(s.state.is_settled());
        assert_eq!(
            s.describe(),
            "ready (still running: running postStart command post-start)"
        );

        let failed = [
            &out[..],
            b"2026-11-30T10:00:09Z warren: startup of container dev failed: postStart command post-start exited with code 3\n",
        ]
        .concat();
        let s = startup_status(&failed);
        assert_eq!(s.state, StartupState::Failed);
        assert!(s.was_ready, "usable before the failure");
        assert_eq!(
            s.describe(),
            "failed: postStart command post-start exited with code 3"
        );

        // A restart begins again: its own outcome wins.
        let again = [
            &failed[..],
            b"warren: startup of container dev: starting\nwarren: startup of container dev done\nwarren: editor started\n",
        ]
        .concat();
        let s = startup_status(&again);
        assert_eq!(
            (s.state, s.reason, s.step),
            (StartupState::Done, None, None)
        );
        assert!(!s.was_ready, "a new run starts over");
    }

    #[test]
    fn a_workspaces_status_is_its_containers_together() {
        let of = |container: &str, out: &str| {
            let mut s = startup_status(out.as_bytes());
            s.container.get_or_insert_with(|| container.to_owned());
            s
        };
        let done = |c: &str| of(c, &format!("warren: startup of container {c} done\n"));
        let ready = of("dev", "warren: startup of container dev ready\n");
        let busy = of(
            "db",
            "warren: startup of container db: running postStart command seed\n",
        );
        let failed = of(
            "db",
            "warren: startup of container db failed: postStart command seed exited with code 2\n",
        );
        let unknown = WorkspaceStartup::unknown();

        assert_eq!(
            WorkspaceStartup::combine(vec![done("dev"), done("db")]).state,
            StartupState::Done
        );
        assert_eq!(
            WorkspaceStartup::combine(vec![ready.clone(), done("db")]).state,
            StartupState::Ready
        );
        let s = WorkspaceStartup::combine(vec![done("dev"), busy]);
        assert_eq!(
            (s.state, s.step.as_deref()),
            (
                StartupState::Starting,
                Some("running postStart command seed")
            )
        );
        let s = WorkspaceStartup::combine(vec![ready, failed]);
        assert_eq!(s.state, StartupState::Failed);
        assert_eq!(
            s.reason.as_deref(),
            Some("in container db: postStart command seed exited with code 2")
        );
        assert!(!s.was_ready);
        // A container that has said nothing yet holds the rest.
        assert_eq!(
            WorkspaceStartup::combine(vec![done("dev"), unknown.clone()]).state,
            StartupState::Starting
        );
        assert_eq!(
            WorkspaceStartup::combine(vec![unknown.clone(), unknown]).state,
            StartupState::Unknown
        );
        assert_eq!(
            WorkspaceStartup::combine(vec![]).state,
            StartupState::Unknown
        );
        assert!(StartupState::Untold.is_settled() && !StartupState::Unknown.is_settled());
    }

    #[test]
    fn output_without_a_startup_says_unknown_and_other_lines_are_not_misread() {
        assert_eq!(startup_status(b"").state, StartupState::Unknown);
        let s = startup_status(
            b"warren: editor started\nstartup of container x done\n  warren: other\n",
        );
        assert_eq!(s, WorkspaceStartup::unknown());
        assert!(!s.state.is_settled());
        assert_eq!(said("2026-11-30T10:00:00Z warren: x"), Some("x"));
        assert_eq!(said("warren: x"), Some("x"));
        assert_eq!(said("12 warren: x"), None);
        assert_eq!(said("2026-11-30T10:00:00Z nothing"), None);
        // A workspace's own words never carry terminal control sequences to a reader.
        let s =
            startup_status(b"warren: startup of container x failed: \x1b]0;pwned\x07red\x1b[31m\n");
        assert_eq!(s.reason.as_deref(), Some("]0;pwnedred[31m"));
    }
}
