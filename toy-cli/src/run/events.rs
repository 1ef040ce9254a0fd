//! `events.jsonl`: one JSON object per line, schema `toy/v1`, append-only but
//! for a resume, which first drops what was logged after its step ([`purge_after`]).
//!
//! Kinds written (the training loop's [`Event`]s): `run_start`, `step`, `skip`, `eval`,
//! `checkpoint`, `epoch`, `fallback`, `resume`, `run_end`. Readers skip torn lines and ignore keys
//! they do not know ([`read_events`] does both).

use crate::error::{input, runtime, Result};
use crate::train::events::Event;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The schema name written in `run_start`.
pub const SCHEMA: &str = "toy/v1";

/// An open event log.
pub struct EventLog {
    path: PathBuf,
    file: std::fs::File,
    t0: Instant,
}

/// Seconds since the Unix epoch, with milliseconds.
pub fn unix_time() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The current time as RFC 3339 (UTC).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl EventLog {
    /// Open (creating or appending to) the log at `path`, never through a
    /// link planted at its name. A torn last line (a crash in the middle of
    /// writing it) is cut off first, so the next event starts a line.
    pub fn open(path: &Path) -> Result<EventLog> {
        let file = crate::files::no_follow(std::fs::OpenOptions::new().read(true).create(true).append(true))
            .open(path)
            .map_err(|e| crate::files::open_error(path, e))?;
        cut_torn_line(&file).map_err(|e| runtime(format!("cannot repair the torn last line of {}: {e}", path.display())))?;
        Ok(EventLog { path: path.to_path_buf(), file, t0: Instant::now() })
    }

    /// Append `event`: its `kind` and `t` (seconds since the log was opened)
    /// first, then its fields.
    pub fn emit(&mut self, event: &Event) -> Result<()> {
        let mut obj = Map::new();
        obj.insert("kind".into(), json!(event.kind()));
        obj.insert("t".into(), json!((self.t0.elapsed().as_secs_f64() * 1e3).round() / 1e3));
        // Through a `Value`, as `json!` wrote them: an f32 is written as the f64 it widens to.
        if let Value::Object(m) = serde_json::to_value(event).map_err(|e| runtime(e.to_string()))? {
            obj.extend(m);
        }
        let mut line = serde_json::to_string(&Value::Object(obj)).map_err(|e| runtime(e.to_string()))?;
        line.push('\n');
        // One write per line, so a crash leaves at most one torn line at the end;
        // a second Ctrl-C does not cut it.
        let _section = crate::signals::critical();
        self.file.write_all(line.as_bytes()).map_err(|e| runtime(format!("cannot write {}: {e}", self.path.display())))
    }
}

/// Cut `file` after its last `\n` (searched in its last MiB; past that, end
/// the torn line with one instead).
fn cut_torn_line(file: &std::fs::File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let tail_len = len.min(1 << 20);
    let mut tail = Vec::with_capacity(tail_len as usize);
    let mut f = file;
    f.seek(SeekFrom::Start(len - tail_len))?;
    f.take(tail_len).read_to_end(&mut tail)?;
    match tail.iter().rposition(|&b| b == b'\n') {
        Some(i) if i + 1 == tail.len() => Ok(()),
        Some(i) => file.set_len(len - tail_len + i as u64 + 1),
        None if tail_len == len => file.set_len(0),
        None => f.write_all(b"\n"),
    }
}

/// Drop from the log at `path` what a run logged after step `step`, as
/// TensorBoard's `purge_step` does: a run resumed from that step's checkpoint
/// takes the later steps again (a killed run logged them past its last save),
/// and each step is to appear once, in order. The log is cut at its first
/// record that belongs after `step` ([`Mark`]); everything before it stays,
/// whatever its kind. Each earlier `resume` record's cut is made too, so that
/// a log an older build wrote with repeated steps comes out in order. Only
/// whole lines are kept (a torn last line goes, as [`EventLog::open`] cuts
/// it); the log is rewritten (temporary file, rename) only when lines go.
pub fn purge_after(path: &Path, step: u64) -> Result<()> {
    let all = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(input(format!("cannot read {}: {e}", path.display()))),
    };
    // The torn last line of a killed writer goes whatever its bytes (a cut
    // can split a character); the whole lines must be text.
    let bytes = &all[..all.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
    let whole = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        input(format!("{}: line {line} is not UTF-8 text (a damaged log): remove or mend that line", path.display()))
    })?;
    let mut kept: Vec<(&str, Mark)> = Vec::new();
    for line in whole.split_inclusive('\n') {
        let mark = Mark::of(line);
        if let Mark::Resume(from) = mark {
            cut_after(&mut kept, from);
        }
        kept.push((line, mark));
    }
    cut_after(&mut kept, step);
    let out: String = kept.iter().map(|(line, _)| *line).collect();
    if out.len() == all.len() {
        return Ok(());
    }
    crate::files::write_atomic(path, out.as_bytes())
}

