//! Compute graphs: build (forward and backward), allocate through the backend
//! scheduler, compute, and report where each node ran.

use crate::arena::Arena;
use crate::backend::Backend;
use crate::backward;
use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::ptr::NonNull;

mod alloc;
pub(crate) use alloc::{forget_stale_views, is_computed};
mod order;
mod side;

/// Where a node of an allocated graph runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The node's name.
    pub name: String,
    /// The op (`"MUL_MAT"`, `"SILU"`, ...).
    pub op: String,
    /// The backend the scheduler assigned (`"CPU"`, `"CUDA0"`).
    pub backend: String,
}

/// How the backward pass differentiates matrix products (our patch 0011,
/// `ggml_mul_mat_set_grad`). Both give the same gradients; they differ in speed
/// per backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MulMatGrad {
    /// `mul_mat` of contiguous transposed operands (patch 0003): fast on a
    /// CPU whose `out_prod` kernel is ggml's own (slow).
    #[default]
    MulMat,
    /// `out_prod` of the operands as they are: no transposing copies, for
    /// backends whose matrix library reads transposed operands (CUDA/cuBLAS,
    /// and the CPU's packed GEMM of patch 0059 on x86-64).
    OutProd,
}

impl MulMatGrad {
    /// The faster choice for a graph whose matrix products run on `backend`:
    /// `OutProd` off the CPU, and on a CPU whose registry reports the
    /// `TOY_PACKED_SGEMM` feature (patch 0059: f32 `out_prod` through the
    /// same packed GEMM as `mul_mat`; a LoRA step at SmolLM2-135M's shape
    /// took 12% less time than with `MulMat`, full fine-tuning 14% less).
    pub fn for_backend(backend: &Backend) -> MulMatGrad {
        if backend.is_cpu() && !cpu_packed_sgemm(backend) {
            MulMatGrad::MulMat
        } else {
            MulMatGrad::OutProd
        }
    }
}

/// Whether `cpu`'s f32 products and `out_prod`s run through patch 0059's
/// packed GEMM (its registry's `TOY_PACKED_SGEMM` feature).
fn cpu_packed_sgemm(cpu: &Backend) -> bool {
    cpu.device().features().iter().any(|(k, _)| k == "TOY_PACKED_SGEMM")
}

struct Allocation {
    sched: NonNull<sys::ggml_backend_sched>,
    backends: Vec<Backend>,
    /// Tensors whose data this allocation provides; reset when it goes away.
    owned: Vec<*mut sys::ggml_tensor>,
    /// Tensors the graph reads whose data another allocation (a context, an
    /// earlier graph) provides; checked before each run.
    external: Vec<*mut sys::ggml_tensor>,
    /// (index tensor, number of rows it indexes) for every `get_rows` fed by a leaf.
    index_checks: Vec<(*mut sys::ggml_tensor, i64, String)>,
    /// The compute buffers, once a run has succeeded ([`Allocation::ran`]).
    computed: Option<Vec<usize>>,
}

/// A ggml compute graph over tensors of one or more contexts.
///
/// Build it with [`expand`](Self::expand) (and, for training,
/// [`build_backward`](Self::build_backward)), then [`allocate`](Self::allocate)
/// it once on a list of backends and [`compute`](Self::compute) it as often as
/// needed, writing inputs before the first run (they keep what was written
/// until it is written again). Intermediate tensors get their memory
/// from the graph's allocation and lose it when the graph is dropped; a tensor can
/// belong to one allocated graph at a time.
pub struct Graph<'a> {
    ctx: &'a Context,
    gctx: NonNull<sys::ggml_context>,
    ptr: NonNull<sys::ggml_cgraph>,
    size: usize,
    grads: bool,
    /// The nodes and their operands (leaves included), kept as [`expand`](Self::expand) and
    /// [`build_backward`](Self::build_backward) append nodes.
    members: HashSet<*mut sys::ggml_tensor>,
    /// How many of the graph's nodes `members` covers: ggml only ever appends nodes
    /// (reordering keeps the set), so each refresh reads the new ones alone.
    members_nodes: usize,
    loss: Option<*mut sys::ggml_tensor>,
    /// Contiguous copies of parameter gradients that ggml left as strided views.
    cont_grads: HashMap<*mut sys::ggml_tensor, *mut sys::ggml_tensor>,
    mul_mat_grad: MulMatGrad,
    alloc: Option<Allocation>,
    /// The step states of the optimizers attached to this graph: a compute
    /// needs each one's step prepared and not yet run.
    step_gates: Vec<std::sync::Arc<crate::optim::StepGate>>,
    /// The host memory of the graph object; dropped after `ggml_free`.
    _arena: Arena,
}

