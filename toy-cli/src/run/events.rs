//! `events.jsonl`: one JSON object per line, schema `toy/v1`, append-only.
//!
//! Kinds written (the training loop's [`Event`]s): `run_start`, `step`, `skip`, `eval`,
//! `checkpoint`, `epoch`, `fallback`, `resume`, `run_end`. Readers skip torn lines and ignore keys
//! they do not know ([`read_events`] does both).

use crate::error::{runtime, Result};
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

/// Read the events of a log, skipping lines that do not parse (a torn last line).
pub fn read_events(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| runtime(format!("cannot read {}: {e}", path.display())))?;
    Ok(text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.is_object()).collect())
}
