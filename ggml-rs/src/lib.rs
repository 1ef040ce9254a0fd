//! `ggml_rs`: a safe Rust API over [ggml](https://github.com/ggml-org/ggml) 0.26.0
//! for building and training models.
//!
//! - [`Backend`] / [`Device`]: what ggml can run on (CPU, CUDA, Metal), by name.
//! - [`Context`] / [`Tensor`]: tensor descriptions with lifetimes, so no
//!   handle outlives its context; weights live in backend buffers the context owns.
//! - Ops as `Context` methods named after ggml's (`mul_mat`, `rms_norm`,
//!   `rope_ext`, ...), each checking shapes and types in Rust and returning
//!   [`Error`] instead of reaching a ggml assert.
//! - [`Graph`]: forward and backward (`ggml_build_backward_expand`), allocated
//!   once through the backend scheduler (CPU last, as ggml requires), computed
//!   many times, reporting where each node ran.
//! - [`optim`]: AdamW with parameter groups and gradient clipping, SGD.
//! - [`comm`]: all-reduce between devices (data-parallel training).
//! - [`gguf`]: validated, memory-mapped reading and atomic writing.
//!
//! Shapes are always given in ggml's `ne` order: `ne[0]` is the contiguous
//! dimension, so a `rows × cols` matrix is `[cols, rows]`.
//!
//! ```no_run
//! use ggml_rs::{Backend, Context, DType, Graph};
//! # fn main() -> ggml_rs::Result<()> {
//! let cpu = Backend::cpu()?;
//! let ctx = Context::new(16)?;
//! let a = ctx.new_tensor_2d(DType::F32, 3, 2)?.set_input();
//! let b = ctx.new_tensor_2d(DType::F32, 3, 4)?.set_input();
//! let c = ctx.mul_mat(a, b)?.set_output(); // [2, 4]
//! let mut g = Graph::new(&ctx, 16)?;
//! g.expand(c)?;
//! g.allocate(&[cpu])?;
//! a.write(&[1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0])?;
//! b.write(&[1.0f32; 12])?;
//! g.compute()?;
//! assert_eq!(c.read::<f32>()?, vec![1.0; 8]);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod arena;
pub mod backend;
mod backward;
pub mod comm;
mod context;
mod dtype;
mod error;
pub mod gguf;
mod graph;
pub mod log;
mod ops;
pub mod optim;

pub use backend::{devices, Backend, Device, DeviceKind, MatmulPrecision};
pub use context::{Context, Tensor, MAX_DIMS};
pub use dtype::{DType, Element, OtherType};
pub use error::{Error, Result};
pub use graph::{Graph, MulMatGrad, Placement};
pub use ops::RopeMode;

/// The `half` crate whose `f16` and `bf16` are [`Element`]s (`read::<half::bf16>()`),
/// re-exported so that a user needs no version of their own.
pub use half;

/// The raw bindings, for what the safe API does not cover.
pub use ggml_sys as sys;
