//! The lifecycle commands of a dev container: its stages in the specification's order, and a
//! command in any of the specification's three forms.

use std::collections::BTreeMap;

/// The lifecycle stages that run in the workspace, in the specification's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    OnCreate,
    UpdateContent,
    PostCreate,
    PostStart,
    /// Whenever a session attaches: a terminal or SSH shell opened, the editor started.
    PostAttach,
}

impl Stage {
    pub fn property(self) -> &'static str {
        match self {
            Stage::OnCreate => "onCreateCommand",
            Stage::UpdateContent => "updateContentCommand",
            Stage::PostCreate => "postCreateCommand",
            Stage::PostStart => "postStartCommand",
            Stage::PostAttach => "postAttachCommand",
        }
    }

    /// The stage a `waitFor` of `property` names: `Some(None)` for `initializeCommand` (which
    /// runs before any in the workspace), `None` for what is no stage a workspace waits for.
    pub fn waited_for(property: &str) -> Option<Option<Stage>> {
        match property {
            "initializeCommand" => Some(None),
            "onCreateCommand" => Some(Some(Stage::OnCreate)),
            "updateContentCommand" => Some(Some(Stage::UpdateContent)),
            "postCreateCommand" => Some(Some(Stage::PostCreate)),
            "postStartCommand" => Some(Some(Stage::PostStart)),
            _ => None,
        }
    }

    /// Whether the stage runs once per workspace (at its first start) rather than every start.
    pub fn once(self) -> bool {
        !matches!(self, Stage::PostStart | Stage::PostAttach)
    }
}

/// One lifecycle command in any of the specification's three forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// A string: run by a shell.
    Shell(String),
    /// An array: the program and its arguments, no shell.
    Exec(Vec<String>),
    /// An object: named commands (each a string or an array) run at the same time.
    Parallel(BTreeMap<String, Lifecycle>),
}
