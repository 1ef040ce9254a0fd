//! A stream of token ids: in memory, or a memory-mapped `.bin` file of a
//! prepared corpus read in place (so training on gigabytes of tokens takes no
//! more memory than the windows it reads).

use std::sync::Arc;

/// Token ids, indexable and cheap to clone.
#[derive(Clone, Debug)]
pub struct Tokens {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    Owned(Arc<Vec<u32>>),
    /// Little-endian ids of `width` bytes (2 or 4) from byte `start` of `map`.
    Mapped {
        map: Arc<memmap2::Mmap>,
        start: usize,
        len: usize,
        width: usize,
    },
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
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Tokens {
    /// `len` ids of `width` bytes (2 or 4, little-endian) at byte `start` of
    /// `map`; the caller has checked that they fit.
    pub fn mapped(map: Arc<memmap2::Mmap>, start: usize, len: usize, width: usize) -> Tokens {
        assert!(width == 2 || width == 4, "token width {width}");
        assert!(start + len * width <= map.len(), "tokens past the end of the map");
        Tokens { repr: Repr::Mapped { map, start, len, width } }
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.len(),
            Repr::Mapped { len, .. } => *len,
        }
    }

    /// True when there are no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the ids are read from a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.repr, Repr::Mapped { .. })
    }

    /// Id `i` (panics when `i` is out of range, as slice indexing does).
    pub fn get(&self, i: usize) -> u32 {
        match &self.repr {
            Repr::Owned(v) => v[i],
            Repr::Mapped { map, start, len, width } => {
                assert!(i < *len, "token {i} of {len}");
                let o = start + i * width;
                let b = &map[o..o + width];
                if *width == 4 {
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
                } else {
                    u16::from_le_bytes([b[0], b[1]]) as u32
                }
            }
        }
    }

    /// Append ids `start..start + n` to `out` as i32 (ggml's index type).
    pub fn extend_i32(&self, start: usize, n: usize, out: &mut Vec<i32>) {
        match &self.repr {
            Repr::Owned(v) => out.extend(v[start..start + n].iter().map(|&x| x as i32)),
            Repr::Mapped { .. } => out.extend((start..start + n).map(|i| self.get(i) as i32)),
        }
    }

    /// Every id, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The ids as a vector (a copy).
    pub fn to_vec(&self) -> Vec<u32> {
        match &self.repr {
            Repr::Owned(v) => v.as_ref().clone(),
            Repr::Mapped { .. } => self.iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapped_ids_read_as_written() {
        let ids: Vec<u32> = (0..1000).map(|i| i * 7919 % 65536).collect();
        for width in [2usize, 4] {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(&[9u8; 6]).unwrap(); // a header to skip
            for &i in &ids {
                if width == 4 {
                    f.write_all(&i.to_le_bytes()).unwrap();
                } else {
                    f.write_all(&(i as u16).to_le_bytes()).unwrap();
                }
            }
            f.flush().unwrap();
            // SAFETY: a file of this test, not changed while mapped.
            let map = Arc::new(unsafe { memmap2::Mmap::map(f.as_file()) }.unwrap());
            let t = Tokens::mapped(map, 6, ids.len(), width);
            assert!(t.is_mapped());
            assert_eq!(t.to_vec(), ids);
            assert_eq!(t, Tokens::from(ids.clone()));
            let mut w = Vec::new();
            t.extend_i32(10, 5, &mut w);
            assert_eq!(w, ids[10..15].iter().map(|&x| x as i32).collect::<Vec<_>>());
        }
    }
}
