//! `capAdd`, `securityOpt` and `runArgs` (and a Compose service's `cap_add` and
//! `security_opt`): what a configuration asks beyond the confinement every workspace container
//! gets. Each value is read as the engines read it and carried in the devfile
//! ([`warren_devfile::ISOLATION_ATTRIBUTE`]); the workspace is made only when the agent's
//! admin allows every value, which the server checks when it renders it. `runArgs` are read
//! option by option: those with a property of their own become it, the rest are refused or
//! noticed by name.

use crate::{problem, unsupported, Notice, Problem};
use serde_json::Value;
use std::collections::BTreeMap;
use warren_devfile::IsolationExceptions;
use warren_types::isolation::{capability, SecurityOption};

/// Why an exception is asked for nothing: the admin's to give.
const ADMIN: &str = "given only when the agent's admin allows that value (`security.allowed_capabilities`, `security.allowed_security_options` of the agent's configuration); otherwise creating the workspace is refused with its name";

/// Why the options that reach past the workspace are refused.
const ISOLATION: &str =
    "it would reach past the workspace's isolation to the machine and the other tenants' workspaces";

/// What the readers of this module write to.
pub(crate) struct Out<'a> {
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'a mut Vec<Notice>,
    pub isolation: &'a mut IsolationExceptions,
}

