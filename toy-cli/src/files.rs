//! Files that toy writes safely: atomic writes through a fresh temporary,
//! opens that never follow a planted link, and the advisory lock of a run or
//! prep folder. Used by [`crate::run`], [`crate::data`] and [`crate::formats`].

use crate::error::{input, runtime, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `o` refusing to open a symbolic link at the file's name (`O_NOFOLLOW`):
/// a link planted in a run or prep folder is an error, never written through.
pub fn no_follow(o: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(o, libc::O_NOFOLLOW);
    o
}

/// The error of opening `path` with [`no_follow`]: says so when it is a link.
pub fn open_error(path: &Path, e: std::io::Error) -> crate::error::Error {
    if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
        return input(format!("{} is a symbolic link; toy does not write through links (remove it)", path.display()));
    }
    input(format!("cannot open {}: {e}", path.display()))
}

/// A new file at `path` for writing (a temporary): whatever has that name (a
/// stale temporary, a planted link) is removed first, and the file is created
/// with `O_EXCL`, which never follows a link.
pub fn create_fresh(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)
}

/// The temporary beside `path` that a write goes to first: `.NAME.tmp-PID`.
/// (`ggml_rs::gguf::GgufWriter::write` names its own `.NAME.tmp-PID-N`, one
/// per call; [`remove_stale_temps`] and [`remove_own_temps`] know both.)
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Remove the temporaries of `path` (both forms of [`temp_pid`]) that
/// processes which no longer run left beside it (killed while writing). A
/// live process's temporary is left alone: it may be writing `path` now.
pub fn remove_stale_temps(path: &Path) {
    remove_temps_of(path, |pid| pid > 0 && !process_runs(pid));
}

/// Remove this process's temporaries of `path` (both forms of [`temp_pid`]):
/// what a signal that ends a write leaves half-written.
pub fn remove_own_temps(path: &Path) {
    remove_temps_of(path, |pid| pid == std::process::id() as i32);
}

/// Remove the temporaries beside `path` whose writer's process id `which` picks.
fn remove_temps_of(path: &Path, which: impl Fn(i32) -> bool) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else { return };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let entry = e.file_name().to_string_lossy().into_owned();
        if entry.strip_prefix(&prefix).and_then(temp_pid).is_some_and(&which) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The writer's process id in what follows `.NAME.tmp-` in a temporary's
/// name: `PID` ([`temp_path`]) or `PID-N` (`GgufWriter::write`).
fn temp_pid(rest: &str) -> Option<i32> {
    rest.split_once('-').map_or(rest, |(pid, n)| if n.bytes().all(|b| b.is_ascii_digit()) { pid } else { "" }).parse().ok()
}

/// Whether a process `pid` exists (`kill(pid, 0)`; one of another user's
/// counts as running).
fn process_runs(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks the process.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The bytes of the regular file `path` (`what` names it in errors): a
/// folder, a FIFO or a device is refused before it is opened (reading a FIFO
/// would wait for a writer for ever).
pub fn read_regular(path: &Path, what: &str) -> Result<Vec<u8>> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(input(format!("{what} {}: not a regular file", path.display()))),
        _ => std::fs::read(path).map_err(|e| input(format!("cannot read {what} {}: {e}", path.display()))),
    }
}

/// Whether `name` is what a toy process leaves in a run or prep folder besides
/// its results: the lock, a write probe, or a temporary ([`temp_path`]) of a
/// process that died while writing.
pub fn is_leftover(name: &str) -> bool {
    name == ".lock" || name == ".write-probe" || name.starts_with(".toy-write-test-") || (name.starts_with('.') && name.contains(".tmp-"))
}

/// Write `bytes` to `path` atomically: a temporary file beside it
/// ([`create_fresh`]), fsynced, renamed over `path` (which replaces a link at
/// `path` rather than writing through it).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    let res = (|| -> std::io::Result<()> {
        let mut f = create_fresh(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        runtime(format!("cannot write {}: {e}", path.display()))
    })
}

