//! The input files of `--corpus` paths: files as given, folders walked for
//! text and JSON Lines files (each file once, links that loop skipped).

use super::sources::{format_of, Source};
use crate::error::{input, Result};
use std::path::{Path, PathBuf};

fn is_input_file(p: &Path) -> bool {
    let name = p.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let stem = name.strip_suffix(".gz").unwrap_or(&name);
    // Not `.json`: a folder's `.json` files are more often settings than data.
    !name.starts_with('.') && [".txt", ".text", ".md", ".jsonl", ".ndjson"].iter().any(|e| stem.ends_with(e))
}

/// A file's identity: its device and inode (None where there are none).
type FileId = Option<(u64, u64)>;

fn file_id(meta: &std::fs::Metadata) -> FileId {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// The state of a walk over the inputs: the folders being walked (the
/// current one and its parents) and every file and folder met so far.
#[derive(Default)]
struct Walk {
    open: Vec<(u64, u64)>,
    seen: std::collections::HashSet<(u64, u64)>,
    files: Vec<PathBuf>,
}

impl Walk {
    /// True the first time `id` is met (always for an unknown identity).
    fn first(&mut self, id: FileId) -> bool {
        id.is_none_or(|id| self.seen.insert(id))
    }

    /// Walk `dir` (sorted, recursively, following links): a link to a folder
    /// being walked is a loop and is skipped with a note, and a file or folder
    /// met before through another path is not read again.
    fn folder(&mut self, dir: &Path, id: FileId) -> Result<()> {
        if !self.first(id) {
            return Ok(());
        }
        let rd = std::fs::read_dir(dir).map_err(|e| input(format!("cannot read folder {}: {e}", dir.display())))?;
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        self.open.extend(id);
        for p in entries {
            if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                continue;
            }
            // An input file's name on a dangling link or a FIFO, device or
            // socket is refused, as the same path given directly is.
            let meta = match std::fs::metadata(&p) {
                Ok(m) => m,
                Err(e) if is_input_file(&p) => {
                    let why = if p.is_symlink() { "is a link to nothing".to_string() } else { format!("cannot be read: {e}") };
                    return Err(input(format!("{} in a corpus folder {why}", p.display())));
                }
                Err(_) => continue,
            };
            if !meta.is_dir() && !meta.is_file() && is_input_file(&p) {
                return Err(input(format!("{} in a corpus folder is not a regular file", p.display())));
            }
            let id = file_id(&meta);
            if meta.is_dir() {
                if id.is_some_and(|id| self.open.contains(&id)) {
                    note_once(&p, "it links back to a folder being read (a loop)");
                    continue;
                }
                if crate::run::is_run_folder(&p) {
                    note_once(&p, "a toy run folder (its events.jsonl is no training data)");
                    continue;
                }
                self.folder(&p, id)?;
            } else if meta.is_file() && is_input_file(&p) && self.first(id) {
                self.files.push(p);
            }
        }
        if id.is_some() {
            self.open.pop();
        }
        Ok(())
    }
}

/// Say once per process that `path` was skipped and `why`: a corpus folder
/// is walked more than once (to read it, to identify it for `--resume`).
fn note_once(path: &Path, why: &str) {
    static NOTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut noted = NOTED.lock().unwrap_or_else(|e| e.into_inner());
    if !noted.iter().any(|p| p == path) {
        noted.push(path.to_path_buf());
        crate::note!("note: skipped {}: {why}", crate::output::shown(path));
    }
}

/// The input files of `paths`: files as given, folders walked (sorted,
/// recursively, following links) for `.txt`, `.text`, `.md`, `.jsonl`,
/// `.ndjson` and their `.gz`. Each file is read once however many paths or
/// links lead to it (by device and inode), and a link back to a folder being
/// walked (a loop) is skipped with a note on stderr.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) for a path that does not exist,
/// is not a regular file or folder (a device, a pipe), or a folder without
/// input files.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Source>> {
    let mut walk = Walk::default();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|_| input(format!("{} does not exist", p.display())))?;
        if meta.is_dir() {
            let (before, id) = (walk.files.len(), file_id(&meta));
            let new = id.is_none_or(|id| !walk.seen.contains(&id));
            walk.folder(p, id)?;
            if new && walk.files.len() == before {
                if super::prepared::is_prepared(p) {
                    return Err(input(format!(
                        "{} is a prepared corpus (toy prep's output), not text: train and eval read it with --corpus",
                        p.display()
                    )));
                }
                // What a toy prep stopped before its manifest leaves: its lock, temporaries, splits.
                let unfinished = std::fs::read_dir(p).is_ok_and(|rd| {
                    rd.flatten().any(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        crate::files::is_leftover(&n) || n == "train.bin" || n == "tokenizer.json"
                    })
                });
                if unfinished {
                    return Err(input(format!(
                        "{} is an unfinished toy prep (no manifest.json: it was stopped or is still running); run toy prep again",
                        p.display()
                    )));
                }
                return Err(input(format!("{} holds no text files (.txt, .text, .md, .jsonl, .ndjson, nor .gz of them)", p.display())));
            }
        } else if meta.is_file() {
            if walk.first(file_id(&meta)) {
                walk.files.push(p.clone());
            }
        } else {
            return Err(input(format!("{} is not a regular file or a folder", p.display())));
        }
    }
    let files = walk.files;
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let (format, gzip) = format_of(&path);
            Ok(Source { path, format, gzip, bytes })
        })
        .collect()
}
