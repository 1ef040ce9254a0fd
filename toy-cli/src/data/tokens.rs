//! A stream of token ids: in memory, or a packed `.bin` file of a prepared
//! corpus read in place, window by window (so training on gigabytes of tokens
//! takes no more memory than the windows it reads).
//!
//! The file is read with positioned reads, not through a memory map: a file
//! truncated or rewritten by another process while it is read (`truncate -s 0
//! train.bin` during training) is then an error naming it, never a SIGBUS.
//! Every read checks that the file still has the size and modification time
//! it had when it was checked, and that its ids are in the vocabulary.

use crate::error::{runtime, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Token ids, indexable and cheap to clone.
#[derive(Clone, Debug)]
pub struct Tokens {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    Owned(Arc<Vec<u32>>),
    /// Ids `start..start + len` of a packed file.
    File {
        file: Arc<PackedFile>,
        start: usize,
        len: usize,
    },
}

/// A packed file of little-endian ids, open, with what it was checked against.
#[derive(Debug)]
pub struct PackedFile {
    file: std::fs::File,
    path: PathBuf,
    /// Bytes per id (2 or 4).
    width: usize,
    /// Ids must be below this.
    vocab: usize,
    /// Size and modification time when the file was checked.
    bytes: u64,
    modified: Option<std::time::SystemTime>,
}

impl PackedFile {
    /// `file` (at `path`), whose ids of `width` bytes (2 or 4) were checked
    /// against `vocab` just now. It holds a shared lock on the file while open
    /// (`toy prep --force` refuses to replace a corpus that is being read).
    ///
    /// # Errors
    /// [`Error::Runtime`](crate::error::Error::Runtime) when its metadata cannot be read.
    pub fn new(file: std::fs::File, path: &Path, width: usize, vocab: usize) -> Result<PackedFile> {
        let meta = file.metadata().map_err(|e| runtime(format!("cannot read {}: {e}", path.display())))?;
        // A shared lock while it is open: `toy prep --force` refuses to replace
        // a corpus that a run reads (best effort: a file system without locks
        // just has none).
        let _ = fs4::FileExt::try_lock_shared(&file);
        Ok(PackedFile { file, path: path.to_path_buf(), width, vocab, bytes: meta.len(), modified: meta.modified().ok() })
    }

    fn changed(&self, what: String) -> crate::error::Error {
        runtime(format!("{} changed while it was being read ({what})", self.path.display()))
    }

    /// Ids `first..first + out.len()` into `out`.
    fn read(&self, first: usize, out: &mut [u32]) -> Result<()> {
        let meta = self.file.metadata().map_err(|e| runtime(format!("cannot read {}: {e}", self.path.display())))?;
        if meta.len() != self.bytes {
            return Err(self.changed(format!("{} bytes, was {}", meta.len(), self.bytes)));
        }
        if meta.modified().ok() != self.modified {
            return Err(self.changed("modified".into()));
        }
        let mut buf = vec![0u8; out.len() * self.width];
        read_at(&self.file, &mut buf, (first * self.width) as u64).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.changed("shorter than it was".into()),
            _ => runtime(format!("cannot read {}: {e}", self.path.display())),
        })?;
        for (i, (o, c)) in out.iter_mut().zip(buf.chunks_exact(self.width)).enumerate() {
            *o = if self.width == 4 { u32::from_le_bytes([c[0], c[1], c[2], c[3]]) } else { u16::from_le_bytes([c[0], c[1]]) as u32 };
            if *o as usize >= self.vocab {
                return Err(self.changed(format!("token {} is id {o}, outside the vocabulary of {}", first + i, self.vocab)));
            }
        }
        Ok(())
    }
}

#[cfg(unix)]
fn read_at(f: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(windows)]
fn read_at(f: &std::fs::File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(f, buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens::from(Vec::new())
    }
}

impl From<Vec<u32>> for Tokens {
    fn from(v: Vec<u32>) -> Self {
        Tokens { repr: Repr::Owned(Arc::new(v)) }
    }
}

impl PartialEq for Tokens {
    /// Equal ids; a file that cannot be read equals nothing.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && matches!((self.to_vec(), other.to_vec()), (Ok(a), Ok(b)) if a == b)
    }
}

impl Tokens {
    /// `len` ids from id `start` of `file`.
    ///
    /// # Errors
    /// [`Error::Runtime`](crate::error::Error::Runtime) when they do not fit in it.
    pub fn packed(file: Arc<PackedFile>, start: usize, len: usize) -> Result<Tokens> {
        if (start + len) as u64 * file.width as u64 > file.bytes {
            return Err(runtime(format!("{}: tokens past the end of the file", file.path.display())));
        }
        Ok(Tokens { repr: Repr::File { file, start, len } })
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.len(),
            Repr::File { len, .. } => *len,
        }
    }

    /// True when there are no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the ids are read from a file as they are needed.
    pub fn is_mapped(&self) -> bool {
        matches!(self.repr, Repr::File { .. })
    }

    /// Ids `start..start + n` (a window).
    ///
    /// # Errors
    /// [`Error::Runtime`](crate::error::Error::Runtime) naming the file when it
    /// changed since it was checked (other size or time, ids outside the
    /// vocabulary) or cannot be read, or when the range is past the end.
    pub fn window(&self, start: usize, n: usize) -> Result<Vec<u32>> {
        if start.checked_add(n).is_none_or(|end| end > self.len()) {
            return Err(runtime(format!("tokens {start}..{} of {}", start.saturating_add(n), self.len())));
        }
        match &self.repr {
            Repr::Owned(v) => Ok(v[start..start + n].to_vec()),
            Repr::File { file, start: s0, .. } => {
                let mut out = vec![0u32; n];
                file.read(s0 + start, &mut out)?;
                Ok(out)
            }
        }
    }

    /// Every id, in order (a copy, read in windows of 1 Mi ids).
    ///
    /// # Errors
    /// As [`window`](Self::window).
    pub fn to_vec(&self) -> Result<Vec<u32>> {
        match &self.repr {
            Repr::Owned(v) => Ok(v.as_ref().clone()),
            Repr::File { .. } => {
                let mut out = Vec::with_capacity(self.len());
                for at in (0..self.len()).step_by(1 << 20) {
                    out.extend(self.window(at, (1 << 20).min(self.len() - at))?);
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn packed_ids_read_as_written_and_checked() {
        let ids: Vec<u32> = (0..1000).map(|i| i * 7919 % 65536).collect();
        for width in [2usize, 4] {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(&[9u8; 4]).unwrap(); // a header to skip
            for &i in &ids {
                if width == 4 {
                    f.write_all(&i.to_le_bytes()).unwrap();
                } else {
                    f.write_all(&(i as u16).to_le_bytes()).unwrap();
                }
            }
            f.flush().unwrap();
            let file = PackedFile::new(f.reopen().unwrap(), f.path(), width, 65536).unwrap();
            let t = Tokens::packed(Arc::new(file), 4 / width, ids.len()).unwrap();
            assert!(t.is_mapped());
            assert_eq!(t.to_vec().unwrap(), ids);
            assert_eq!(t, Tokens::from(ids.clone()));
            assert_eq!(t.window(10, 5).unwrap(), ids[10..15]);
            assert!(t.window(ids.len() - 2, 3).is_err());
            f.as_file().set_len(100).unwrap();
            let e = t.window(0, 1).unwrap_err().to_string();
            assert!(e.contains("changed while it was being read"), "{e}");
        }
    }
}
