//! Exceptions to a workspace container's confinement: the Linux capabilities and the security
//! options a definition may ask for (a dev container's `capAdd`, `securityOpt`, `runArgs`),
//! which a workspace gets only when its agent's admin allows that very value
//! (`security.allowed_capabilities`, `security.allowed_security_options`).
//!
//! The names are read the way Docker and Podman read them (`CAP_SYS_PTRACE` or `sys_ptrace`,
//! `seccomp=unconfined` or the older `seccomp:unconfined`), and always written in one form, so
//! an admin's allow-list and a definition's request compare as equals.

use std::fmt;

/// The Linux capabilities (`capabilities(7)`), without their `CAP_` prefix.
pub const CAPABILITIES: &[&str] = &[
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "BPF",
    "CHECKPOINT_RESTORE",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "PERFMON",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYSLOG",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "WAKE_ALARM",
];

/// `name` as a capability of [`CAPABILITIES`] (case and a `CAP_` prefix do not matter), or why
/// it is not one. `ALL` is refused: an exception names one capability.
pub fn capability(name: &str) -> Result<&'static str, String> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if bare == "ALL" {
        return Err(
            "`ALL` is every capability, as good as a privileged container; name each one".into(),
        );
    }
    CAPABILITIES
        .iter()
        .find(|c| **c == bare)
        .copied()
        .ok_or_else(|| format!("{name:?} is not a Linux capability (capabilities(7))"))
}

/// A security option a container may run with instead of the engine's default confinement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecurityOption {
    /// No seccomp filter: every system call (a debugger's `personality`, `perf_event_open`).
    SeccompUnconfined,
    /// No AppArmor profile.
    ApparmorUnconfined,
}

/// The options [`SecurityOption::parse`] accepts, as said in messages.
pub const SECURITY_OPTIONS: &str = "seccomp=unconfined, apparmor=unconfined";

impl SecurityOption {
    /// `seccomp=unconfined` (or `seccomp:unconfined`), `apparmor=unconfined`; anything else
    /// (a profile file of the user's machine, SELinux labels, `no-new-privileges:false`) is
    /// refused with the reason.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (key, value) = t
            .split_once('=')
            .or_else(|| t.split_once(':'))
            .ok_or_else(|| format!("{s:?} is not a security option (key=value)"))?;
        match (key.to_ascii_lowercase().as_str(), value) {
            ("seccomp", "unconfined") => Ok(SecurityOption::SeccompUnconfined),
            ("apparmor", "unconfined") => Ok(SecurityOption::ApparmorUnconfined),
            ("seccomp" | "apparmor", _) => Err(format!(
                "{s:?} names a profile file of the machine the engine runs on, which a workspace cannot bring; only {SECURITY_OPTIONS} may be allowed"
            )),
            ("no-new-privileges", _) => Err(format!(
                "{s:?}: workspaces always run with no-new-privileges, so a set-user-id program cannot gain the rights of another user"
            )),
            ("label", _) => Err(format!(
                "{s:?}: SELinux labels are the engine's to give, so that one tenant's files stay out of another's reach"
            )),
            _ => Err(format!(
                "{s:?} is not a security option Warren can give a workspace; only {SECURITY_OPTIONS} may be allowed"
            )),
        }
    }

    /// The engine's spelling (`docker run --security-opt`).
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityOption::SeccompUnconfined => "seccomp=unconfined",
            SecurityOption::ApparmorUnconfined => "apparmor=unconfined",
        }
    }
}

impl fmt::Display for SecurityOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_as_the_engines_read_them() {
        assert_eq!(capability("SYS_PTRACE"), Ok("SYS_PTRACE"));
        assert_eq!(capability("cap_sys_ptrace"), Ok("SYS_PTRACE"));
        assert_eq!(capability(" CAP_NET_ADMIN "), Ok("NET_ADMIN"));
        let all = capability("ALL").unwrap_err();
        assert!(all.contains("name each one"), "{all}");
        let bad = capability("SYS_PTRACE; rm -rf /").unwrap_err();
        assert!(bad.contains("not a Linux capability"), "{bad}");
    }

    #[test]
    fn only_the_unconfined_options_are_security_options() {
        use SecurityOption::*;
        assert_eq!(
            SecurityOption::parse("seccomp=unconfined"),
            Ok(SeccompUnconfined)
        );
        assert_eq!(
            SecurityOption::parse("seccomp:unconfined"),
            Ok(SeccompUnconfined)
        );
        assert_eq!(
            SecurityOption::parse("apparmor=unconfined"),
            Ok(ApparmorUnconfined)
        );
        for (s, why) in [
            ("seccomp=/etc/profile.json", "profile file"),
            ("label=disable", "SELinux"),
            ("no-new-privileges:false", "no-new-privileges"),
            ("systempaths=unconfined", "not a security option Warren"),
            ("unconfined", "key=value"),
        ] {
            let e = SecurityOption::parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
        assert_eq!(SeccompUnconfined.to_string(), "seccomp=unconfined");
    }
}
