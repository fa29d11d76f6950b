//! `warren ws ssh` (runs the system `ssh` against the proxy's SSH server) and `warren ws
//! ssh-config` (Host blocks for OpenSSH, VS Code Remote-SSH and JetBrains Gateway).
//!
//! `--write` keeps Warren's blocks in their own file, `~/.ssh/warren.config`, which
//! `~/.ssh/config` includes; the user's own file only ever gains that one `Include` line.

use crate::CliError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use warren_types::api::SshEndpoint;

/// The `ssh` program; `WARREN_SSH` overrides it (a wrapper, another client, tests).
pub const SSH_PROGRAM_ENV: &str = "WARREN_SSH";
/// Warren's own file next to the user's SSH config.
pub const WARREN_SSH_CONFIG: &str = "warren.config";
/// The prefix of every generated `Host` alias.
pub const HOST_PREFIX: &str = warren_types::api::SSH_HOST_PREFIX;
const HEADER: &str = "# Written by `warren ws ssh-config --write`; rerun it to update.\n\
# Connect with `ssh warren-<workspace>` (or pick the host in VS Code Remote-SSH).\n";
const INCLUDE_LINE: &str = "Include warren.config";
/// Warren's `known_hosts` file next to the user's: the host keys the server publishes.
pub const WARREN_KNOWN_HOSTS: &str = "warren_known_hosts";

/// The error for an installation without SSH.
pub fn no_ssh() -> CliError {
    CliError::Failed(
        "this Warren server offers no SSH (its administrator has not set ssh_public_address)"
            .into(),
    )
}

/// The arguments of `ssh` for a workspace: options first, then the destination and command.
pub fn ssh_args(
    endpoint: &SshEndpoint,
    workspace: &str,
    options: &[String],
    command: &[String],
) -> Vec<String> {
    let mut args = vec![
        "-p".to_owned(),
        endpoint.port.to_string(),
        "-l".to_owned(),
        workspace.to_owned(),
    ];
    for o in options {
        args.push("-o".into());
        args.push(o.clone());
    }
    args.push(endpoint.host.clone());
    args.extend(command.iter().cloned());
    args
}

/// Runs `ssh` in place of this process where the platform allows (so its terminal handling,
/// signals and exit code are exactly ssh's); elsewhere waits for it and returns its code.
pub fn exec_ssh(args: &[String]) -> Result<u8, CliError> {
    let program = std::env::var(SSH_PROGRAM_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ssh".into());
    let mut cmd = std::process::Command::new(&program);
    cmd.args(args);
    let missing = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::NotFound {
            CliError::Failed(format!(
                "`{program}` was not found; install an OpenSSH client (Debian/Ubuntu: \
                 openssh-client) or point {SSH_PROGRAM_ENV} at one"
            ))
        } else {
            CliError::Failed(format!("running `{program}`: {e}"))
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Only returns on failure.
        Err(missing(cmd.exec()))
    }
    #[cfg(not(unix))]
    {
        let status = cmd.status().map_err(missing)?;
        Ok(status
            .code()
            .map(|c| u8::try_from(c).unwrap_or(255))
            .unwrap_or(255))
    }
}

/// One `Host` block; with `known_hosts` (the file holding the pinned host keys), the host
/// key is checked against that file only.
pub fn host_block(endpoint: &SshEndpoint, workspace: &str, known_hosts: Option<&Path>) -> String {
    endpoint.host_block(workspace, known_hosts.map(quoted).as_deref())
}

/// The `ProxyCommand` that has OpenSSH reach `workspace` through this program's `ws
/// ssh-proxy`, which picks the door at connect time (the region's proxy, else the central
/// one). `program` is this executable; `warren_home` the `WARREN_HOME` in force, kept so the
/// command finds the same sign-in when an IDE runs ssh without it.
pub fn proxy_command(program: &Path, warren_home: Option<&Path>, workspace: &str) -> String {
    let mut line = String::new();
    if let Some(home) = warren_home {
        line.push_str(&format!(
            "env {}={} ",
            crate::credentials::HOME_ENV,
            shell_word(&home.display().to_string())
        ));
    }
    line.push_str(&format!(
        "{} ws ssh-proxy {} --host %h --port %p",
        shell_word(&program.display().to_string()),
        shell_word(workspace)
    ));
    line
}

/// [`proxy_command`] for this very program and the `WARREN_HOME` in force; `None` when the
/// program's own path cannot be known (ssh then connects to the door directly).
pub fn own_proxy_command(workspace: &str) -> Option<String> {
    let program = stable_program(std::env::current_exe().ok()?);
    // Absolute: an IDE runs ssh from a folder of its own.
    let home = std::env::var_os(crate::credentials::HOME_ENV)
        .filter(|h| !h.is_empty())
        .map(|h| std::path::absolute(PathBuf::from(&h)).unwrap_or_else(|_| PathBuf::from(h)));
    Some(proxy_command(&program, home.as_deref(), workspace))
}

/// The path to write for this program: the `PATH` entry that leads to it when there is one
/// (`/usr/local/bin/warren`, say), which outlives an upgrade, rather than the versioned file
/// a package manager's link resolves to (what the kernel reports as the executable).
fn stable_program(exe: PathBuf) -> PathBuf {
    let (Some(name), Some(path)) = (exe.file_name(), std::env::var_os("PATH")) else {
        return exe;
    };
    let real = std::fs::canonicalize(&exe).unwrap_or_else(|_| exe.clone());
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| std::fs::canonicalize(candidate).is_ok_and(|c| c == real))
        .unwrap_or(exe)
}

