//! `warren server` refuses bad configuration before binding anything, naming the problem.

use std::process::Command;
use warren_testkit::process::output_ok;

fn run(args: &[&str], home: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg("server")
        .args(args)
        .arg("--home")
        .arg(home)
        .env_remove("WARREN_DATABASE_URL")
        .output()
        .expect("run warren");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configuration_is_refused_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:0\"\ndatabse_url = \"x\"\n").unwrap();
    let (ok, err) = run(&["--config", cfg.to_str().unwrap()], dir.path());
    assert!(!ok);
    assert!(err.contains("unknown field `databse_url`"), "{err}");
    let (ok, err) = run(
        &["--listen", "127.0.0.1:0", "--database-url", "mysql://db/x"],
        dir.path(),
    );
    assert!(!ok);
    assert!(err.contains("database_url"), "{err}");
    let (ok, err) = run(
        &["--listen", "127.0.0.1:0", "--relay-secret", "short"],
        dir.path(),
    );
    assert!(!ok);
    assert!(err.contains("relay_secret"), "{err}");
    assert!(
        !dir.path().join("warren.db").exists(),
        "nothing opened before validation"
    );
}

/// `--relay-secret-file` (the form that keeps the secret out of the process list) is read
/// and validated like the value; a missing file is named. The relay takes the same flag.
#[test]
fn relay_secret_comes_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "too-short\n").unwrap();
    let (ok, err) = run(
        &[
            "--listen",
            "127.0.0.1:0",
            "--relay-secret-file",
            short.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!ok);
    assert!(err.contains("relay_secret: must be at least 32"), "{err}");
    let missing = dir.path().join("missing.secret");
    let (ok, err) = run(
        &[
            "--listen",
            "127.0.0.1:0",
            "--relay-secret-file",
            missing.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!ok);
    assert!(err.contains("missing.secret"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["relay", "--server-url", "http://127.0.0.1:9"])
        .arg("--relay-secret-file")
        .arg(&missing)
        .env_remove("WARREN_RELAY_SHARED_SECRET")
        .output()
        .expect("run warren relay");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.secret"), "{err}");
}

/// `--ssh-host-key-file` must hold a public key: a private key (an easy slip) or an empty
/// file is refused before anything is opened.
#[test]
fn ssh_host_key_file_must_hold_public_keys() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("host_key");
    std::fs::write(
        &private,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    .unwrap();
    let empty = dir.path().join("empty.pub");
    std::fs::write(&empty, "\n# nothing\n").unwrap();
    for (file, says) in [(&private, "ssh_host_keys"), (&empty, "holds no key")] {
        let (ok, err) = run(
            &[
                "--listen",
                "127.0.0.1:0",
                "--ssh-public-address",
                "ssh.example.com:2222",
                "--ssh-host-key-file",
                file.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(!ok);
        assert!(err.contains(says), "{err}");
    }
    assert!(!dir.path().join("warren.db").exists());
}

/// `warren proxy host-key` makes the key on first use and prints the same public line every
/// time: what `warren server --ssh-host-key-file` takes.
#[test]
fn proxy_host_key_prints_a_stable_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let print = || {
        let out = output_ok(
            Command::new(env!("CARGO_BIN_EXE_warren"))
                .args(["proxy", "host-key", "--state-dir"])
                .arg(dir.path()),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = print();
    assert!(
        first.starts_with("ssh-ed25519 ") && first.ends_with('\n'),
        "{first}"
    );
    assert_eq!(first.lines().count(), 1, "{first}");
    assert_eq!(print(), first, "the key is kept, not made anew");
    assert_eq!(
        warren_types::api::SshEndpoint::parse_host_key(first.trim()).unwrap(),
        first.trim()
    );
    assert!(dir.path().join("ssh_host_ed25519_key").exists());
}
