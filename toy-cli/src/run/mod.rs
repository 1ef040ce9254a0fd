//! Run folders: `runs/<id>/` with `events.jsonl`, `flow.json`, `config.toml`,
//! `loss.svg` and `weights/step_<N>.gguf` plus a relative `weights/latest` link.
//! A training run writes them through [`folder::RunFolder`], the sink of its
//! loop's events.

pub mod batches;
pub mod events;
pub mod flow;
pub mod folder;
pub mod identity;
pub mod plot;

use crate::error::{input, runtime, Result};
use crate::files::{create_fresh, is_leftover, lock, temp_path};
use crate::train::events::{Git, Host};
use std::path::{Path, PathBuf};

/// A folder that `toy train` wrote (a project's `runs/` holds them): its
/// config.toml and events.jsonl.
pub fn is_run_folder(p: &Path) -> bool {
    p.join("config.toml").is_file() && p.join("events.jsonl").is_file()
}

/// The run id from `template` (`{arch}`, `{date}` = YYYYMMDD, `{time}` = HHMMSS,
/// `{seq}` = 1 + the largest 3-digit sequence among today's runs in `runs_dir`).
pub fn make_run_id(template: &str, arch: &str, runs_dir: &Path) -> String {
    let now = chrono::Local::now();
    let date = now.format("%Y%m%d").to_string();
    let mut id = template.replace("{arch}", arch).replace("{date}", &date).replace("{time}", &now.format("%H%M%S").to_string());
    if id.contains("{seq}") {
        let mut max = 0u32;
        if let Ok(rd) = std::fs::read_dir(runs_dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.contains(&date) {
                    let digits: String = n.chars().rev().take_while(|c| c.is_ascii_digit()).collect::<Vec<_>>().into_iter().rev().collect();
                    if let Ok(v) = digits.parse::<u32>() {
                        max = max.max(v);
                    }
                }
            }
        }
        id = id.replace("{seq}", &format!("{:03}", max + 1));
    }
    id
}

/// Whether `path` holds a run's config.toml (a run, resumable, maybe without
/// a checkpoint yet).
pub fn has_config(path: &Path) -> bool {
    path.join("config.toml").is_file()
}

