//! Issue 19's third reliability pass, output side: a stdout that cannot be
//! written, products of user numbers that overflow, numbers out of range,
//! run ids that are not one folder name, and control characters in messages.
//! Each test failed before its fix.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn toy(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID").env("GGML_NO_BACKTRACE", "1").current_dir(dir);
    c
}

fn run(dir: &Path, args: &[&str]) -> Output {
    toy(dir).args(args).output().unwrap()
}

/// One line on stderr, exit `code`, no panic, no ggml internals; the line contains `needle`.
fn one_line(o: &Output, code: i32, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(!err.contains("panicked") && !err.contains("new_tensor") && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    err
}

/// A trained smoke run in `dir/R`.
fn trained(dir: &Path) {
    let o = run(dir, &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--log-every", "1000", "--out", "R"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Class: a failed write to stdout (a full disk) is one line and exit 1 in
/// every command that prints a result (help and version too), never a panic;
/// a closed pipe ends it quietly.
#[test]
fn stdout_write_error_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    trained(dir.path());
    std::fs::write(dir.path().join("c.txt"), "hello world, a tiny corpus for prep. ".repeat(40)).unwrap();
    let cases: &[&[&str]] = &[
        &["describe", "R"],
        &["describe", "R", "--json"],
        &["devices"],
        &["devices", "--json"],
        &["generate", "R", "-n", "2", "--threads", "1"],
        &["generate", "R", "-n", "2", "--threads", "1", "--json"],
        &["eval", "R", "--corpus", "c.txt", "--threads", "1", "--max-windows", "1"],
        &["prep", "c.txt", "--vocab-size", "280", "--out", "P", "--json"],
        &["--help"],
        &["train", "--help"],
        &["--version"],
    ];
    for args in cases {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let o = toy(dir.path()).args(*args).stdout(Stdio::from(full)).output().unwrap();
        one_line(&o, 1, "stdout");
    }
    // A closed pipe: no message at all.
    let mut child = toy(dir.path()).args(["describe", "R"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Class: products and sums of user numbers (batch × context, warmup + steps)
/// are checked, refused in one line naming the flags, never wrapped.
#[test]
fn batch_times_context_overflow_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let huge = "4611686018427387904";
    let o = run(dir.path(), &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--batch", huge, "--out", "R"]);
    one_line(&o, 2, "--batch");
    assert!(!dir.path().join("R").exists());
    let o = run(dir.path(), &["debug", "bench", "--preset", "smoke", "--threads", "1", "--batch", huge]);
    one_line(&o, 2, "--batch");
    let o = run(dir.path(), &["debug", "bench", "--preset", "smoke", "--threads", "1", "--steps", &usize::MAX.to_string()]);
    one_line(&o, 2, "--steps");
}

/// Class: a numeric flag or toy.toml value out of range is one line naming
/// it, exit 2 (was "out-of-range value for u64 type", exit 1).
#[test]
fn numeric_flags_out_of_range_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--keep", "--threads", "--eval-every", "--layers"] {
        let o = run(dir.path(), &["train", "--preset", "smoke", "--steps", "1", "--out", "R", flag, "9223372036854775808"]);
        one_line(&o, 2, flag);
    }
    std::fs::write(dir.path().join("toy.toml"), "[train]\nsteps = 1\nkeep = -1\n").unwrap();
    let o = run(dir.path(), &["train", "--preset", "smoke", "--threads", "1", "--out", "R"]);
    one_line(&o, 2, "keep");
    assert!(!dir.path().join("R").exists());
}

/// Class: a user string that becomes a path component (TOY_RUN_ID) must be one
/// plain folder name: `.` wrote the run straight into `runs/`.
#[test]
fn run_id_must_be_one_folder_name() {
    let dir = tempfile::tempdir().unwrap();
    for id in [".", "..", "a/b", "-x", "a\nb", "./"] {
        let o =
            toy(dir.path()).args(["train", "--preset", "smoke", "--steps", "1", "--threads", "1"]).env("TOY_RUN_ID", id).output().unwrap();
        one_line(&o, 2, "TOY_RUN_ID");
    }
    let not_utf8 = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"run\xff");
    let o = toy(dir.path())
        .args(["train", "--preset", "smoke", "--steps", "1", "--threads", "1"])
        .env("TOY_RUN_ID", not_utf8)
        .output()
        .unwrap();
    one_line(&o, 2, "TOY_RUN_ID");
    assert!(!dir.path().join("runs/config.toml").exists());
}

/// Class: paths in messages: a newline or an escape sequence in a path keeps
/// the error one line and never reaches the terminal raw.
#[test]
fn error_paths_with_control_characters_stay_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = "no\nsuch\x1b[31mfile";
    for args in [
        vec!["describe", bad],
        vec!["generate", bad, "-n", "1"],
        vec!["eval", bad, "--corpus", bad],
        vec!["train", "--preset", "smoke", "--steps", "1", "--corpus", bad],
        vec!["prep", bad, "--out", "P"],
    ] {
        let o = run(dir.path(), &args);
        one_line(&o, 2, "such");
    }
}

/// flow.json names what the caller writes as inputs (tokens and targets read
/// "output": a view of them is kept for after compute), the weights, the loss.
#[test]
fn flow_json_roles() {
    let dir = tempfile::tempdir().unwrap();
    trained(dir.path());
    let flow: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("R/flow.json")).unwrap()).unwrap();
    let role = |name: &str| {
        let n = flow["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no {name} in flow.json"));
        n["role"].as_str().unwrap().to_string()
    };
    assert_eq!(role("tokens"), "input");
    assert_eq!(role("targets"), "input");
    assert_eq!(role("token_embd.weight"), "weight");
    let losses = flow["nodes"].as_array().unwrap().iter().filter(|n| n["role"] == "loss").count();
    assert_eq!(losses, 1);
}

/// `toy devices` counts the address-space limit as the CPU's free memory, as
/// the memory checks of train do (it showed the host's 23 GiB under `ulimit -v`).
#[test]
#[cfg(target_os = "linux")]
fn devices_count_the_address_space_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!("ulimit -v 2000000 && exec '{}' devices --json", env!("CARGO_BIN_EXE_toy"));
    let o = Command::new("sh").args(["-c", &cmd]).current_dir(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpu = v["devices"].as_array().unwrap().iter().find(|d| d["kind"] == "cpu").unwrap().clone();
    assert!(cpu["memory_free"].as_u64().unwrap() < 2_000_000 << 10, "{cpu}");
}