/// A host or workspace name that can stand in an SSH config line as it is: letters, digits
/// and `.-:_` (IPv6 addresses included), nothing that could end the line or start a comment.
pub fn plain_word(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:_".contains(c))
}

/// `word` as one shell word in a `ProxyCommand` (OpenSSH expands its own `%` tokens, so a
/// literal `%` is doubled, then runs the line with the user's `$SHELL -c`: POSIX quoting,
/// which sh, bash, zsh and dash read alike).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@,".contains(c));
    let quoted = if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    };
    quoted.replace('%', "%%")
}

/// The `ssh` options that pin the host key to `known_hosts`.
pub fn pin_options(known_hosts: &Path) -> Vec<String> {
    vec![
        format!("UserKnownHostsFile={}", quoted(known_hosts)),
        "StrictHostKeyChecking=yes".into(),
    ]
}

/// A path as OpenSSH reads it in an option (double quotes when it has spaces).
pub(crate) fn quoted(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars().any(char::is_whitespace) {
        format!("\"{s}\"")
    } else {
        s
    }
}

/// Records the host keys the server publishes for `endpoint` in `ssh_dir/warren_known_hosts`
/// (lines for other hosts are kept: another Warren installation's, say) and returns that
/// file; `None` when the server publishes no key (then OpenSSH asks on first use as usual).
pub fn pin_host_keys(ssh_dir: &Path, endpoint: &SshEndpoint) -> Result<Option<PathBuf>, CliError> {
    let lines = endpoint.known_hosts_lines();
    if lines.is_empty() {
        return Ok(None);
    }
    let io = |what: &str, p: &Path, e: std::io::Error| {
        CliError::Failed(format!("{what} {}: {e}", p.display()))
    };
    create_private_dir(ssh_dir).map_err(|e| io("creating", ssh_dir, e))?;
    let file = ssh_dir.join(WARREN_KNOWN_HOSTS);
    let old = read_or_empty(&file).map_err(|e| io("reading", &file, e))?;
    let ours: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut new: Vec<String> = old
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|host| !ours.contains(&host))
        })
        .map(str::to_owned)
        .collect();
    new.extend(lines);
    let text = new.join("\n") + "\n";
    if text != old {
        write_private(&file, &text).map_err(|e| io("writing", &file, e))?;
    }
    Ok(Some(file))
}