impl Out<'_> {
    fn notice(&mut self, path: &str, message: impl Into<String>) {
        self.notices.push(Notice {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    /// One capability, `path` naming where it was.
    pub(crate) fn cap(&mut self, path: &str, name: &str) {
        match capability(name) {
            Ok(c) => {
                if !self.isolation.cap_add.iter().any(|x| x == c) {
                    self.isolation.cap_add.push(c.to_owned());
                    self.notice(path, format!("the capability {c} is {ADMIN}"));
                }
            }
            Err(e) => self.problems.push(problem(path, e)),
        }
    }

    /// One security option.
    pub(crate) fn option(&mut self, path: &str, value: &str) {
        match SecurityOption::parse(value) {
            Ok(o) => {
                if !self.isolation.security_opt.iter().any(|x| x == o.as_str()) {
                    self.isolation.security_opt.push(o.as_str().to_owned());
                    self.notice(path, format!("the security option {o} is {ADMIN}"));
                }
            }
            Err(e) => self.problems.push(unsupported(
                path,
                &format!("the security option {value:?}"),
                &e,
            )),
        }
    }

    /// `capAdd` or `securityOpt` (or a Compose `cap_add`, `security_opt`): an array of
    /// strings at `key`.
    pub(crate) fn list(&mut self, key: &str, v: &Value, cap: bool) {
        let Some(items) = v.as_array() else {
            self.problems
                .push(problem(key, "must be an array of strings".to_owned()));
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("{key}[{i}]");
            match item.as_str() {
                Some(s) if cap => self.cap(&path, s),
                Some(s) => self.option(&path, s),
                None => self.problems.push(problem(&path, "must be a string")),
            }
        }
    }
}

/// How a `docker run` option is taken.
enum Takes {
    /// Takes a value; what Warren does with it.
    Value(fn(&mut Out<'_>, &str, &str, &mut BTreeMap<String, String>)),
    /// A switch.
    Flag(fn(&mut Out<'_>, &str)),
}

/// `runArgs`: the options of `docker run`, each applied, noticed or refused by name.
/// `env` is the configuration's `containerEnv` (`-e NAME=VALUE` adds to it).
pub(crate) fn run_args(out: &mut Out<'_>, v: &Value, env: &mut BTreeMap<String, String>) {
    let Some(items) = v.as_array() else {
        out.problems
            .push(problem("runArgs", "must be an array of strings"));
        return;
    };
    let words: Vec<(String, Option<&str>)> = items
        .iter()
        .enumerate()
        .map(|(i, w)| (format!("runArgs[{i}]"), w.as_str()))
        .collect();
    let mut i = 0;
    while i < words.len() {
        let (path, word) = (&words[i].0, words[i].1);
        i += 1;
        let Some(word) = word else {
            out.problems.push(problem(path, "must be a string"));
            continue;
        };
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (word, None),
        };
        if !name.starts_with('-') || name == "-" || name == "--" {
            out.problems.push(problem(
                path,
                format!("{word:?} is not an option of `docker run` (`runArgs` holds options only: the image and command are the configuration's)"),
            ));
            continue;
        }
        match option(name) {
            Some(Takes::Flag(apply)) => {
                // `--init=false` and the like: a switch turned off asks for nothing.
                if inline.is_some_and(|v| v != "true") {
                    continue;
                }
                apply(out, path)
            }
            Some(Takes::Value(apply)) => {
                let value = match inline {
                    Some(v) => v,
                    None => match words.get(i) {
                        Some((_, Some(v))) => {
                            i += 1;
                            *v
                        }
                        _ => {
                            out.problems
                                .push(problem(path, format!("{name} needs a value")));
                            continue;
                        }
                    },
                };
                apply(out, path, value, env)
            }
            None => out.problems.push(unsupported(
                path,
                &format!("the `docker run` option {name}"),
                "Warren starts the container itself, on Podman, Docker or Kubernetes; say what it does with the configuration's own properties",
            )),
        }
    }
}

/// What Warren does with `docker run` option `name` (long or short form).
fn option(name: &str) -> Option<Takes> {
    use Takes::{Flag, Value as V};
    Some(match name {
        "--cap-add" => V(|out, path, v, _| out.cap(path, v)),
        "--security-opt" => V(|out, path, v, _| out.option(path, v)),
        "-e" | "--env" => V(env_option),
        "--cap-drop" => V(|out, path, _, _| {
            out.notice(
                path,
                "every capability is dropped from a workspace's containers already",
            )
        }),
        "--init" => Flag(|out, path| {
            out.notice(path, "Warren's workspace always runs an init process that reaps orphans and passes signals on")
        }),
        "-i" | "--interactive" | "-t" | "--tty" | "-it" | "-ti" | "--rm" | "-d" | "--detach" => {
            Flag(|out, path| {
                out.notice(path, "terminals are opened by `warren ws exec`, the web terminal and SSH, each with its own TTY; Warren manages the container's life")
            })
        }
        "--name" | "-l" | "--label" | "-h" | "--hostname" | "--log-driver" | "--log-opt"
        | "--pull" | "--platform" | "--restart" | "--stop-signal" | "--stop-timeout" => {
            V(|out, path, _, _| {
                out.notice(path, "the agent names, labels, logs and restarts every workspace's containers alike: not applied")
            })
        }
        "--shm-size" | "--ulimit" => V(|out, path, _, _| {
            out.notice(
                path,
                "the container gets the runtime's defaults: not applied",
            )
        }),
        "-m" | "--memory" | "--cpus" | "--memory-reservation" => V(|out, path, _, _| {
            out.notice(path, "not applied: say the workspace's size with `hostRequirements` (or `warren ws create --cpu/--memory`), within the agent's caps")
        }),
        "--privileged" => Flag(|out, path| {
            out.problems
                .push(unsupported(path, "a privileged container", ISOLATION))
        }),
        "-p" | "--publish" | "-P" | "--publish-all" | "--expose" => V(|out, path, _, _| {
            out.problems.push(unsupported(path, "publishing a port on the machine", "every port is reached on the workspace's own authenticated URLs; name it in `forwardPorts`"))
        }),
        "-u" | "--user" => V(|out, path, _, _| {
            out.problems.push(unsupported(path, "choosing the container's user", "Warren runs the container as the agent's unprivileged user (its `security.runAsUser`); `containerUser` and `remoteUser` say what happens to a user"))
        }),
        "-v" | "--volume" | "--mount" => V(|out, path, _, _| {
            out.problems.push(unsupported(
                path,
                "a mount given to `docker run`",
                "declare named volumes in `mounts`; folders of the machine are never mounted",
            ))
        }),
        "--env-file" => V(|out, path, _, _| {
            out.problems.push(unsupported(
                path,
                "`--env-file`",
                "it reads a file of the user's machine; give the variables in `containerEnv`",
            ))
        }),
        "-w" | "--workdir" => V(|out, path, _, _| {
            out.problems.push(unsupported(
                path,
                "`--workdir`",
                "say the folder with `workspaceFolder`",
            ))
        }),
        "--entrypoint" => V(|out, path, _, _| {
            out.problems.push(unsupported(path, "`--entrypoint`", "Warren starts the workspace's container with its own init; start a service from a lifecycle command"))
        }),
        "--gpus" => V(|out, path, _, _| {
            out.problems.push(unsupported(
                path,
                "`--gpus`",
                "a GPU comes with a machine class: ask for one with `\"hostRequirements\": {\"gpu\": true}` (or `warren ws create --class`)",
            ))
        }),
        "--network"
        | "--net"
        | "--pid"
        | "--ipc"
        | "--uts"
        | "--userns"
        | "--cgroupns"
        | "--device"
        | "--device-cgroup-rule"
        | "--sysctl"
        | "--runtime"
        | "--group-add"
        | "--cgroup-parent"
        | "--add-host"
        | "--dns"
        | "--tmpfs"
        | "--oom-kill-disable"
        | "--volumes-from"
        | "--link" => V(|out, path, _, _| {
            out.problems
                .push(unsupported(path, "this `docker run` option", ISOLATION))
        }),
        _ => return None,
    })
}

/// `-e NAME=VALUE` joins `containerEnv`; `-e NAME` (the value of the user's machine) is
/// refused, as the machine that makes the container is the agent.
fn env_option(out: &mut Out<'_>, path: &str, v: &str, env: &mut BTreeMap<String, String>) {
    match v.split_once('=') {
        Some((name, value)) => match warren_devfile::k8s::env_name_problem(name) {
            Some(why) => out.problems.push(problem(path, why)),
            None => {
                env.insert(name.to_owned(), value.to_owned());
            }
        },
        None => out.problems.push(unsupported(
            path,
            &format!("`-e {v}` without a value"),
            &format!("it passes the value of the user's own machine; write `\"containerEnv\": {{\"{v}\": \"${{localEnv:{v}}}\"}}`"),
        )),
    }
}
