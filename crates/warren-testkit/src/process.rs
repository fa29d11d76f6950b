//! Test-only: running a program to its end and failing the test, with the program's own words,
//! when it does not succeed; reading a tar archive with the system's `tar`.

use std::process::{Command, Output};

/// Runs `command` to its end and answers its output. The test fails, naming the program, its
/// arguments and its stderr, when it cannot start or ends unsuccessfully; so a failing call says
/// why without every caller writing the same assertion.
#[track_caller]
pub fn output_ok(command: &mut Command) -> Output {
    let out = output(command);
    assert!(
        out.status.success(),
        "{} ({}): {}",
        describe(command),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`output_ok`]'s standard output as text.
#[track_caller]
pub fn stdout_ok(command: &mut Command) -> String {
    String::from_utf8_lossy(&output_ok(command).stdout).into_owned()
}

/// Runs `command` to its end whatever its status, failing the test only when it cannot start.
#[track_caller]
pub fn output(command: &mut Command) -> Output {
    match command.output() {
        Ok(out) => out,
        Err(e) => panic!("{} could not start: {e}", describe(command)),
    }
}

/// The names of the files (not directories) in tar archive `tar`, sorted, as the system's
/// `tar` lists them: a test of an archive reads it with the tool users have.
#[track_caller]
pub fn tar_names(tar: &[u8]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("archive.tar");
    std::fs::write(&path, tar).expect("writing the archive");
    let listed = stdout_ok(Command::new("tar").arg("-tf").arg(&path));
    let mut names: Vec<String> = listed
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// The program and its arguments, as a reader would type them.
fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}