/// Take the advisory lock on `dir/.lock` (writing our pid and `doing` into
/// it), or say which process holds `dir` (the `what` named) and what the
/// holder wrote it was doing. The lock file is opened without following links
/// and must be a regular file.
pub fn lock(dir: &Path, what: &str, doing: &str) -> Result<std::fs::File> {
    use fs4::FileExt;
    let path = dir.join(".lock");
    let mut f = no_follow(std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false))
        .open(&path)
        .map_err(|e| open_error(&path, e))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(input(format!("{} is not a regular file", path.display())));
    }
    match FileExt::try_lock(&f) {
        Ok(()) => {
            let _ = f.set_len(0);
            let _ = writeln!(f, "{}\n{doing}", std::process::id());
            Ok(f)
        }
        Err(fs4::TryLockError::WouldBlock) => Err(in_use(dir, what, &mut f)),
        Err(fs4::TryLockError::Error(e)) => Err(input(format!("cannot lock {}: {e}", path.display()))),
    }
}

/// Refuse `dir` when a process holds its `dir/.lock` ([`lock`]), without
/// taking the lock or making the file.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the holder, as [`lock`] does.
pub fn refuse_locked(dir: &Path, what: &str) -> Result<()> {
    use fs4::FileExt;
    let Ok(mut f) = no_follow(std::fs::OpenOptions::new().read(true).write(true)).open(dir.join(".lock")) else { return Ok(()) };
    match FileExt::try_lock(&f) {
        Err(fs4::TryLockError::WouldBlock) => Err(in_use(dir, what, &mut f)),
        _ => Ok(()),
    }
}

/// "`what` `dir` is in use by process P (what it does)", from the lock file `f`
/// its holder wrote (its pid, then what it is doing).
fn in_use(dir: &Path, what: &str, f: &mut std::fs::File) -> crate::error::Error {
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(f, &mut text);
    let mut lines = text.lines().map(str::trim);
    let who = match lines.next() {
        None | Some("") => "another process".to_string(),
        Some(p) => format!("process {p}"),
    };
    let doing = lines.next().filter(|d| !d.is_empty()).map(|d| format!(" ({d})")).unwrap_or_default();
    input(format!("{what} {} is in use by {who}{doing}; wait for it or stop it", dir.display()))
}

/// A checkpoint path: the file itself, or a run folder's `weights/latest`.
pub fn resolve_model(p: &Path) -> Result<PathBuf> {
    if p.is_dir() {
        let latest = p.join("weights/latest");
        if latest.exists() {
            return Ok(latest);
        }
        // A folder that cannot be read is not one without checkpoints.
        std::fs::read_dir(p).map_err(|e| input(format!("cannot read {}: {e}", p.display())))?;
        crate::run::check_weights(p)?;
        // What is left when weights/latest is gone: the newest step_N.gguf, if any.
        let newest = crate::run::checkpoint_steps(p).max().map(|n| {
            format!(
                "; its newest checkpoint is {}: give it, or run ln -sfn step_{n}.gguf {}",
                p.join(format!("weights/step_{n}.gguf")).display(),
                latest.display()
            )
        });
        if latest.is_symlink() {
            // a run whose newest checkpoint was deleted by hand
            let to = std::fs::read_link(&latest).map(|t| t.display().to_string()).unwrap_or_default();
            let instead = newest.unwrap_or_else(|| "; give a checkpoint file (weights/step_N.gguf) instead".into());
            return Err(input(format!("{}: weights/latest points to {to}, which is gone{instead}", p.display())));
        }
        if let Some(newest) = newest {
            return Err(input(format!("{}: weights/latest is missing{newest}", p.display())));
        }
        if crate::run::has_config(p) {
            // a run that is starting, or was stopped, before its first checkpoint
            return Err(input(format!("{}: the run has saved no checkpoint yet (weights/latest)", p.display())));
        }
        return Err(input(format!("{} is a folder without weights/latest (not a run folder?)", p.display())));
    }
    if !p.exists() {
        return Err(input(format!("{}: no such checkpoint or run folder", p.display())));
    }
    Ok(p.to_path_buf())
}

/// The file a path flag names: `p` itself, or a run folder's `weights/latest`
/// ([`resolve_model`], its error prefixed with `flag`).
pub fn file_or_run(p: &Path, flag: &str) -> Result<PathBuf> {
    if p.is_dir() {
        resolve_model(p).map_err(|e| input(format!("{flag} {e}")))
    } else {
        Ok(p.to_path_buf())
    }
}

