//! Host memory for ggml contexts, allocated by Rust.
//!
//! `ggml_init` allocates its arena itself and aborts the process
//! (`GGML_ASSERT(ctx->mem_buffer != NULL)`) when that fails. Handing it a
//! buffer that Rust allocated (`ggml_init_params.mem_buffer`) makes a failed
//! allocation an [`Error`] instead.

use crate::error::{Error, Result};
use ggml_sys as sys;

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
        Ok(Arena { buf, bytes: blocks * std::mem::size_of::<Block>() })
    }

    /// `ggml_init` parameters for a `no_alloc` context in this arena.
    pub(crate) fn params(&mut self) -> sys::ggml_init_params {
        sys::ggml_init_params { mem_size: self.bytes, mem_buffer: self.buf.as_mut_ptr().cast(), no_alloc: true }
    }
}
