//! Helpers for tests that run the `toy` binary: outcomes, and waiting on a
//! run's `events.jsonl` (never on fixed sleeps alone).

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Start `toy ARGS` in `dir` (without the caller's `TOY_RUN_ID`), its stdout
/// and stderr piped, for a test that acts on it while it runs.
pub fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(args)
        .current_dir(dir)
        .env_remove("TOY_RUN_ID")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Run `toy ARGS` in `dir` (without the caller's `TOY_RUN_ID`) and wait for it.
pub fn toy(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toy")).args(args).current_dir(dir).env_remove("TOY_RUN_ID").output().unwrap()
}

/// Exit 2 with one line `toy CMD: ...` on stderr that contains `needle`, no panic.
pub fn fails(o: &Output, cmd: &str, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "toy {cmd}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with(&format!("toy {cmd}: ")) && !err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
}

/// Exit 0, or the stderr in the failure.
pub fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// One line on stderr containing `needle`, exit `code`, no panic and no ggml
/// internals; returns the line.
pub fn fails_with(o: &Output, code: i32, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle) && !err.contains("panicked") && !err.contains("ggml_"), "{err:?} lacks {needle:?}");
    err
}

/// How many events of `kind` the run in `run` has written.
pub fn count(run: &Path, kind: &str) -> usize {
    std::fs::read_to_string(run.join("events.jsonl")).map(|t| t.matches(&format!("\"kind\":\"{kind}\"")).count()).unwrap_or(0)
}

/// Wait until `run` has `n` events of `kind`, while `child` still runs (2 minutes at most).
pub fn wait_for(run: &Path, kind: &str, n: usize, child: &mut Child) {
    let t0 = Instant::now();
    while count(run, kind) < n {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before {n} {kind} events");
        assert!(t0.elapsed() < Duration::from_secs(120), "timed out waiting for {kind}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Start `toy ARGS --out RUN` in `dir`, send `sig` once the run has written its
/// first event of `kind`, and wait for it: its output and its stderr.
pub fn signal_at(dir: &Path, args: &[&str], run: &str, kind: &str, sig: &str) -> (Output, String) {
    let mut child = spawn(dir, &[args, &["--out", run]].concat());
    wait_for(&dir.join(run), kind, 1, &mut child);
    signal(&child, sig);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// Send `sig` (`-INT`, `-KILL`, ...) to `child`.
pub fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill").args([sig, &child.id().to_string()]).status();
}