impl<'a> Graph<'a> {
    /// A forward-only graph of at most `size` nodes (and `size` leaves; a
    /// `size` below 16 is taken as 16). New tensors that graph building
    /// creates (none for forward graphs) go into `ctx`.
    ///
    /// # Errors
    /// [`Error::Capacity`] when the graph's host memory cannot be had.
    pub fn new(ctx: &'a Context, size: usize) -> Result<Graph<'a>> {
        Self::create(ctx, size, false)
    }

    /// A graph that can hold gradients, for [`build_backward`](Self::build_backward),
    /// sized as [`new`](Self::new): the backward adds several nodes for each
    /// forward one (allow about 8×).
    pub fn with_grads(ctx: &'a Context, size: usize) -> Result<Graph<'a>> {
        Self::create(ctx, size, true)
    }

    fn create(ctx: &'a Context, size: usize, grads: bool) -> Result<Graph<'a>> {
        log::init();
        let size = size.max(16);
        let mut arena = Arena::new(graph_bytes(size, grads)?, "the graph's nodes")?;
        // SAFETY: the arena is aligned, sized for the graph object, and lives as
        // long as the graph's context (a field dropped after ggml_free).
        let gctx =
            NonNull::new(unsafe { sys::ggml_init(arena.params()) }).ok_or_else(|| Error::Capacity("cannot allocate a graph".into()))?;
        // SAFETY: the context was sized for exactly this graph.
        let ptr = unsafe { sys::ggml_new_graph_custom(gctx.as_ptr(), size, grads) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::Capacity("cannot allocate a graph".into()))?;
        Ok(Graph {
            ctx,
            gctx,
            ptr,
            size,
            grads,
            members: HashSet::new(),
            members_nodes: 0,
            loss: None,
            cont_grads: HashMap::new(),
            mul_mat_grad: MulMatGrad::default(),
            alloc: None,
            step_gates: Vec::new(),
            _arena: arena,
        })
    }

    fn raw(&self) -> *mut sys::ggml_cgraph {
        self.ptr.as_ptr()
    }

    fn not_allocated(&self, what: &str) -> Result<()> {
        if self.alloc.is_some() {
            return Err(Error::Compute(format!("{what}: the graph is already allocated; build a new graph instead")));
        }
        Ok(())
    }

    /// Add `t` and everything it depends on (`ggml_build_forward_expand`).
    ///
    /// # Errors
    /// [`Error::Capacity`] when the graph would exceed its size.
    pub fn expand(&mut self, t: Tensor<'a>) -> Result<()> {
        self.expand_all(&[t])
    }

    /// [`expand`](Self::expand) each of `ts`, or none of them when they do not all fit.
    pub(crate) fn expand_all(&mut self, ts: &[Tensor<'a>]) -> Result<()> {
        self.not_allocated("expand")?;
        let mut new = 0usize;
        let mut seen = HashSet::new();
        let mut stack: Vec<_> = ts.iter().map(|t| t.raw()).collect();
        while let Some(p) = stack.pop() {
            if self.members.contains(&p) || !seen.insert(p) {
                continue;
            }
            new += 1;
            // SAFETY: tensors reachable from a live tensor are live (lifetimes tie them).
            for &s in unsafe { &(*p).src } {
                if !s.is_null() {
                    stack.push(s);
                }
            }
        }
        if self.members.len() + new > self.size {
            return Err(Error::Capacity(format!(
                "graph of size {} cannot take {new} more tensors ({} already); create it larger",
                self.size,
                self.members.len()
            )));
        }
        for t in ts {
            // SAFETY: capacity checked.
            unsafe { sys::ggml_build_forward_expand(self.raw(), t.raw()) };
        }
        self.refresh_members();
        Ok(())
    }

    /// Add the nodes appended since the last refresh, and their operands, to `members`: the
    /// same set as [`raw_lists`](Self::raw_lists)'s nodes and leaves, in time linear in the
    /// new nodes (rebuilding it from every node after each `expand` made building a deep
    /// model's graph quadratic: 57 s for a 400-layer toy GPT-2).
    fn refresh_members(&mut self) {
        // SAFETY: live graph; indices in range; operands of live nodes are live.
        unsafe {
            let n = sys::ggml_graph_n_nodes(self.raw()) as usize;
            for i in self.members_nodes..n {
                let t = sys::ggml_graph_node(self.raw(), i as i32);
                self.members.insert(t);
                self.members.extend((*t).src.iter().copied().filter(|s| !s.is_null()));
            }
            self.members_nodes = n;
        }
    }

    /// Nodes (in execution order) and leaves (operands that are not nodes:
    /// inputs and constants) of the graph.
    fn raw_lists(&self) -> (Vec<*mut sys::ggml_tensor>, Vec<*mut sys::ggml_tensor>) {
        // SAFETY: live graph; indices in range; operands of live nodes are live.
        unsafe {
            let n = sys::ggml_graph_n_nodes(self.raw());
            let nodes: Vec<*mut sys::ggml_tensor> = (0..n).map(|i| sys::ggml_graph_node(self.raw(), i)).collect();
            let set: HashSet<*mut sys::ggml_tensor> = nodes.iter().copied().collect();
            let mut seen = HashSet::new();
            let mut leafs = Vec::new();
            for &t in &nodes {
                for &s in &(*t).src {
                    if !s.is_null() && !set.contains(&s) && seen.insert(s) {
                        leafs.push(s);
                    }
                }
            }
            (nodes, leafs)
        }
    }

    /// The op nodes, in execution order.
    pub fn nodes(&self) -> Vec<Tensor<'a>> {
        self.raw_lists().0.into_iter().filter_map(|p| self.ctx.wrap(p).ok()).collect()
    }

    /// The leaves (inputs and constants; parameters count as nodes, as in ggml).
    pub fn leafs(&self) -> Vec<Tensor<'a>> {
        self.raw_lists().1.into_iter().filter_map(|p| self.ctx.wrap(p).ok()).collect()
    }

    /// Number of op nodes.
    pub fn n_nodes(&self) -> usize {
        // SAFETY: live graph.
        unsafe { sys::ggml_graph_n_nodes(self.raw()) as usize }
    }

    /// True when `t` is part of the graph.
    pub fn contains(&self, t: Tensor<'_>) -> bool {
        self.members.contains(&t.raw())
    }

    /// Add the backward pass for `loss` (`ggml_set_loss` + `ggml_build_backward_expand`):
    /// afterwards [`grad`](Self::grad) gives the gradient of every parameter the
    /// loss depends on. Gradients are recomputed from scratch on every compute
    /// (no accumulation across runs).
    ///
    /// # Errors
    /// [`Error::Backward`] when the graph was not created [`with_grads`](Self::with_grads),
    /// `loss` is not a one-element f32 node of the graph or is detached, no parameter reaches it,
    /// an op on the way has no backward in ggml, or ggml's backward would abort on
    /// the graph (a broadcast second operand of `sub`/`div` needing a gradient; a
    /// `permute`/`transpose` whose strided gradient its operand's backward cannot
    /// take, which a `reshape` in front of it fixes); [`Error::Capacity`] when the
    /// graph (or the context for the new gradient tensors) is not at least 8× the
    /// forward node count.
    pub fn build_backward(&mut self, loss: Tensor<'a>) -> Result<()> {
        self.backward_impl(loss, &[])
    }

    /// How [`build_backward`](Self::build_backward) will differentiate the
    /// graph's matrix products (default [`MulMatGrad::MulMat`]; pick
    /// [`MulMatGrad::for_backend`] of the backend that will run the graph).
    pub fn set_mul_mat_grad(&mut self, mode: MulMatGrad) {
        self.mul_mat_grad = mode;
    }

    /// Like [`build_backward`](Self::build_backward), but each parameter's
    /// gradient is added into its accumulator (a tensor of the parameter's shape
    /// in an allocated context, so it outlives the graph): `(param, accumulator)`
    /// pairs. Call [`reset_grads`](Self::reset_grads) before each compute unless
    /// accumulating over several batches is intended. Another graph (an optimizer
    /// update) can then read the accumulators without recomputing this one.
    pub fn build_backward_accumulate(&mut self, loss: Tensor<'a>, accumulators: &[(Tensor<'a>, Tensor<'a>)]) -> Result<()> {
        for (p, acc) in accumulators {
            if p.ne() != acc.ne() || acc.dtype() != DType::F32 || !acc.is_allocated() || acc.op() != sys::GGML_OP_NONE {
                return Err(Error::Backward(format!(
                    "accumulator {:?} must be an allocated f32 leaf shaped like {:?}",
                    acc.name(),
                    p.name()
                )));
            }
        }
        self.backward_impl(loss, accumulators)
    }

    fn backward_impl(&mut self, loss: Tensor<'a>, accumulators: &[(Tensor<'a>, Tensor<'a>)]) -> Result<()> {
        self.not_allocated("build_backward")?;
        if !self.grads {
            return Err(Error::Backward("the graph was created without gradients (use Graph::with_grads)".into()));
        }
        if self.loss.is_some() {
            return Err(Error::Backward("backward was already built".into()));
        }
        // A leaf as the loss (a parameter itself): ggml differentiates nodes, so the
        // loss is taken through a view of it, whose gradient is the leaf's (1 for itself).
        let loss = if loss.op() == sys::GGML_OP_NONE && !loss.is_view() { self.ctx.reshape(loss, &loss.shape())? } else { loss };
        if !self.contains(loss) {
            self.expand(loss)?;
        }
        if loss.nelements() != 1 || loss.dtype() != DType::F32 {
            return Err(Error::Backward(format!("the loss must be a one-element f32 tensor, not {:?}", loss)));
        }
        if loss.is_detached() {
            return Err(Error::Backward("the loss is detached (Context::detach): it passes no gradient".into()));
        }
        let nodes = self.nodes();
        backward::check_differentiable(&nodes)?;
        let n = nodes.len();
        if self.size < self.members.len() + 8 * n {
            return Err(Error::Capacity(format!(
                "graph of size {} is too small for the backward of {n} nodes (need {})",
                self.size,
                self.members.len() + 8 * n
            )));
        }
        self.ctx.reserve("build_backward", 8 * n)?;
        // ggml indexes accumulators by forward node index.
        let mut accs: Vec<*mut sys::ggml_tensor> = vec![std::ptr::null_mut(); nodes.len()];
        for (p, acc) in accumulators {
            let i = nodes
                .iter()
                .position(|n| n.raw() == p.raw())
                .ok_or_else(|| Error::Backward(format!("parameter {:?} is not in the graph", p.name())))?;
            accs[i] = acc.raw();
        }
        let accs_ptr = if accumulators.is_empty() { std::ptr::null_mut() } else { accs.as_mut_ptr() };
        let mode = match self.mul_mat_grad {
            MulMatGrad::MulMat => sys::GGML_MUL_MAT_GRAD_MUL_MAT,
            MulMatGrad::OutProd => sys::GGML_MUL_MAT_GRAD_OUT_PROD,
        };
        for n in nodes.iter().filter(|n| n.op() == sys::GGML_OP_MUL_MAT) {
            // SAFETY: a MUL_MAT node of this graph; sets op_params[2] only.
            unsafe { sys::ggml_mul_mat_set_grad(n.raw(), mode) };
        }
        // SAFETY: preconditions of ggml_set_loss and ggml_build_backward_expand checked above.
        unsafe {
            sys::ggml_set_loss(loss.raw());
            sys::ggml_build_backward_expand(self.ctx.raw(), self.raw(), accs_ptr);
            // The seed gradient d loss/d loss = 1 must survive every run: never reuse its memory.
            let seed = sys::ggml_graph_get_grad_acc(self.raw(), loss.raw());
            if !seed.is_null() {
                sys::ggml_set_output(seed);
            }
        }
        self.loss = Some(loss.raw());
        self.refresh_members();
        // A parameter read through permute/transpose gets a strided view as its
        // gradient. Optimizer steps read gradients with the parameter's strides
        // and `Tensor::read` needs contiguous data, so give it a contiguous copy.
        for p in nodes.iter().filter(|n| n.is_param()) {
            // SAFETY: backward built; lookup only.
            let g = unsafe { sys::ggml_graph_get_grad(self.raw(), p.raw()) };
            if g.is_null() || unsafe { sys::ggml_is_contiguous(g) } {
                continue;
            }
            let c = self.ctx.cont(self.ctx.wrap(g)?)?;
            self.expand(c)?;
            self.cont_grads.insert(p.raw(), c.raw());
        }
        Ok(())
    }

    /// Zero the gradient accumulators and set the loss seed to 1
    /// (`ggml_graph_reset`), before a compute.
    ///
    /// # Errors
    /// [`Error::Compute`] unless the graph has a backward pass and is allocated.
    pub fn reset_grads(&mut self) -> Result<()> {
        if self.loss.is_none() || self.alloc.is_none() {
            return Err(Error::Compute("reset_grads needs an allocated graph with a backward pass".into()));
        }
        for n in self.nodes() {
            if n.op() == sys::GGML_OP_OPT_STEP_ADAMW {
                return Err(Error::Compute("reset_grads would also clear the AdamW moments of this graph".into()));
            }
        }
        // SAFETY: allocated graph with gradients; every accumulator is allocated.
        unsafe { sys::ggml_graph_reset(self.raw()) };
        Ok(())
    }

    /// The gradient of the loss with respect to `t`, once backward is built and
    /// if `t` influences the loss. For parameters it is always contiguous (a
    /// copy is added to the graph where ggml's is a strided view) and f32, as
    /// parameters are; an intermediate's has its type (bf16 for the bf16
    /// products and activations of toy-rs patches 0041-0055).
    pub fn grad(&self, t: Tensor<'_>) -> Option<Tensor<'a>> {
        if !self.grads || self.loss.is_none() {
            return None;
        }
        if let Some(&c) = self.cont_grads.get(&t.raw()) {
            return self.ctx.wrap(c).ok();
        }
        // SAFETY: graph with gradients; lookup only.
        let g = unsafe { sys::ggml_graph_get_grad(self.raw(), t.raw()) };
        if g.is_null() {
            None
        } else {
            self.ctx.wrap(g).ok()
        }
    }

    /// Run the graph. Inputs start as zeros at allocation and keep what was
    /// last written from one run to the next. Indices fed to `get_rows` are checked against
    /// the table size first.
    ///
    /// # Errors
    /// [`Error::Compute`] when the graph is not allocated, an index is out of
    /// range, or a backend reports failure; [`Error::Op`] when an optimizer
    /// attached to the graph has no step prepared
    /// ([`Optimizer::prepare_step`](crate::optim::Optimizer::prepare_step)),
    /// or its prepared step already ran and was not finished. A check that fails runs nothing:
    /// outputs keep the values of the last run that succeeded (a backend's
    /// failure may leave them partly written); read them only after `Ok`.
    pub fn compute(&mut self) -> Result<()> {
        self.compute_async()?;
        self.synchronize();
        Ok(())
    }

    /// Start the graph (`ggml_backend_sched_graph_compute_async`) and return
    /// before a device backend has finished it, so graphs on several devices run
    /// at once; [`synchronize`](Self::synchronize) waits. The CPU backend
    /// computes before returning. Checks as [`compute`](Self::compute).
    pub fn compute_async(&mut self) -> Result<()> {
        let alloc = self.alloc.as_ref().ok_or_else(|| Error::Compute("allocate the graph before computing it".into()))?;
        self.step_gates.iter().try_for_each(|g| g.check())?;
        for &t in &alloc.external {
            // SAFETY: the tensor structs live in contexts that outlive the graph.
            if unsafe { (*t).data.is_null() } {
                let name = unsafe { CStr::from_ptr((*t).name.as_ptr()) }.to_string_lossy().into_owned();
                return Err(Error::Compute(format!("{name:?}: its data belonged to a graph that no longer exists")));
            }
        }
        for (ids, rows, table) in &alloc.index_checks {
            let t = self.ctx.wrap(*ids)?;
            let v: Vec<i32> = t.read()?;
            if let Some((i, &bad)) = v.iter().enumerate().find(|(_, &x)| x < 0 || x as i64 >= *rows) {
                return Err(Error::Compute(format!(
                    "get_rows: index {bad} at position {i} of the indices {} is outside the {rows} rows of the table {}",
                    crate::ops::label(&t),
                    crate::ops::label_of(table)
                )));
            }
        }
        // SAFETY: allocated graph; inputs are plain memory the user wrote.
        let st = unsafe { sys::ggml_backend_sched_graph_compute_async(alloc.sched.as_ptr(), self.raw()) };
        if st != sys::GGML_STATUS_SUCCESS {
            return Err(Error::Compute(format!("ggml status {st}: {}", log::take_last_error().unwrap_or_default())));
        }
        self.step_gates.iter().for_each(|g| g.ran());
        if let Some(a) = self.alloc.as_mut() {
            a.ran();
        }
        Ok(())
    }

    /// Make computes of this graph follow `gate`'s steps (an optimizer's
    /// nodes were added to it).
    pub(crate) fn add_step_gate(&mut self, gate: std::sync::Arc<crate::optim::StepGate>) {
        self.step_gates.push(gate);
    }

    /// Whether an optimizer attached to this graph steps the parameter at address `p`.
    pub(crate) fn steps_param(&self, p: usize) -> bool {
        self.step_gates.iter().any(|g| g.steps(p))
    }

    /// Whether `gate` was added by [`add_step_gate`](Self::add_step_gate).
    pub(crate) fn has_step_gate(&self, gate: &std::sync::Arc<crate::optim::StepGate>) -> bool {
        self.step_gates.iter().any(|g| std::sync::Arc::ptr_eq(g, gate))
    }

    /// Wait until the graph started by [`compute_async`](Self::compute_async)
    /// has finished on every backend (a no-op for an unallocated graph).
    pub fn synchronize(&self) {
        if let Some(a) = &self.alloc {
            // SAFETY: live scheduler.
            unsafe { sys::ggml_backend_sched_synchronize(a.sched.as_ptr()) };
        }
    }

    /// The backend each node runs on (after [`allocate`](Self::allocate)).
    pub fn placements(&self) -> Vec<Placement> {
        let Some(alloc) = &self.alloc else { return Vec::new() };
        let (nodes, _) = self.raw_lists();
        nodes
            .into_iter()
            .map(|n| {
                // SAFETY: live scheduler and nodes.
                unsafe {
                    let b = sys::ggml_backend_sched_get_tensor_backend(alloc.sched.as_ptr(), n);
                    Placement {
                        name: CStr::from_ptr((*n).name.as_ptr()).to_string_lossy().into_owned(),
                        op: CStr::from_ptr(sys::ggml_op_desc(n)).to_string_lossy().into_owned(),
                        backend: if b.is_null() {
                            "?".into()
                        } else {
                            CStr::from_ptr(sys::ggml_backend_name(b)).to_string_lossy().into_owned()
                        },
                    }
                }
            })
            .collect()
    }

    /// Nodes that do real work (not views or reshapes) on the CPU although the
    /// first backend is another device: the ops that device could not run.
    pub fn cpu_fallbacks(&self) -> Vec<Placement> {
        let Some(alloc) = &self.alloc else { return Vec::new() };
        if alloc.backends.first().map(|b| b.is_cpu()).unwrap_or(true) {
            return Vec::new();
        }
        let cpu = alloc.backends.last().unwrap().name();
        self.placements()
            .into_iter()
            .filter(|p| p.backend == cpu && !matches!(p.op.as_str(), "NONE" | "VIEW" | "RESHAPE" | "PERMUTE" | "TRANSPOSE"))
            .collect()
    }

    /// Bytes of compute buffers the scheduler holds, per backend name.
    pub fn buffer_sizes(&self) -> Vec<(String, usize)> {
        let Some(alloc) = &self.alloc else { return Vec::new() };
        alloc
            .backends
            .iter()
            // SAFETY: live scheduler and backends.
            .map(|b| (b.name(), unsafe { sys::ggml_backend_sched_get_buffer_size(alloc.sched.as_ptr(), b.raw()) }))
            .collect()
    }

    /// Number of graph splits (backend switches) the scheduler made.
    pub fn n_splits(&self) -> usize {
        // SAFETY: live scheduler.
        self.alloc.as_ref().map(|a| unsafe { sys::ggml_backend_sched_get_n_splits(a.sched.as_ptr()) } as usize).unwrap_or(0)
    }

    fn release(&mut self) {
        if let Some(a) = self.alloc.take() {
            a.forget_computed();
            // SAFETY: the tensors in `owned` got their data from this scheduler's
            // buffers; clear it before freeing them so no handle can reach it.
            unsafe {
                for &t in &a.owned {
                    (*t).data = std::ptr::null_mut();
                    (*t).buffer = std::ptr::null_mut();
                }
                sys::ggml_backend_sched_free(a.sched.as_ptr());
            }
        }
    }
}

/// Bytes of the arena for a graph of `size` nodes: ggml's own count
/// (`ggml_graph_overhead_custom`) once a bound on it is known not to overflow.
///
/// # Errors
/// [`Error::Capacity`] past ggml's limit of `i32::MAX` nodes or when the size overflows.
fn graph_bytes(size: usize, grads: bool) -> Result<usize> {
    let too_large = || Error::Capacity(format!("a graph of {size} nodes is too large; ggml graphs hold at most {} nodes", i32::MAX));
    if size > i32::MAX as usize {
        return Err(too_large());
    }
    // ggml's count is under 1 KiB a node (node and leaf pointers, a hash set of
    // at most 4·size slots with its gradient pointers): where that bound does not
    // overflow, neither does ggml's own sum.
    size.checked_mul(1 << 10).filter(|&b| b <= isize::MAX as usize).ok_or_else(too_large)?;
    // SAFETY: a pure size computation, which cannot overflow below the bound above.
    Ok(unsafe { sys::ggml_graph_overhead_custom(size, grads) } + 1024)
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        self.release();
        // SAFETY: we own the graph's context.
        unsafe { sys::ggml_free(self.gctx.as_ptr()) };
    }
}
