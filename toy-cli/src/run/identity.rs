//! A corpus's identity: the bytes and SHA-256 of its input, recorded in a
//! run's `config.toml` so that `--resume` notices a corpus that changed.

use crate::data::tokenizer::hex;
use crate::error::{input, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bytes and hex SHA-256 of a corpus's input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusId {
    pub bytes: u64,
    pub sha256: String,
    /// A prepared folder's: hex SHA-256 of its token files (see
    /// [`PREPARED_IDS`]), which its manifest does not cover; `None` otherwise.
    pub ids_sha256: Option<String>,
}

/// The token files of a prepared folder, hashed in this order (each after
/// its name) into [`CorpusId::ids_sha256`]: rewritten in place, they leave
/// `manifest.json` as it was.
pub const PREPARED_IDS: [&str; 2] = ["train.bin", "val.bin"];

/// The identity of the corpus at `path`: a prepared folder by its
/// `manifest.json` (which holds the SHA-256 of its inputs and tokenizer), a
/// file by its content, any other folder by the names and contents of the
/// files that reading it takes (`data::sources::discover`: each file once,
/// link loops skipped), in that order. A prepared folder's token files are
/// hashed too, apart ([`CorpusId::ids_sha256`]), so that runs which recorded
/// only the manifest's hash still match it.
pub fn corpus_id(path: &Path) -> Result<CorpusId> {
    let mut h = Sha256::new();
    let manifest = path.join("manifest.json");
    let mut ids_sha256 = None;
    let bytes = if path.is_dir() && manifest.is_file() {
        ids_sha256 = Some(prepared_ids_sha256(path)?);
        hash_file(&manifest, &mut h)?
    } else if path.is_dir() {
        let mut bytes = 0;
        for s in crate::data::sources::discover(&[path.to_path_buf()])? {
            let name = s.path.strip_prefix(path).unwrap_or(&s.path).to_string_lossy().into_owned();
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            bytes += hash_file(&s.path, &mut h)?;
        }
        bytes
    } else {
        hash_file(path, &mut h)?
    };
    Ok(CorpusId { bytes, sha256: hex(&h.finalize()), ids_sha256 })
}

/// Hex SHA-256 of the token files of the prepared folder `dir`
/// ([`PREPARED_IDS`]), streamed: each file's name, its length, then its bytes.
fn prepared_ids_sha256(dir: &Path) -> Result<String> {
    let mut h = Sha256::new();
    for name in PREPARED_IDS {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        let path = dir.join(name);
        let meta = std::fs::metadata(&path).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))?;
        if !meta.is_file() {
            // a FIFO would block the read for ever
            return Err(input(format!("corpus {} is not a regular file", path.display())));
        }
        h.update(meta.len().to_le_bytes());
        hash_file(&path, &mut h)?;
    }
    Ok(hex(&h.finalize()))
}

/// The identity of the corpus built into this binary (its text).
pub fn embedded_id() -> CorpusId {
    let text = crate::data::embedded::TEXT.as_bytes();
    CorpusId { bytes: text.len() as u64, sha256: hex(&Sha256::digest(text)), ids_sha256: None }
}

fn hash_file(path: &Path, h: &mut Sha256) -> Result<u64> {
    let mut f = std::fs::File::open(path).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))?;
    std::io::copy(&mut f, h).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))
}
