//! Prebuilds: a project's clone and create-time steps run ahead of time in a workspace of
//! their own, whose volumes new workspaces of the project start as copies of.
//!
//! The names here are the contract between the renderer (which marks a prebuild's objects and
//! the volumes a new workspace seeds from one) and the agents (which copy only from a volume
//! that carries the mark of the very prebuild named).

use crate::WorkspaceId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Label on every object of a prebuild's own workspace, and on the engine volumes made for
/// it: only such a volume is ever copied into another workspace's.
pub const PREBUILD_LABEL: &str = "warren.dev/prebuild";

/// Annotation on a new workspace's PersistentVolumeClaims: the name of the prebuild workspace
/// whose same-named volume it starts as a copy of (when the agent creates it; a volume that
/// exists is left alone).
pub const SEED_FROM_ANNOTATION: &str = "warren.dev/seed-from";

/// Annotation beside [`SEED_FROM_ANNOTATION`]: that workspace's id, which its volume's labels
/// must carry too (a name can be taken again after a workspace is gone).
pub const SEED_FROM_ID_ANNOTATION: &str = "warren.dev/seed-from-id";

/// Annotation on the Deployment an agent reports for a stopped prebuild: the bytes its kept
/// volumes and snapshots take on the agent's disk, measured once they are kept (absent where
/// the runtime cannot tell).
pub const STORED_BYTES_ANNOTATION: &str = "warren.dev/stored-bytes";

/// File at the root of a volume while the agent fills it from a prebuild's: a copy cut short
/// (the agent stopped mid-way) is found by the workspace's startup, which fails saying so
/// rather than run on part of a checkout.
pub const SEEDING_MARKER: &str = ".warren-seeding";

/// The source a new workspace's volumes are copied from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed<'a> {
    /// The prebuild's own workspace.
    pub workspace: &'a str,
    pub workspace_id: WorkspaceId,
    /// The commit the prebuild built, for the startup's messages.
    pub commit: &'a str,
    /// Made for a project's warm pool: its first start leaves bringing the checkout up to
    /// date to the start of whoever takes it, which then fetches the commits since the
    /// prebuild's (a pooled workspace may wait long).
    pub pooled: bool,
}

/// Where a prebuild is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrebuildState {
    /// Its workspace clones and runs the prebuild's commands.
    Running,
    /// Done: its volumes are what new workspaces of its ref start from.
    Ready,
    /// A step failed or it took too long; new workspaces start cold.
    Failed,
    /// A newer prebuild of the ref replaced it, or it was collected: its volumes are gone.
    Removed,
}

impl PrebuildState {
    pub fn as_str(self) -> &'static str {
        match self {
            PrebuildState::Running => "running",
            PrebuildState::Ready => "ready",
            PrebuildState::Failed => "failed",
            PrebuildState::Removed => "removed",
        }
    }

    pub fn parse(s: &str) -> Option<PrebuildState> {
        Some(match s {
            "running" => PrebuildState::Running,
            "ready" => PrebuildState::Ready,
            "failed" => PrebuildState::Failed,
            "removed" => PrebuildState::Removed,
            _ => return None,
        })
    }
}

/// What started a prebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrebuildTrigger {
    /// The ref moved (the server's poll of the repository, or a push webhook).
    Push,
    /// Someone asked (`warren project prebuild`).
    Manual,
    /// The ref's newest prebuild was older than the project's schedule allows (its
    /// dependencies and base image move without a push).
    Schedule,
}

impl PrebuildTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            PrebuildTrigger::Push => "push",
            PrebuildTrigger::Manual => "manual",
            PrebuildTrigger::Schedule => "schedule",
        }
    }

    pub fn parse(s: &str) -> Option<PrebuildTrigger> {
        Some(match s {
            "push" => PrebuildTrigger::Push,
            "manual" => PrebuildTrigger::Manual,
            "schedule" => PrebuildTrigger::Schedule,
            _ => return None,
        })
    }
}

/// One prebuild of a project (`GET /api/v1/projects/{p}/prebuilds`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Prebuild {
    pub id: i64,
    pub project: String,
    pub agent: String,
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub commit: String,
    pub state: PrebuildState,
    pub trigger: PrebuildTrigger,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The end of its startup's output, kept when it finished (its workspace is stopped then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Workspaces created from it.
    pub used: i64,
    /// The space its volumes and snapshots take on its agent, as the agent last measured it
    /// (none before it is kept, once it is removed, or where the runtime cannot tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// The warm pool's workspaces made from it that wait, stopped, for someone to take them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_ready: Option<u32>,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}

/// The most refs a project prebuilds besides its default ref (each is polled and keeps its
/// own snapshots).
pub const MAX_PREBUILD_REFS: usize = 10;

/// The longest schedule: a month.
pub const MAX_PREBUILD_EVERY_HOURS: u32 = 24 * 31;

/// The largest warm pool a project keeps.
pub const MAX_PREBUILD_POOL: u32 = 20;

/// `PUT /api/v1/projects/{p}/prebuilds/settings`: prebuilds of the project's default ref and
/// of `refs`, on `agent` (the only agent when absent), of each new commit and, with
/// `every_hours`, again whenever a ref's newest prebuild is older than that; with `pool`, a
/// warm pool of that many workspaces. Replaces what was set before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPrebuildsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Branches (or other refs) prebuilt besides the default ref.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_hours: Option<u32>,
    /// A warm pool: this many stopped workspaces made from the default ref's newest
    /// prebuild, handed to the next users who create one of that ref (none when absent or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<u32>,
}

/// `POST /api/v1/projects/{p}/prebuilds`: a prebuild of `ref` (the default ref when absent)
/// now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPrebuildRequest {
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
}
