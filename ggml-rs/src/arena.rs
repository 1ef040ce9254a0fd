//! Host memory for ggml contexts, allocated by Rust.
//!
//! `ggml_init` allocates its arena itself and aborts the process
//! (`GGML_ASSERT(ctx->mem_buffer != NULL)`) when that fails. Handing it a
//! buffer that Rust allocated (`ggml_init_params.mem_buffer`) makes a failed
//! allocation an [`Error`] instead.

use crate::error::{Error, Result};
use ggml_sys as sys;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The live arenas: the address range of each and its id. An op result
/// records the arenas its operands' descriptions lie in (a graph over another
/// context's weights), so that a context whose tensors view a dropped
/// context's is refused before ggml reads the freed descriptions
/// (`ggml_backend_alloc_ctx_tensors` reads every view's source). Ids are
/// never reused, so a new arena at a freed one's address is not taken for it.
static LIVE: Mutex<Vec<(usize, usize, u64)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, usize, u64)>> {
    LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The id of the live arena that holds address `addr`, if any.
pub(crate) fn owner(addr: usize) -> Option<u64> {
    live().iter().find(|&&(start, end, _)| (start..end).contains(&addr)).map(|&(_, _, id)| id)
}

/// Whether the arena of this id is still alive.
pub(crate) fn is_live(id: u64) -> bool {
    live().iter().any(|&(_, _, i)| i == id)
}

/// The unit of an arena: ggml wants its arena aligned to `GGML_MEM_ALIGN`.
#[repr(C, align(16))]
struct Block([u8; 16]);

const _: () = assert!(std::mem::align_of::<Block>() >= sys::GGML_MEM_ALIGN as usize);

/// An uninitialised, aligned host buffer for one ggml context. It must outlive
/// the context (drop it after `ggml_free`).
pub(crate) struct Arena {
    /// Length 0: only the capacity is used, written by ggml, never read by Rust.
    buf: Vec<Block>,
    bytes: usize,
    /// Its entry in the live arenas.
    id: u64,
}

impl Arena {
    /// An arena of at least `bytes` (at least one block) for `what`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] past the process's address-space limit,
    /// [`Error::Capacity`] when the host cannot allocate it.
    pub(crate) fn new(bytes: usize, what: &str) -> Result<Arena> {
        crate::backend::check_host_arena(bytes, what)?;
        let blocks = bytes.div_ceil(std::mem::size_of::<Block>()).max(1);
        let mut buf = Vec::new();
        buf.try_reserve_exact(blocks)
            .map_err(|_| Error::Capacity(format!("cannot allocate {} MiB of host memory for {what}", (bytes as u64).div_ceil(1 << 20))))?;
        let bytes = blocks * std::mem::size_of::<Block>();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let start = buf.as_ptr() as usize;
        live().push((start, start + bytes, id));
        Ok(Arena { buf, bytes, id })
    }

    /// Whether address `addr` lies in this arena (no lock taken).
    pub(crate) fn contains(&self, addr: usize) -> bool {
        let start = self.buf.as_ptr() as usize;
        (start..start + self.bytes).contains(&addr)
    }

    /// `ggml_init` parameters for a `no_alloc` context in this arena.
    pub(crate) fn params(&mut self) -> sys::ggml_init_params {
        sys::ggml_init_params { mem_size: self.bytes, mem_buffer: self.buf.as_mut_ptr().cast(), no_alloc: true }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        live().retain(|&(_, _, id)| id != self.id);
    }
}