/// Where a record of the log stands among the steps of its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// A record of step N (`step`, `skip`, `eval`, `epoch`, `checkpoint`),
    /// or a `run_end` whose last step was N.
    At(u64),
    /// A `resume` from step N.
    Resume(u64),
    /// No step: `run_start`, `fallback`, or a line that does not parse.
    None,
}

impl Mark {
    fn of(line: &str) -> Mark {
        let Ok(v) = serde_json::from_str::<Value>(line) else { return Mark::None };
        let num = |key: &str| v.get(key).and_then(Value::as_u64);
        match v.get("kind").and_then(Value::as_str) {
            Some("resume") => num("from_step").map_or(Mark::None, Mark::Resume),
            Some("run_end") => num("final_step").map_or(Mark::None, Mark::At),
            _ => num("step").map_or(Mark::None, Mark::At),
        }
    }

    /// Whether the record belongs after step `step`.
    fn after(self, step: u64) -> bool {
        matches!(self, Mark::At(n) | Mark::Resume(n) if n > step)
    }
}

/// Cut `lines` at the first that belongs after step `step`.
fn cut_after(lines: &mut Vec<(&str, Mark)>, step: u64) {
    if let Some(i) = lines.iter().position(|(_, m)| m.after(step)) {
        lines.truncate(i);
    }
}

/// Read the events of a log, skipping lines that do not parse (a torn last line).
pub fn read_events(path: &Path) -> Result<Vec<Value>> {
    let bytes = std::fs::read(path).map_err(|e| runtime(format!("cannot read {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes); // a line with a damaged character does not parse: skipped
    Ok(text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.is_object()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purged(log: &str, step: u64) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, log).unwrap();
        purge_after(&path, step).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    const START: &str = "{\"kind\":\"run_start\",\"t\":0}\n{\"kind\":\"fallback\",\"t\":0}\n{\"kind\":\"eval\",\"step\":0}\n";

    #[test]
    fn a_killed_runs_later_steps_go() {
        let saved =
            format!("{START}{{\"kind\":\"step\",\"step\":1}}\n{{\"kind\":\"step\",\"step\":2}}\n{{\"kind\":\"checkpoint\",\"step\":2}}\n");
        let log = format!("{saved}{{\"kind\":\"epoch\",\"step\":3}}\n{{\"kind\":\"step\",\"step\":3}}\n{{\"kind\":\"eval\",\"step\":3}}\n");
        assert_eq!(purged(&log, 2), saved);
        assert_eq!(purged(&saved, 2), saved, "nothing after step 2");
        assert_eq!(purged(&format!("{saved}{{\"kind\":\"st"), 2), saved, "a torn last line goes");
        // a torn line can end inside a character: it goes as well
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut torn = saved.clone().into_bytes();
        torn.extend_from_slice(&"{\"corpus\":\"rün 📁".as_bytes()[..17]);
        std::fs::write(&path, &torn).unwrap();
        purge_after(&path, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), saved);
        // a damaged whole line is said, with its number
        std::fs::write(&path, [saved.as_bytes(), b"{\"kind\":\"\xff\"}\n"].concat()).unwrap();
        let e = purge_after(&path, 2).unwrap_err().to_string();
        assert!(e.contains("line 7 is not UTF-8 text"), "{e}");
        let ended = format!("{log}{{\"kind\":\"run_end\",\"final_step\":3}}\n");
        assert_eq!(purged(&ended, 3), ended);
        assert_eq!(purged(&ended, 2), saved, "the end of a run past step 2 goes too");
        assert_eq!(purged(&ended, 0), START);
    }

    /// A log an older build wrote: steps 3 and 4 twice, across a resume from 2.
    #[test]
    fn the_repeats_of_older_builds_go() {
        let step = |n: u64| format!("{{\"kind\":\"step\",\"step\":{n}}}\n");
        let resume = |n: u64| format!("{{\"kind\":\"resume\",\"from_step\":{n}}}\n");
        let log = [START.to_string(), step(1), step(2), step(3), step(4), resume(2), step(3), step(4), step(5)].concat();
        let want = [START.to_string(), step(1), step(2), resume(2), step(3), step(4)].concat();
        assert_eq!(purged(&log, 4), want);
        let later = [log.clone(), resume(5), step(6)].concat();
        assert_eq!(purged(&later, 1), [START.to_string(), step(1)].concat(), "resumes from later steps go");
        let missing = tempfile::tempdir().unwrap();
        assert!(purge_after(&missing.path().join("events.jsonl"), 3).is_ok());
    }
}