/// The blocks of a `warren.config` by workspace name (anything else in the file is dropped:
/// the file is Warren's).
pub fn parse_blocks(text: &str) -> BTreeMap<String, String> {
    let mut blocks = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let host = trimmed
            .strip_prefix("Host ")
            .map(str::trim)
            .and_then(|h| h.strip_prefix(HOST_PREFIX));
        if let Some(name) = host {
            if let Some((n, b)) = current.take() {
                blocks.insert(n, b);
            }
            current = Some((name.to_owned(), format!("{line}\n")));
        } else if let Some((_, b)) = current.as_mut() {
            if !trimmed.is_empty() && !trimmed.starts_with('#') {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    if let Some((n, b)) = current {
        blocks.insert(n, b);
    }
    blocks
}

/// The whole `warren.config` for these blocks.
pub fn render_file(blocks: &BTreeMap<String, String>) -> String {
    let mut out = HEADER.to_owned();
    for b in blocks.values() {
        out.push('\n');
        out.push_str(b);
    }
    out
}

/// `~/.ssh/config` with the `Include` of Warren's file at its top (where it applies to every
/// host; an `Include` after a `Host` line would belong to that block). `None`: already there.
pub fn with_include(config: &str) -> Option<String> {
    let present = config.lines().any(|l| {
        let mut words = l.split_whitespace();
        words
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case("include"))
            && words.any(|w| {
                w == WARREN_SSH_CONFIG
                    || w == format!("~/.ssh/{WARREN_SSH_CONFIG}")
                    || w.ends_with(&format!("/.ssh/{WARREN_SSH_CONFIG}"))
            })
    });
    if present {
        return None;
    }
    let mut out = format!("# Added by `warren ws ssh-config --write`.\n{INCLUDE_LINE}\n");
    if !config.is_empty() {
        out.push('\n');
        out.push_str(config);
    }
    Some(out)
}

/// What `--write` did.
#[derive(Debug, PartialEq, Eq)]
pub struct Written {
    pub file: PathBuf,
    pub changed: bool,
    pub include_added: bool,
}

/// Writes `blocks` into `ssh_dir/warren.config` (merged with the blocks already there unless
/// `replace_all`) and makes `ssh_dir/config` include it. Running it twice changes nothing.
pub fn write_config(
    ssh_dir: &Path,
    blocks: BTreeMap<String, String>,
    replace_all: bool,
) -> Result<Written, CliError> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        CliError::Failed(format!("{what} {}: {e}", p.display()))
    };
    create_private_dir(ssh_dir).map_err(|e| io("creating", ssh_dir, e))?;
    let file = ssh_dir.join(WARREN_SSH_CONFIG);
    let old = read_or_empty(&file).map_err(|e| io("reading", &file, e))?;
    let mut merged = if replace_all {
        BTreeMap::new()
    } else {
        parse_blocks(&old)
    };
    merged.extend(blocks);
    let new = render_file(&merged);
    let changed = new != old;
    if changed {
        write_private(&file, &new).map_err(|e| io("writing", &file, e))?;
    }
    let config = ssh_dir.join("config");
    let current = read_or_empty(&config).map_err(|e| io("reading", &config, e))?;
    let include_added = match with_include(&current) {
        Some(updated) => {
            write_private(&config, &updated).map_err(|e| io("writing", &config, e))?;
            true
        }
        None => false,
    };
    Ok(Written {
        file,
        changed,
        include_added,
    })
}

