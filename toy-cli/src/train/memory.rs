//! Device memory of a training run, for `run_start`, `run_end` and `toy debug
//! bench`: what ggml's buffers hold (weights, optimizer moments and the step's
//! compute buffer: the peak, less ggml's CUDA pool of temporaries such as bf16
//! copies of product operands), and how much more of the device is in use than
//! when the backend started (the whole device's count: other processes on the
//! same GPU move it).

use ggml_rs::{Backend, Context, DeviceKind, Graph};

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

    /// The memory of the weights' context `weights` and of `graph`'s
    /// compute buffers on `backend`'s device.
    pub fn report(&self, backend: &Backend, weights: &Context, graph: &Graph<'_>) -> MemoryReport {
        let compute = compute_bytes(backend, graph);
        MemoryReport {
            weights_bytes: weights.allocated_bytes(),
            compute_bytes: compute,
            buffers_bytes: weights.allocated_bytes() + compute,
            device_used_bytes: self.used_since_start(backend),
        }
    }
}

/// The `memory` object of `run_start` and `resume`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryReport {
    /// The weights' context: weights, optimizer moments, accumulators.
    pub weights_bytes: usize,
    /// The step's compute buffers on the device.
    pub compute_bytes: usize,
    /// Their sum.
    pub buffers_bytes: usize,
    /// [`DeviceMemory::used_since_start`].
    pub device_used_bytes: Option<usize>,
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
