//! Collective communication between backends: an in-place all-reduce (sum) of
//! one tensor per backend, through the backend's own implementation
//! (`ggml_backend_comm_init` / `ggml_backend_comm_allreduce_tensor`, found
//! through `ggml_backend_reg_get_proc_address`). On CUDA that is NCCL when
//! ggml was built with it (`GGML_CUDA_NCCL`), else ggml's pipeline through
//! pinned host memory for two GPUs. Backends without one (the CPU) have no
//! communicator; sum on the host instead.

use crate::backend::{Backend, Device};
use crate::context::Tensor;
use crate::error::{Error, Result};
use ggml_sys as sys;
use std::ffi::c_void;

/// Which all-reduce a set of devices gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllReduceKind {
    /// NCCL (ggml-cuda built with `GGML_CUDA_NCCL`).
    Nccl,
    /// ggml-cuda's own two-GPU pipeline through pinned host memory.
    Ggml,
    /// None: the caller sums on the host.
    None,
}

impl AllReduceKind {
    /// A short name (`nccl`, `ggml`, `none`).
    pub fn name(self) -> &'static str {
        match self {
            AllReduceKind::Nccl => "nccl",
            AllReduceKind::Ggml => "ggml",
            AllReduceKind::None => "none",
        }
    }

    /// What [`Comm::new`] picks for `n` devices of `device`'s registry (from
    /// its feature list), without creating anything.
    pub fn for_devices(device: &Device, n: usize) -> AllReduceKind {
        if n < 2 || device.proc_address(c"ggml_backend_comm_init").is_null() {
            return AllReduceKind::None;
        }
        if device.features().iter().any(|(k, v)| k == "NCCL" && v == "1") {
            AllReduceKind::Nccl
        } else if n == 2 {
            AllReduceKind::Ggml
        } else {
            AllReduceKind::None
        }
    }
}

type InitFn = unsafe extern "C" fn(*mut sys::ggml_backend_t, usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type AllReduceFn = unsafe extern "C" fn(*mut c_void, *mut *mut sys::ggml_tensor) -> bool;

/// A communicator over several backends of one kind (one per device).
pub struct Comm {
    ctx: *mut c_void,
    free: FreeFn,
    allreduce: AllReduceFn,
    n: usize,
    /// Kept alive as long as the communicator uses them.
    _backends: Vec<Backend>,
}

impl Comm {
    /// A communicator over `backends` (at least two, of one registry), or
    /// `None` when that backend has no all-reduce. With CUDA, f32 tensors are
    /// reduced in f32 (`GGML_CUDA_AR_BF16_THRESHOLD=0`, our patch 0015) unless
    /// the environment already sets the variable.
    pub fn new(backends: &[Backend]) -> Option<Comm> {
        if backends.len() < 2 {
            return None;
        }
        let first = &backends[0];
        if backends.iter().any(|b| b.device().backend_name() != first.device().backend_name()) {
            return None;
        }
        let init = first.proc_address(c"ggml_backend_comm_init");
        let free = first.proc_address(c"ggml_backend_comm_free");
        let reduce = first.proc_address(c"ggml_backend_comm_allreduce_tensor");
        if init.is_null() || free.is_null() || reduce.is_null() {
            return None;
        }
        if std::env::var_os("GGML_CUDA_AR_BF16_THRESHOLD").is_none() {
            // Read by ggml when the communicator starts, below.
            std::env::set_var("GGML_CUDA_AR_BF16_THRESHOLD", "0");
        }
        let mut raw: Vec<sys::ggml_backend_t> = backends.iter().map(|b| b.raw()).collect();
        // SAFETY: the registry exports these names with the signatures of
        // ggml-backend.h (ggml_backend_comm_*_t); live backends.
        unsafe {
            let init: InitFn = std::mem::transmute(init);
            let ctx = init(raw.as_mut_ptr(), raw.len());
            if ctx.is_null() {
                return None;
            }
            Some(Comm {
                ctx,
                free: std::mem::transmute::<*mut c_void, FreeFn>(free),
                allreduce: std::mem::transmute::<*mut c_void, AllReduceFn>(reduce),
                n: backends.len(),
                _backends: backends.to_vec(),
            })
        }
    }

    /// Sum `tensors` (one per backend, in the communicator's order, same shape
    /// and type, each contiguous in its backend's memory) in place: afterwards
    /// every one holds the sum. Returns false when the backend declined (e.g.
    /// more devices than its pipeline takes), leaving the tensors unchanged.
    /// The work is queued on the backends' streams; synchronize them (or read
    /// a tensor) before using the result on the host.
    ///
    /// # Errors
    /// [`Error::Backend`] for a wrong number of tensors or mismatched shapes.
    pub fn allreduce(&self, tensors: &[Tensor<'_>]) -> Result<bool> {
        if tensors.len() != self.n {
            return Err(Error::Backend(format!("all-reduce over {} backends given {} tensors", self.n, tensors.len())));
        }
        let ne = tensors[0].ne();
        if tensors.iter().any(|t| t.ne() != ne || t.dtype() != tensors[0].dtype() || !t.is_contiguous() || !t.is_allocated()) {
            return Err(Error::Backend("all-reduce needs allocated, contiguous tensors of one shape and type".into()));
        }
        let mut raw: Vec<*mut sys::ggml_tensor> = tensors.iter().map(|t| t.raw()).collect();
        for &t in &raw {
            // ggml's implementations treat a tensor without the COMPUTE flag as an
            // inactive shard and zero it (tensor-parallel semantics); every one
            // of ours holds a real partial sum.
            // SAFETY: live tensors; flag update only.
            unsafe { (*t).flags |= sys::GGML_TENSOR_FLAG_COMPUTE as i32 };
        }
        // SAFETY: live communicator and tensors, checked above.
        Ok(unsafe { (self.allreduce)(self.ctx, raw.as_mut_ptr()) })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: created by the matching init; freed once.
        unsafe { (self.free)(self.ctx) };
    }
}