fn read_or_empty(p: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(p) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Replaces `path` with `text` through a temporary file (OpenSSH refuses a config that
/// others may write; a crash never leaves half a file). An existing file keeps its mode.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("warren-tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o644)
            .unwrap_or(0o600);
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `~/.ssh`.
pub fn default_ssh_dir() -> Result<PathBuf, CliError> {
    dirs::home_dir()
        .map(|h| h.join(".ssh"))
        .ok_or_else(|| CliError::Failed("cannot find your home directory for ~/.ssh".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> SshEndpoint {
        SshEndpoint {
            host: "ssh.example.com".into(),
            port: 2222,
            host_keys: vec![],
        }
    }

    #[test]
    fn ssh_arguments_put_the_command_after_the_host() {
        let a = ssh_args(
            &ep(),
            "dev",
            &["StrictHostKeyChecking=yes".into()],
            &["ls".into(), "-la".into()],
        );
        assert_eq!(
            a,
            [
                "-p",
                "2222",
                "-l",
                "dev",
                "-o",
                "StrictHostKeyChecking=yes",
                "ssh.example.com",
                "ls",
                "-la"
            ]
        );
    }

    #[test]
    fn only_plain_words_go_into_a_config() {
        for ok in ["dev", "ssh.example.com", "::1", "10.0.0.1", "a_b-c"] {
            assert!(plain_word(ok), "{ok}");
        }
        for bad in ["", "dev\n    ProxyCommand sh", "a b", "a#b", "a\"b", "%h"] {
            assert!(!plain_word(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_proxy_command_is_one_shell_command_whatever_the_paths() {
        assert_eq!(
            proxy_command(Path::new("/usr/bin/warren"), None, "dev"),
            "/usr/bin/warren ws ssh-proxy dev --host %h --port %p"
        );
        assert_eq!(
            proxy_command(
                Path::new("/opt/my tools/it's 100%/warren"),
                Some(Path::new("/home/a b/.warren")),
                "dev"
            ),
            "env WARREN_HOME='/home/a b/.warren' '/opt/my tools/it'\\''s 100%%/warren' ws \
             ssh-proxy dev --host %h --port %p"
        );
        // What sh makes of it, once OpenSSH has undone the doubled `%`.
        let line =
            proxy_command(Path::new("/x/it's; rm -rf ~/$HOME"), None, "dev").replace("%%", "%");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf '%s\\n' {line}")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "/x/it's; rm -rf ~/$HOME\nws\nssh-proxy\ndev\n--host\n%h\n--port\n%p\n"
        );
    }

    #[test]
    fn blocks_round_trip_and_the_include_is_added_once() {
        let mut blocks = BTreeMap::new();
        blocks.insert("b".to_owned(), host_block(&ep(), "b", None));
        blocks.insert("a".to_owned(), host_block(&ep(), "a", None));
        let text = render_file(&blocks);
        assert!(text
            .contains("Host warren-a\n    HostName ssh.example.com\n    Port 2222\n    User a\n"));
        assert_eq!(parse_blocks(&text), blocks);

        let user = "Host github.com\n    User git\n";
        let with = with_include(user).unwrap();
        assert!(with.starts_with("# Added by"));
        assert!(with.contains("Include warren.config\n"));
        assert!(with.ends_with(user));
        assert_eq!(with_include(&with), None);
        assert_eq!(with_include("Include ~/.ssh/warren.config\n"), None);
        assert!(with_include("").is_some());
    }

    #[test]
    fn published_host_keys_are_pinned_per_host_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ssh = dir.path().join(".ssh");
        assert_eq!(
            pin_host_keys(&ssh, &ep()).unwrap(),
            None,
            "nothing published"
        );
        let key = |k: &str| format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{k}");
        let mut e = ep();
        e.host_keys = vec![key("one")];
        let mut other = ep();
        other.port = 22;
        other.host = "other.example.com".into();
        other.host_keys = vec![key("other")];
        pin_host_keys(&ssh, &other).unwrap();
        let file = pin_host_keys(&ssh, &e).unwrap().unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            format!(
                "other.example.com {}\n[ssh.example.com]:2222 {}\n",
                key("other"),
                key("one")
            )
        );
        // A new key replaces this host's line only.
        e.host_keys = vec![key("two")];
        pin_host_keys(&ssh, &e).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains(&key("one")) && text.contains(&key("two")));
        assert!(text.contains(&key("other")));
        let block = host_block(&e, "dev", Some(&file));
        assert!(block.ends_with(&format!(
            "    UserKnownHostsFile {}\n    StrictHostKeyChecking yes\n",
            file.display()
        )));
        assert_eq!(
            pin_options(Path::new("/a b/k")),
            ["UserKnownHostsFile=\"/a b/k\"", "StrictHostKeyChecking=yes"]
        );
    }

    #[test]
    fn write_is_idempotent_merges_and_keeps_the_users_config() {
        let dir = tempfile::tempdir().unwrap();
        let ssh = dir.path().join(".ssh");
        std::fs::create_dir(&ssh).unwrap();
        std::fs::write(ssh.join("config"), "Host x\n    User y\n").unwrap();
        let one = |n: &str| {
            let mut m = BTreeMap::new();
            m.insert(n.to_owned(), host_block(&ep(), n, None));
            m
        };
        let w = write_config(&ssh, one("a"), false).unwrap();
        assert!(w.changed && w.include_added);
        let config = std::fs::read_to_string(ssh.join("config")).unwrap();
        let file = std::fs::read_to_string(ssh.join("warren.config")).unwrap();

        let again = write_config(&ssh, one("a"), false).unwrap();
        assert!(!again.changed && !again.include_added);
        assert_eq!(std::fs::read_to_string(ssh.join("config")).unwrap(), config);
        assert_eq!(
            std::fs::read_to_string(ssh.join("warren.config")).unwrap(),
            file
        );
        assert!(config.ends_with("Host x\n    User y\n"));

        write_config(&ssh, one("b"), false).unwrap();
        let both = std::fs::read_to_string(ssh.join("warren.config")).unwrap();
        assert!(both.contains("Host warren-a\n") && both.contains("Host warren-b\n"));
        write_config(&ssh, one("b"), true).unwrap();
        let only_b = std::fs::read_to_string(ssh.join("warren.config")).unwrap();
        assert!(!only_b.contains("Host warren-a\n") && only_b.contains("Host warren-b\n"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(ssh.join("warren.config"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
    }
}
