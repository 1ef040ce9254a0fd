//! Device memory of a training run, for `run_start`, `run_end` and `toy debug
//! bench`: what ggml's buffers hold (weights, optimizer moments and the step's
//! compute buffer: the peak, less ggml's CUDA pool of temporaries such as bf16
//! copies of product operands), and how much more of the device is in use than
//! when the backend started (the whole device's count: other processes on the
//! same GPU move it).

use ggml_rs::{Backend, Context, DeviceKind, Graph};
use serde_json::{json, Value};

/// Memory in use on a GPU when the run's backend started (the CPU reports
/// system memory instead, which says nothing about the run: `None` there).
#[derive(Clone, Copy, Debug)]
pub struct DeviceMemory {
    /// `total − free` bytes at the start, or `None` on a CPU.
    base_used: Option<usize>,
}

impl DeviceMemory {
    /// Note the memory in use on `backend`'s device now (before the run
    /// allocates anything).
    pub fn start(backend: &Backend) -> DeviceMemory {
        DeviceMemory { base_used: used(backend) }
    }

    /// Bytes this process took on the device since [`start`](Self::start):
    /// ggml's buffers, ggml's CUDA pool of temporaries and cuBLAS's workspace.
    /// ggml never gives pool memory back during a run, so after a step this is
    /// the run's peak. `None` on a CPU.
    pub fn used_since_start(&self, backend: &Backend) -> Option<usize> {
        Some(used(backend)?.saturating_sub(self.base_used?))
    }

    /// `{weights_bytes, compute_bytes, buffers_bytes, device_used_bytes}`:
    /// the weights' context (weights, optimizer moments, accumulators), the
    /// compute buffers of `graph` on `backend`'s device, their sum, and
    /// [`used_since_start`](Self::used_since_start).
    pub fn report(&self, backend: &Backend, weights: &Context, graph: &Graph<'_>) -> Value {
        let compute = compute_bytes(backend, graph);
        json!({
            "weights_bytes": weights.allocated_bytes(),
            "compute_bytes": compute,
            "buffers_bytes": weights.allocated_bytes() + compute,
            "device_used_bytes": self.used_since_start(backend),
        })
    }
}

/// Bytes of `graph`'s compute buffers on `backend`'s device.
pub fn compute_bytes(backend: &Backend, graph: &Graph<'_>) -> usize {
    let name = backend.name();
    graph.buffer_sizes().into_iter().filter(|(b, _)| *b == name).map(|(_, s)| s).sum()
}

fn used(backend: &Backend) -> Option<usize> {
    let dev = backend.device();
    if matches!(dev.kind(), DeviceKind::Cpu) {
        return None;
    }
    let (free, total) = dev.memory();
    Some(total.saturating_sub(free))
}
