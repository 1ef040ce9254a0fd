//! A corpus's identity: the bytes and SHA-256 of its input, recorded in a
//! run's `config.toml` so that `--resume` notices a corpus that changed.

use crate::error::{input, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bytes and hex SHA-256 of a corpus's input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusId {
    pub bytes: u64,
    pub sha256: String,
}

/// The identity of the corpus at `path`: a prepared folder by its
/// `manifest.json` (which holds the SHA-256 of its inputs and tokenizer), a
/// file by its content, any other folder by the names and contents of all its
/// files, in name order.
pub fn corpus_id(path: &Path) -> Result<CorpusId> {
    let mut h = Sha256::new();
    let manifest = path.join("manifest.json");
    let bytes = if path.is_dir() && manifest.is_file() {
        hash_file(&manifest, &mut h)?
    } else if path.is_dir() {
        hash_folder(path, path, &mut h)?
    } else {
        hash_file(path, &mut h)?
    };
    Ok(CorpusId { bytes, sha256: h.finalize().iter().map(|b| format!("{b:02x}")).collect() })
}

/// The identity of the corpus built into this binary (its text).
pub fn embedded_id() -> CorpusId {
    let text = crate::data::embedded::TEXT.as_bytes();
    CorpusId { bytes: text.len() as u64, sha256: Sha256::digest(text).iter().map(|b| format!("{b:02x}")).collect() }
}

fn hash_file(path: &Path, h: &mut Sha256) -> Result<u64> {
    let mut f = std::fs::File::open(path).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))?;
    std::io::copy(&mut f, h).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))
}

fn hash_folder(root: &Path, dir: &Path, h: &mut Sha256) -> Result<u64> {
    let read = |e: std::io::Error| input(format!("cannot read corpus folder {}: {e}", dir.display()));
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(read)?.collect::<std::io::Result<_>>().map_err(read)?;
    entries.sort_by_key(|e| e.file_name());
    let mut bytes = 0;
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            bytes += hash_folder(root, &path, h)?;
        } else if path.is_file() {
            let name = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            bytes += hash_file(&path, h)?;
        }
    }
    Ok(bytes)
}
