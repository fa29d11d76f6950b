//! Desired and actual workspace states (lifecycle.md).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the user or a policy asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum DesiredState {
    Running,
    Stopped,
    Terminated,
    RestartRequested,
}

impl DesiredState {
    pub const ALL: [DesiredState; 4] = [
        DesiredState::Running,
        DesiredState::Stopped,
        DesiredState::Terminated,
        DesiredState::RestartRequested,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DesiredState::Running => "Running",
            DesiredState::Stopped => "Stopped",
            DesiredState::Terminated => "Terminated",
            DesiredState::RestartRequested => "RestartRequested",
        }
    }

    /// Replicas the rendered Deployment carries for this desired state; `None` means
    /// "delete everything" (lifecycle.md, desired-state rules).
    pub fn replicas(self) -> Option<i32> {
        match self {
            DesiredState::Running => Some(1),
            DesiredState::Stopped | DesiredState::RestartRequested => Some(0),
            DesiredState::Terminated => None,
        }
    }
}

/// What the runtime has, as derived by the server from the agent's reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ActualState {
    CreationRequested,
    Starting,
    Running,
    Stopping,
    Stopped,
    Terminating,
    Terminated,
    Failed,
    Error,
    Unknown,
}

impl ActualState {
    pub const ALL: [ActualState; 10] = [
        ActualState::CreationRequested,
        ActualState::Starting,
        ActualState::Running,
        ActualState::Stopping,
        ActualState::Stopped,
        ActualState::Terminating,
        ActualState::Terminated,
        ActualState::Failed,
        ActualState::Error,
        ActualState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActualState::CreationRequested => "CreationRequested",
            ActualState::Starting => "Starting",
            ActualState::Running => "Running",
            ActualState::Stopping => "Stopping",
            ActualState::Stopped => "Stopped",
            ActualState::Terminating => "Terminating",
            ActualState::Terminated => "Terminated",
            ActualState::Failed => "Failed",
            ActualState::Error => "Error",
            ActualState::Unknown => "Unknown",
        }
    }
}

/// A state name that is not one of the known states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {given:?}; expected one of {expected}")]
pub struct UnknownState {
    pub given: String,
    pub expected: &'static str,
}

impl FromStr for DesiredState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DesiredState::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownState {
                given: s.to_owned(),
                expected: "Running, Stopped, Terminated, RestartRequested",
            })
    }
}

impl FromStr for ActualState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ActualState::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownState {
                given: s.to_owned(),
                expected: "CreationRequested, Starting, Running, Stopping, Stopped, \
                           Terminating, Terminated, Failed, Error, Unknown",
            })
    }
}

impl fmt::Display for DesiredState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ActualState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DesiredState::ALL {
            assert_eq!(d.as_str().parse::<DesiredState>().unwrap(), d);
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{d}\""));
        }
        for a in ActualState::ALL {
            assert_eq!(a.as_str().parse::<ActualState>().unwrap(), a);
        }
        let err = "running".parse::<DesiredState>().unwrap_err();
        assert!(err.to_string().contains("\"running\""), "{err}");
    }
}