/// Whether `path` holds nothing but what a run makes before its config.toml
/// (`.lock`, the write probe, `weights/` with at most temporaries): the folder
/// of a run killed while it started, which `--out` may take again.
pub fn is_skeleton(path: &Path) -> bool {
    let names = |p: &Path| -> Option<Vec<String>> {
        Some(std::fs::read_dir(p).ok()?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
    };
    let Some(top) = names(path) else { return false };
    top.iter().all(|n| {
        is_leftover(n)
            || (n == "weights" && path.join(n).is_dir() && names(&path.join(n)).is_some_and(|w| w.iter().all(|n| is_leftover(n))))
    })
}

/// The run id that the run in `dir` started with (its first `run_start`
/// event), which its checkpoints carry even after the folder is renamed.
pub fn started_as(dir: &Path) -> Option<String> {
    use std::io::BufRead;
    let f = std::io::BufReader::new(std::fs::File::open(dir.join("events.jsonl")).ok()?);
    let first = f.lines().next()?.ok()?;
    let v: serde_json::Value = serde_json::from_str(&first).ok()?;
    (v["kind"] == "run_start").then(|| v["run_id"].as_str().map(str::to_string)).flatten()
}

/// Remove the run folder `path` and the parents of it inside `created` (the
/// outermost folder made for it) that nothing else was put in. A folder that
/// was there before (`created` is `None`: an empty folder or a skeleton that
/// `--out` named) is the user's: only what is inside goes, and the note says so.
fn remove_folder(path: &Path, created: Option<&Path>) -> String {
    let Some(top) = created else {
        crate::files::empty_folder(path);
        return format!("nothing was saved, so what the run wrote in {} was removed", path.display());
    };
    let _ = std::fs::remove_dir_all(path);
    crate::files::remove_empty_parents(path, top);
    format!("nothing was saved, so the run folder {} was removed", path.display())
}

/// Temporary files (`.NAME.tmp-PID`: of a process that died while writing, or
/// of this one's writes that a quit cut short) and resume states without
/// their checkpoint in the run folder `path`: with the folder locked, no one
/// else can be writing them.
///
/// A state whose checkpoint `weights/latest` names is kept: that checkpoint
/// was removed by someone, not lost in a save, and `--resume` says so.
fn remove_leftovers(path: &Path) {
    let latest = std::fs::read_link(path.join("weights/latest")).ok().map(|l| l.to_string_lossy().into_owned());
    for dir in [path.to_path_buf(), path.join("weights")] {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let orphan_state = name.strip_suffix(".state.gguf").is_some_and(|stem| {
                let ck = format!("{stem}.gguf");
                !dir.join(&ck).exists() && latest.as_deref() != Some(ck.as_str())
            });
            if (is_leftover(&name) && name != ".lock") || orphan_state {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether the run folder `path` holds a checkpoint (`weights/latest` or a resume state).
fn has_checkpoint(path: &Path) -> bool {
    match std::fs::read_dir(path.join("weights")) {
        Ok(rd) => rd.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n == "latest" || n.ends_with(".state.gguf"))),
        // A weights/ that cannot be read may hold checkpoints: never taken for
        // a run without any (restarted, or removed when it fails).
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Refuse a `weights/` in the run folder `path` that would pass for one
/// without checkpoints: a link to nothing, not a folder, or one this process
/// cannot list. A missing one is fine (a new run makes it).
pub(crate) fn check_weights(path: &Path) -> Result<()> {
    let weights = path.join("weights");
    if weights.is_symlink() && !weights.exists() {
        let to = std::fs::read_link(&weights).map(|t| t.display().to_string()).unwrap_or_default();
        return Err(input(format!("{} is a link to nothing ({to})", weights.display())));
    }
    if weights.exists() && !weights.is_dir() {
        return Err(input(format!("{} is not a folder (a run folder keeps its checkpoints there)", weights.display())));
    }
    match std::fs::read_dir(&weights) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(input(format!("cannot read {}: {e}", weights.display()))),
        _ => Ok(()),
    }
}

/// An open run folder, locked for this process ([`RunDir::create`]).
#[derive(Clone, Debug)]
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
    /// `.lock`, held (an advisory lock) while this value or a clone lives.
    _lock: std::sync::Arc<std::fs::File>,
    /// The outermost folder [`RunDir::create`] made for `path` (`path` itself,
    /// or a missing parent such as `runs/`): what [`RunDir::remove`] removes.
    created: Option<PathBuf>,
}

/// The refusal of a file given as a run folder.
fn not_a_folder(path: &Path) -> crate::error::Error {
    input(format!("{} is a file, not a run folder", path.display()))
}

impl RunDir {
    /// Remove the run folder (a run that saved nothing) and the parents that
    /// [`RunDir::create`] made for it, where nothing else was put in them; a
    /// folder that was there before keeps its place, emptied. Returns the note
    /// that says which.
    pub fn remove(&self) -> String {
        remove_folder(&self.path, self.created.as_deref())
    }

    /// Refuse `path` as a new run's folder: a file, or a folder already there
    /// that is not a skeleton (a run killed before it wrote config.toml, which
    /// is reused). Checked by [`RunDir::create`], and by `toy train` before it
    /// reads its inputs, so that a taken `--out` is said at once.
    ///
    /// # Errors
    /// [`crate::error::Error::Input`] saying what is there.
    pub fn check_new(path: &Path) -> Result<()> {
        crate::files::refuse_parent_dir_of_missing(path, "run folder")?;
        if path.exists() && !path.is_dir() {
            return Err(not_a_folder(path));
        }
        // A file on the way (`notes.txt/run`): say so, not what reading a folder under it gives.
        let above = crate::files::nearest_existing(path);
        if !path.exists() && !above.is_dir() {
            return Err(input(format!("run folder {}: {} is not a folder", path.display(), above.display())));
        }
        // A run being set up or trained by another process (two trainings given one --out) says so.
        if path.is_dir() {
            crate::files::refuse_locked(path, "run folder")?;
        }
        if path.exists() && !is_skeleton(path) {
            // a run (its config.toml) can be resumed; another folder cannot
            if has_config(path) {
                return Err(input(format!(
                    "run folder {} already exists; choose another --out or resume it with --resume",
                    path.display()
                )));
            }
            return Err(input(format!("{} already exists and is not empty (not a run folder); choose another --out", path.display())));
        }
        Ok(())
    }

    /// Create the folder `path` (and `weights/`). An existing folder is refused
    /// unless `allow_existing` (resuming); an unwritable place is bad input.
    pub fn create(id: String, path: PathBuf, allow_existing: bool) -> Result<RunDir> {
        if !allow_existing {
            RunDir::check_new(&path)?;
        } else if path.exists() && !path.is_dir() {
            return Err(not_a_folder(&path));
        }
        let created = crate::files::outermost_missing(&path);
        check_weights(&path)?;
        std::fs::create_dir_all(path.join("weights")).map_err(|e| input(format!("cannot create run folder {}: {e}", path.display())))?;
        // Probe writability now rather than after the first training step.
        let probe = path.join(".write-probe");
        create_fresh(&probe).map_err(|e| input(format!("cannot write into {}: {e}", path.display())))?;
        let _ = std::fs::remove_file(probe);
        let lock = lock(&path, "run folder", "a toy train running in it")?;
        let run = RunDir { id, path, _lock: std::sync::Arc::new(lock), created };
        remove_leftovers(&run.path);
        // A quit signal (the third) removes the folder too while it holds no checkpoint;
        // else what it cut short (the temporary of loss.svg, say, written after the
        // checkpoint that the first signal asked for), as the next open would.
        let (p, c) = (run.path.clone(), run.created.clone());
        crate::signals::on_quit(Box::new(move || {
            if has_checkpoint(&p) {
                remove_leftovers(&p);
                return None;
            }
            Some(remove_folder(&p, c.as_deref()))
        }));
        Ok(run)
    }

    /// Whether training got anywhere: a step or the end of the run in
    /// `events.jsonl`, or a checkpoint. A folder without any is a skeleton.
    pub fn has_progress(&self) -> bool {
        let events = std::fs::read_to_string(self.path.join("events.jsonl")).unwrap_or_default();
        let weights = std::fs::read_dir(self.path.join("weights")).map(|mut d| d.next().is_some()).unwrap_or(false);
        weights || events.contains("\"kind\":\"step\"") || events.contains("\"kind\":\"run_end\"")
    }

    /// Whether `weights/` holds anything a resume could start from: a
    /// checkpoint with its resume state, or a `latest` link (even a broken
    /// one). `--save-initial`'s `step_0.gguf` has no state. A run without is
    /// removed when it fails, and restarted from step 0 by `--resume`.
    pub fn has_checkpoint(&self) -> bool {
        has_checkpoint(&self.path)
    }

    /// Remove the logs of a run that saved nothing, before it starts again
    /// from step 0 in this folder.
    pub fn clear_logs(&self) {
        for name in ["events.jsonl", "flow.json", "loss.svg", "batches.bin", "batches.json"] {
            let _ = std::fs::remove_file(self.path.join(name));
        }
    }

    /// `weights/step_<N>.gguf`.
    pub fn checkpoint_path(&self, step: u64) -> PathBuf {
        self.path.join("weights").join(format!("step_{step}.gguf"))
    }

    /// Point `weights/latest` at `step_<N>.gguf` (relative link, replaced atomically).
    pub fn set_latest(&self, step: u64) -> Result<()> {
        let dir = self.path.join("weights");
        let tmp = temp_path(&dir.join("latest"));
        let _ = std::fs::remove_file(&tmp);
        #[cfg(unix)]
        std::os::unix::fs::symlink(format!("step_{step}.gguf"), &tmp)
            .map_err(|e| runtime(format!("cannot link {}: {e}", tmp.display())))?;
        #[cfg(not(unix))]
        std::fs::write(&tmp, format!("step_{step}.gguf")).map_err(|e| runtime(e.to_string()))?;
        std::fs::rename(&tmp, dir.join("latest")).map_err(|e| runtime(format!("cannot update weights/latest: {e}")))
    }

    /// Why `weights/latest` names no checkpoint, for `--resume`'s refusal: a
    /// link to a file that is gone, and the newest checkpoint left with its
    /// state, if any.
    pub fn why_no_latest(&self) -> String {
        let weights = self.path.join("weights");
        let gone = std::fs::read_link(weights.join("latest")).ok().map(|l| l.to_string_lossy().into_owned());
        let newest = self.newest_intact(u64::MAX);
        let link = match gone {
            Some(g) if checkpoint_step(&g).is_some() => format!("no checkpoint: weights/latest points to {g}, which is gone"),
            Some(g) => format!("no checkpoint of its own: weights/latest points to {g}, not to a step_N.gguf of its weights/"),
            None => "no checkpoint: no weights/latest".to_string(),
        };
        match newest {
            Some(n) => format!("{link}; {}", self.resume_from(n)),
            None => format!("{link}, and no checkpoint is left with its state"),
        }
    }

    /// The newest step below `below` whose checkpoint and resume state are
    /// both in `weights/`.
    pub fn newest_intact(&self, below: u64) -> Option<u64> {
        let weights = self.path.join("weights");
        checkpoint_steps(&self.path).filter(|&n| n < below && weights.join(format!("step_{n}.state.gguf")).is_file()).max()
    }

    /// The advice to resume from step `n`'s checkpoint: the link to make.
    pub fn resume_from(&self, n: u64) -> String {
        format!("step_{n}.gguf is intact: to resume from it, run ln -sfn step_{n}.gguf {}", self.path.join("weights/latest").display())
    }

    /// For a refusal of the checkpoint `ck` (its state missing or broken):
    /// `; ` and [`resume_from`](Self::resume_from) the newest intact checkpoint
    /// before it, or nothing when there is none.
    pub fn fall_back_from(&self, ck: &Path) -> String {
        let step = ck.file_name().and_then(|n| checkpoint_step(n.to_str()?)).unwrap_or(u64::MAX);
        self.newest_intact(step).map(|n| format!("; {}", self.resume_from(n))).unwrap_or_default()
    }

    /// The checkpoint `weights/latest` points to, if any: a `step_<N>.gguf`
    /// of this folder's `weights/` (a link anywhere else is not this run's).
    pub fn latest(&self) -> Option<PathBuf> {
        let l = self.path.join("weights/latest");
        let target = std::fs::read_link(&l).ok()?;
        let ours = checkpoint_step(target.to_str()?).is_some();
        Some(self.path.join("weights").join(target)).filter(|p| ours && p.is_file())
    }
}

/// The steps of the checkpoints (`weights/step_<N>.gguf`) in the run folder `dir`.
pub(crate) fn checkpoint_steps(dir: &Path) -> impl Iterator<Item = u64> {
    std::fs::read_dir(dir.join("weights")).into_iter().flatten().flatten().filter_map(|e| checkpoint_step(e.file_name().to_str()?))
}

/// The step of a checkpoint's file name, `step_<N>.gguf` (not its state's).
pub(crate) fn checkpoint_step(name: &str) -> Option<u64> {
    name.strip_prefix("step_")?.strip_suffix(".gguf")?.parse().ok()
}

/// `{name, os, arch}` of this machine.
pub fn host_info() -> Host {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_default());
    Host { name, os: std::env::consts::OS, arch: std::env::consts::ARCH }
}

/// `{sha, branch}` of the git checkout around the current folder, read from `.git`.
pub fn git_info() -> Option<Git> {
    let mut dir = std::env::current_dir().ok()?;
    loop {
        let git = dir.join(".git");
        if git.is_dir() {
            let head = std::fs::read_to_string(git.join("HEAD")).ok()?;
            let head = head.trim();
            if let Some(r) = head.strip_prefix("ref: ") {
                let sha = std::fs::read_to_string(git.join(r)).ok().map(|s| s.trim().to_string()).or_else(|| {
                    let packed = std::fs::read_to_string(git.join("packed-refs")).ok()?;
                    packed.lines().find(|l| l.ends_with(r)).map(|l| l.split(' ').next().unwrap_or("").to_string())
                });
                let branch = r.trim_start_matches("refs/heads/").to_string();
                return Some(Git { sha, branch: Some(branch) });
            }
            return Some(Git { sha: Some(head.to_string()), branch: None });
        }
        if !dir.pop() {
            return None;
        }
    }
}