/// The nearest of the folders above `p` that exists (`.` for a relative path
/// none of whose folders does): what making `p`'s missing folders starts
/// from. Not a folder when a file stands on the path (`a.txt/x`).
pub fn nearest_existing(p: &Path) -> PathBuf {
    p.ancestors().skip(1).find(|a| !a.as_os_str().is_empty() && a.exists()).map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The folder of `p` that a `..` after it leaves while it does not exist
/// (`new/../x` gives `new`), if any: the system resolves such a path only once
/// that folder is made, so the checks of what an output would replace, made
/// before, would read another path than the one written.
pub fn missing_before_parent_dir(p: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for c in p.components() {
        if c == std::path::Component::ParentDir && !prefix.as_os_str().is_empty() && !prefix.exists() {
            return Some(prefix);
        }
        prefix.push(c);
    }
    None
}

/// Refuse an output path (`flag`'s) through a missing folder and `..`
/// ([`missing_before_parent_dir`]) as bad input.
///
/// # Errors
/// [`crate::error::Error::Input`] naming the missing folder.
pub fn refuse_parent_dir_of_missing(p: &Path, flag: &str) -> Result<()> {
    match missing_before_parent_dir(p) {
        Some(m) => {
            Err(input(format!("{flag} {}: `..` leaves {}, which does not exist (give the path without it)", p.display(), m.display())))
        }
        None => Ok(()),
    }
}

/// Remove everything inside the folder `dir`, keeping the folder (one the
/// user made, which a failed command emptied of what it wrote); best effort.
pub fn empty_folder(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = if e.path().is_dir() { std::fs::remove_dir_all(e.path()) } else { std::fs::remove_file(e.path()) };
    }
}

/// The outermost folder of `p` and its parents that does not exist yet: what
/// `create_dir_all(p)` would make first; `None` when `p` exists.
pub fn outermost_missing(p: &Path) -> Option<PathBuf> {
    p.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).last().map(Path::to_path_buf)
}

/// Remove the parents of `path` that lie inside `top` (the outermost folder a
/// command made for its output, [`outermost_missing`]) while they are empty;
/// best effort.
pub fn remove_empty_parents(path: &Path, top: &Path) {
    for p in path.ancestors().skip(1) {
        if !p.starts_with(top) || std::fs::remove_dir(p).is_err() {
            break;
        }
    }
}

/// Remove the folder `dir` if it is empty, then, when it went, the parents of it
/// inside `top` (the outermost folder made above it, if any) while they are
/// empty ([`remove_empty_parents`]); best effort.
pub fn remove_made_folder(dir: &Path, top: Option<&Path>) {
    if std::fs::remove_dir(dir).is_ok() {
        if let Some(top) = top {
            remove_empty_parents(dir, top);
        }
    }
}

/// Make the folders above `out` that are missing (as `toy prep` and `toy train`
/// make theirs), right before `out` is written.
///
/// # Errors
/// A runtime error naming the folder that could not be made.
pub fn make_parent(out: &Path) -> Result<()> {
    match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => {
            std::fs::create_dir_all(dir).map_err(|e| crate::error::runtime(format!("cannot make the folder {}: {e}", dir.display())))
        }
        _ => Ok(()),
    }
}

/// What a file that is not a regular one is, as messages name it.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    match () {
        _ if t.is_dir() => "a folder",
        _ if t.is_symlink() => "a link",
        _ if t.is_fifo() => "a FIFO",
        _ if t.is_socket() => "a socket",
        _ if t.is_block_device() || t.is_char_device() => "a device",
        _ => "a special file",
    }
}

/// Refuse an output path `out` that would replace one of `inputs` (a run
/// folder's: the checkpoint its `weights/latest` names), a folder, a
/// link, a run's resume state or anything but a regular file, or whose folder
/// cannot be written (or, missing, made by [`make_parent`] in its nearest
/// existing folder): bad input, found before the work (`what` names what would
/// be written there).
pub fn check_out(out: &Path, inputs: &[&Path], what: &str) -> Result<()> {
    refuse_parent_dir_of_missing(out, "--out")?;
    let o = out.display();
    if let Ok(meta) = std::fs::symlink_metadata(out) {
        if !meta.is_file() {
            return Err(input(format!("--out {o}: exists and is {}, not a regular file", kind(&meta))));
        }
        // An input given as a run folder is read through its `weights/latest` ([`file_or_run`]).
        let real = std::fs::canonicalize(out).ok();
        let same = |p: &Path| file_or_run(p, "").ok().and_then(|f| std::fs::canonicalize(f).ok()) == real;
        if inputs.iter().any(|p| same(p)) {
            return Err(input(format!("--out {o} is one of the inputs; write {what} elsewhere")));
        }
        if out.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".state.gguf")) {
            return Err(input(format!("--out {o}: a run's resume state; write {what} elsewhere")));
        }
    }
    // A run's checkpoints are its own: one replaced would break its --resume.
    let folder = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
    let run = folder.parent().filter(|_| folder.file_name().is_some_and(|n| n == "weights"));
    if run.is_some_and(crate::run::is_run_folder) {
        return Err(input(format!("--out {o}: inside a run's weights folder, which holds its checkpoints; write {what} elsewhere")));
    }
    if out.as_os_str().to_string_lossy().ends_with('/') {
        return Err(input(format!("--out {o}: give a file name, not a folder")));
    }
    // A missing folder is made when the file is written: probe the nearest one that exists.
    let dir = nearest_existing(out);
    if !dir.is_dir() {
        return Err(input(format!("--out {o}: {} is not a folder", dir.display())));
    }
    let probe = dir.join(format!(".toy-out-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| input(format!("--out {o}: cannot write into {}: {}", dir.display(), create_error(&e))))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The reason a file could not be made in a folder that exists: the system's
/// text, except for "No such file or directory", which a folder of a virtual
/// file system (`/proc`, `/sys`) gives and which reads as if the folder were
/// missing.
fn create_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        "it takes no new files (a virtual file system?)".to_string()
    } else {
        e.to_string()
    }
}

/// [`check_out`] for a GGUF output: also refuse to replace an existing,
/// non-empty file that is not GGUF (no `GGUF` magic), which `--out` most
/// likely names by mistake (a corpus, a config); a GGUF file is replaced, as
/// llama.cpp's tools replace theirs.
pub fn check_out_gguf(out: &Path, inputs: &[&Path], what: &str) -> Result<()> {
    check_out(out, inputs, what)?;
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(out).and_then(|mut f| std::io::Read::read(&mut f, &mut magic));
    match read {
        Ok(n) if n > 0 && (n < 4 || &magic != b"GGUF") => Err(input(format!(
            "--out {}: exists and is not a GGUF file; not replacing it with {what} (remove it or choose another name)",
            out.display()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gguf_output_replaces_a_gguf_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.gguf");
        assert!(check_out_gguf(&out, &[], "x").is_ok(), "missing: written");
        std::fs::write(&out, b"").unwrap();
        assert!(check_out_gguf(&out, &[], "x").is_ok(), "empty: replaced");
        std::fs::write(&out, b"GGUF\x03\0\0\0").unwrap();
        assert!(check_out_gguf(&out, &[], "x").is_ok(), "a GGUF file: replaced");
        for other in [&b"once upon a time"[..], b"GG"] {
            std::fs::write(&out, other).unwrap();
            let e = check_out_gguf(&out, &[], "x").expect_err("not GGUF: kept").to_string();
            assert!(e.contains("is not a GGUF file"), "{e}");
            assert_eq!(std::fs::read(&out).unwrap(), other, "left as it was");
        }
    }

    #[test]
    fn a_folder_that_takes_no_files_is_not_called_missing() {
        let e = create_error(&std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(e.contains("takes no new files") && !e.contains("No such file"), "{e}");
        let e = create_error(&std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(e.contains("ermission denied"), "{e}");
        if Path::new("/proc/self").is_dir() {
            let e = check_out(Path::new("/proc/toy-out.gguf"), &[], "x").expect_err("/proc takes no files").to_string();
            // root gets ENOENT there, a user EACCES
            assert!(e.contains("cannot write into /proc: ") && !e.contains("No such file"), "{e}");
        }
    }

    #[test]
    fn a_parent_dir_after_a_missing_folder_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir(dir.join("real")).unwrap();
        assert_eq!(missing_before_parent_dir(&dir.join("new/../x")), Some(dir.join("new")));
        assert_eq!(missing_before_parent_dir(&dir.join("real/new/../../x")), Some(dir.join("real/new")));
        assert_eq!(missing_before_parent_dir(&dir.join("real/../x")), None);
        assert_eq!(missing_before_parent_dir(&dir.join("new/x")), None);
        assert_eq!(missing_before_parent_dir(Path::new("../x")), None);
    }

    #[test]
    fn temporaries_of_both_forms_name_their_writer() {
        assert_eq!(temp_pid("123"), Some(123));
        assert_eq!(temp_pid("123-0"), Some(123));
        assert_eq!(temp_pid("123-45"), Some(123));
        assert_eq!(temp_pid("123-x"), None);
        assert_eq!(temp_pid("abc"), None);
    }
}
