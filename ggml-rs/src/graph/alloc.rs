//! [`Graph::allocate`]: the flags ggml's allocator needs, the checks it would
//! abort on, the backend scheduler, and the compute buffers, measured before
//! they are asked for.

use super::{Allocation, Graph};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::collections::HashSet;
use std::ffi::CStr;
use std::ptr::NonNull;

type RawTensor = *mut sys::ggml_tensor;

/// The compute buffers (addresses) of graphs that have run at least once: an
/// op result in a compute buffer missing here has never been written
/// ([`Tensor::read`](crate::Tensor::read) refuses it). A graph adds its
/// buffers after its first run that succeeds and removes them when its
/// allocation goes away.
static COMPUTED: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

fn computed() -> std::sync::MutexGuard<'static, Vec<usize>> {
    COMPUTED.lock().unwrap_or_else(|e| e.into_inner())
}

impl Allocation {
    /// After a run that succeeded: the first records the buffers that hold
    /// the `owned` tensors' data (the graph's compute buffers) in [`COMPUTED`].
    pub(super) fn ran(&mut self) {
        if self.computed.is_none() {
            // SAFETY: the tensors of a live allocation.
            let mut b: Vec<usize> = self.owned.iter().map(|&t| unsafe { (*t).buffer } as usize).filter(|&b| b != 0).collect();
            b.sort_unstable();
            b.dedup();
            computed().extend_from_slice(&b);
            self.computed = Some(b);
        }
    }

    /// Before the buffers are freed: drop them from [`COMPUTED`].
    pub(super) fn forget_computed(&self) {
        if let Some(buffers) = &self.computed {
            computed().retain(|b| !buffers.contains(b));
        }
    }
}

/// Whether the compute buffer at `buffer` belongs to a graph that has run.
pub(crate) fn is_computed(buffer: *const sys::ggml_backend_buffer) -> bool {
    computed().contains(&(buffer as usize))
}

impl Graph<'_> {
    /// Allocate the graph's intermediate tensors through a backend scheduler over
    /// `backends` (highest priority first; the last must be the CPU, which runs any
    /// op the others cannot). Done once; afterwards write inputs and
    /// [`compute`](Self::compute). Leaves without data (not allocated in a
    /// context) get their memory here and count as inputs, marked or not.
    /// Nodes that no other node reads count as outputs, marked or not; the
    /// memory of other intermediate results is reused by later nodes, so only
    /// those marked with [`Tensor::set_output`](crate::Tensor::set_output)
    /// before this call can be read after a compute.
    ///
    /// Parameters and AdamW moments are state that must persist across runs:
    /// they need memory from their context ([`Context::allocate`](crate::Context::allocate))
    /// first, or the graph would hand them scratch memory it reuses.
    ///
    /// # Errors
    /// [`Error::Tensor`] when a parameter or an AdamW moment of the graph has no
    /// memory yet, or an op result of the graph has memory of another allocated
    /// graph (a tensor belongs to one allocated graph at a time); [`Error::Op`]
    /// when the graph holds an optimizer's update nodes but not that optimizer
    /// (expanded from another graph: it would run them unprepared); [`Error::Backend`] when the backend list is empty or does not
    /// end with the CPU, or a pre-allocated tensor sits on a backend that cannot
    /// run its op; [`Error::Compute`] when allocation fails (out of memory).
    pub fn allocate(&mut self, backends: &[Backend]) -> Result<()> {
        self.not_allocated("allocate")?;
        check_backend_list(backends)?;
        let (nodes, leafs) = self.raw_lists();
        if nodes.is_empty() {
            return Err(Error::Compute("the graph has no nodes".into()));
        }
        forget_stale_views(nodes.iter().chain(leafs.iter()).copied());
        check_state_allocated(&nodes, &leafs)?;
        self.check_steps_gated(&nodes)?;
        check_not_in_other_graph(&nodes)?;
        mark_inputs_and_outputs(&nodes, &leafs);
        let index_checks = index_checks(&nodes);
        keep_inputs(&nodes, &leafs);
        self.check_preallocated(&nodes, backends)?;
        check_runnable(&nodes, backends)?;
        let (owned, external): (Vec<RawTensor>, Vec<RawTensor>) =
            nodes.iter().chain(leafs.iter()).copied().partition(|&t| unsafe { (*t).data.is_null() });
        // Sized for this graph, not for the capacity it was built with (the
        // arena grows with it, ~22 KiB a node): its nodes and leaves twice over,
        // room for the hash set and for what the scheduler adds (input copies,
        // a backend's allocation dependencies).
        let sched = new_scheduler(backends, 2 * (nodes.len() + leafs.len()) + 64)?;
        let alloc = Allocation { sched, backends: backends.to_vec(), owned, external, index_checks, computed: None };
        let ok = match self.place(sched, backends) {
            Ok(ok) => ok,
            Err(e) => {
                // SAFETY: nothing allocated yet.
                unsafe { sys::ggml_backend_sched_free(sched.as_ptr()) };
                return Err(e);
            }
        };
        self.alloc = Some(alloc);
        if !ok {
            let why = log::take_last_error().unwrap_or_else(|| "out of memory?".into());
            self.release();
            return Err(Error::Compute(format!("cannot allocate the graph: {why}")));
        }
        self.zero_inputs();
        self.seed_loss();
        Ok(())
    }

    /// Inputs that got their memory here start as zeros (not what the memory
    /// held before), until the caller writes them.
    fn zero_inputs(&self) {
        let Some(alloc) = &self.alloc else { return };
        for &t in &alloc.owned {
            // SAFETY: allocated now (a view has its source's memory, not its own).
            unsafe {
                let flags = (*t).flags;
                if flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 && (*t).view_src.is_null() && !(*t).buffer.is_null() {
                    sys::ggml_backend_tensor_memset(t, 0, 0, sys::ggml_nbytes(t));
                }
            }
        }
    }

    /// Allocate the graph's compute buffers with `sched`; `Ok(false)` when ggml
    /// fails to.
    ///
    /// What the compute buffers would take on each backend is measured before
    /// asking for them: refuse what does not fit with one clear error instead
    /// of ggml's allocation failures (and, on Linux, instead of memory that
    /// overcommit grants and the OOM killer takes back).
    ///
    /// Each split of a graph over several backends rewires its nodes to input
    /// copies that the next split frees (ggml_backend_sched_split_graph), so
    /// such a graph is split once, by the allocation itself, and a device
    /// without room fails there (no overcommit on GPUs). A single backend
    /// makes no copies: it is measured first.
    fn place(&self, sched: NonNull<sys::ggml_backend_sched>, backends: &[Backend]) -> Result<bool> {
        if backends.len() > 1 {
            // SAFETY: fresh scheduler, graph built.
            return Ok(unsafe { sys::ggml_backend_sched_alloc_graph(sched.as_ptr(), self.raw()) });
        }
        let mut sizes = vec![0usize; backends.len()];
        // SAFETY: fresh scheduler sized for the graph; one size per backend.
        unsafe { sys::ggml_backend_sched_reserve_size(sched.as_ptr(), self.raw(), sizes.as_mut_ptr()) };
        for (b, &size) in backends.iter().zip(&sizes) {
            crate::backend::check_fits(b, size as u64, "the graph's compute buffers")?;
        }
        // The measure leaves the allocator's layout in place without its buffers:
        // reserve them (ggml_backend_sched_reserve) before the graph is placed in them.
        // SAFETY: fresh scheduler, graph built.
        Ok(unsafe {
            sys::ggml_backend_sched_reserve(sched.as_ptr(), self.raw()) && sys::ggml_backend_sched_alloc_graph(sched.as_ptr(), self.raw())
        })
    }

    /// Set the loss's gradient seed (allocated now) to 1, when the graph has a backward pass.
    fn seed_loss(&self) {
        if let Some(loss) = self.loss {
            // SAFETY: backward built; the seed is allocated now.
            let seed = unsafe { sys::ggml_graph_get_grad_acc(self.raw(), loss) };
            if !seed.is_null() {
                let one = 1.0f32;
                unsafe { sys::ggml_backend_tensor_set(seed, (&one as *const f32).cast(), 0, 4) };
            }
        }
    }

    /// Pre-allocated tensors run where their buffer is; ggml aborts when that
    /// backend cannot run the op, so refuse such graphs here.
    fn check_preallocated(&self, nodes: &[RawTensor], backends: &[Backend]) -> Result<()> {
        for &n in nodes {
            // SAFETY: live nodes and buffers.
            unsafe {
                let node = &*n;
                let root = if node.view_src.is_null() { n } else { node.view_src };
                if (*root).buffer.is_null() || node.op == sys::GGML_OP_NONE {
                    continue;
                }
                let buft = sys::ggml_backend_buffer_get_type((*root).buffer);
                let ok =
                    backends.iter().any(|b| sys::ggml_backend_supports_buft(b.raw(), buft) && sys::ggml_backend_supports_op(b.raw(), n));
                if !ok {
                    let name = CStr::from_ptr(node.name.as_ptr()).to_string_lossy();
                    let op = CStr::from_ptr(sys::ggml_op_desc(n)).to_string_lossy();
                    return Err(Error::Backend(format!("{name} ({op}) writes into a buffer whose backend cannot run {op}")));
                }
            }
        }
        Ok(())
    }
}

/// Refuse a node that no backend of the list can run (a bf16 product on the
/// CPU alone, say): ggml's scheduler would abort on it.
fn check_runnable(nodes: &[RawTensor], backends: &[Backend]) -> Result<()> {
    for &n in nodes {
        // SAFETY: live nodes and backends.
        unsafe {
            let node = &*n;
            if node.op == sys::GGML_OP_NONE || crate::backward::is_view_op(node.op) {
                continue;
            }
            if !backends.iter().any(|b| sys::ggml_backend_supports_op(b.raw(), n)) {
                let name = crate::ops::label_of(&CStr::from_ptr(node.name.as_ptr()).to_string_lossy());
                let op = CStr::from_ptr(sys::ggml_op_desc(n)).to_string_lossy();
                let typed = |t: &sys::ggml_tensor| format!("{} {:?}", CStr::from_ptr(sys::ggml_type_name(t.type_)).to_string_lossy(), t.ne);
                let operands: Vec<String> = node.src.iter().filter(|s| !s.is_null()).map(|&s| typed(&*s)).collect();
                let names: Vec<String> = backends.iter().map(|b| b.name()).collect();
                return Err(Error::Backend(format!(
                    "{name}: {op} of {} giving {} runs on none of {}",
                    operands.join(" and "),
                    typed(node),
                    names.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// The scheduler takes at most 16 backends, the CPU last.
fn check_backend_list(backends: &[Backend]) -> Result<()> {
    if backends.is_empty() || !backends.last().unwrap().is_cpu() {
        return Err(Error::Backend("the scheduler needs the CPU backend last in its list".into()));
    }
    if backends.len() > 16 {
        return Err(Error::Backend("at most 16 backends".into()));
    }
    Ok(())
}

/// Clear the data of views that no longer lie where their source's data does:
/// a view made while its source had a graph's memory keeps that address after
/// the graph is dropped (ggml sets a view's data once, when it is made), and
/// ggml would then read freed memory through it. Cleared, the view is placed
/// again on its source's present memory (`ggml_backend_view_init`).
pub(crate) fn forget_stale_views(tensors: impl Iterator<Item = RawTensor>) {
    for t in tensors {
        // SAFETY: live tensors and their view sources (sources outlive their views).
        unsafe {
            let v = &mut *t;
            if v.view_src.is_null() || v.data.is_null() {
                continue;
            }
            let src = &*v.view_src;
            let here = !src.data.is_null()
                && v.data == src.data.cast::<u8>().add(v.view_offs).cast()
                && (v.buffer.is_null() || v.buffer == src.buffer);
            if !here {
                v.data = std::ptr::null_mut();
                v.buffer = std::ptr::null_mut();
            }
        }
    }
}

/// Refuse an op result that another allocated graph gave memory: this graph
/// would compute it again into that memory, which the other graph shares with
/// its later nodes (its outputs among them).
fn check_not_in_other_graph(nodes: &[RawTensor]) -> Result<()> {
    for &t in nodes {
        // SAFETY: live tensors of the graph and their view sources; live buffers.
        unsafe {
            let root = if (*t).view_src.is_null() { t } else { (*t).view_src };
            if (*t).op == sys::GGML_OP_NONE || (*root).op == sys::GGML_OP_NONE || (*root).buffer.is_null() {
                continue;
            }
            if sys::ggml_backend_buffer_get_usage((*root).buffer) == sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE {
                let name = CStr::from_ptr((*t).name.as_ptr()).to_string_lossy().into_owned();
                let msg = "an op result that another allocated graph holds: a tensor belongs to one allocated graph at a time (build it again for this graph, or drop the other first)";
                return Err(Error::Tensor { name, msg: msg.into() });
            }
        }
    }
    Ok(())
}

/// Refuse a parameter, or an AdamW moment (operands 2 and 3 of
/// `opt_step_adamw`), that has no memory: the scheduler would treat it as an
/// input and give it scratch memory, so training would run on garbage.
fn check_state_allocated(nodes: &[RawTensor], leafs: &[RawTensor]) -> Result<()> {
    let unallocated = |t: RawTensor| {
        // SAFETY: live tensors of the graph and their view sources.
        unsafe {
            let root = if (*t).view_src.is_null() { t } else { (*t).view_src };
            (*root).data.is_null()
        }
    };
    let name = |t: RawTensor| unsafe { CStr::from_ptr((*t).name.as_ptr()) }.to_string_lossy().into_owned();
    for &t in nodes.iter().chain(leafs) {
        // SAFETY: live tensors of the graph.
        let (flags, op, src) = unsafe { ((*t).flags, (*t).op, (*t).src) };
        if flags & sys::GGML_TENSOR_FLAG_PARAM as i32 != 0 && unallocated(t) {
            let msg = "parameter without memory: allocate its context (Context::allocate) before allocating the graph";
            return Err(Error::Tensor { name: name(t), msg: msg.into() });
        }
        if op == sys::GGML_OP_OPT_STEP_ADAMW {
            if let Some(&m) = src[2..4].iter().find(|&&m| !m.is_null() && unallocated(m)) {
                let msg =
                    "AdamW moment without memory: allocate the context of the AdamWState (Context::allocate) before allocating the graph";
                return Err(Error::Tensor { name: name(m), msg: msg.into() });
            }
        }
    }
    Ok(())
}

/// The flags ggml's allocator needs and the caller may not have set.
fn mark_inputs_and_outputs(nodes: &[RawTensor], leafs: &[RawTensor]) {
    // A leaf without data can only be written by the caller, so it is an
    // input whether marked or not. Unmarked, the scheduler assigns it no
    // backend when it is reached only through a view (reshape, transpose,
    // ...), and ggml-alloc aborts (`GGML_ASSERT(buffer_id >= 0)`).
    for &t in nodes.iter().chain(leafs.iter()) {
        // SAFETY: live tensors of the graph; flag update only.
        unsafe {
            if (*t).op == sys::GGML_OP_NONE && (*t).view_src.is_null() && (*t).data.is_null() {
                sys::ggml_set_input(t);
            }
        }
    }
    // A node that no other node reads is a result the graph was built for:
    // ggml never frees its memory, so flag it an output (readable after compute).
    let read: HashSet<RawTensor> = nodes
        .iter()
        // SAFETY: live tensors of the graph.
        .flat_map(|&t| unsafe { (*t).src.into_iter().chain([(*t).view_src]) })
        .filter(|s| !s.is_null())
        .collect();
    for &t in nodes.iter().filter(|t| !read.contains(t)) {
        // SAFETY: a live node; flag update only (its view sources included).
        unsafe { sys::ggml_set_output(t) };
    }
    // An output that is a view (a reshape, a cpy into another tensor) reads its
    // source's memory: keep that memory from being reused by later nodes.
    for &t in nodes {
        // SAFETY: live tensors of the graph; flag updates only.
        unsafe {
            let mut v = t;
            while ((*v).flags & sys::GGML_TENSOR_FLAG_OUTPUT as i32) != 0 && !(*v).view_src.is_null() {
                v = (*v).view_src;
                sys::ggml_set_output(v);
            }
        }
    }
}

/// Inputs keep what the caller wrote for every compute: ggml-alloc would
/// otherwise hand an input's memory to a later node (in place, or once its
/// last reader ran), and the next compute would read that node's result.
/// Flagged as outputs, they are never reused (ggml_gallocr_free_node).
fn keep_inputs(nodes: &[RawTensor], leafs: &[RawTensor]) {
    for &t in nodes.iter().chain(leafs) {
        // SAFETY: live tensors of the graph; flag update only.
        unsafe {
            if (*t).flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 {
                sys::ggml_set_output(t);
            }
        }
    }
}

/// The index tensors of `get_rows` fed by a leaf, with the rows of the table
/// they index and its name: made inputs (kept on the host), checked before each run.
fn index_checks(nodes: &[RawTensor]) -> Vec<(RawTensor, i64, String)> {
    let mut checks = Vec::new();
    for &n in nodes {
        // SAFETY: live nodes.
        let node = unsafe { &*n };
        if node.op != sys::GGML_OP_GET_ROWS {
            continue;
        }
        let ids = node.src[1];
        let root = unsafe {
            if (*ids).view_src.is_null() {
                ids
            } else {
                (*ids).view_src
            }
        };
        if unsafe { (*root).op } == sys::GGML_OP_NONE {
            let rows = unsafe { (*node.src[0]).ne[1] };
            if unsafe { (*root).data.is_null() } {
                unsafe { sys::ggml_set_input(root) };
            }
            let name = unsafe { CStr::from_ptr((*node.src[0]).name.as_ptr()) }.to_string_lossy().into_owned();
            // The indices themselves where they are contiguous (a view of part of
            // a leaf reads that part), else the whole leaf they view.
            let checked = if unsafe { sys::ggml_is_contiguous(ids) } { ids } else { root };
            checks.push((checked, rows, name));
        }
    }
    checks
}

/// A backend scheduler over `backends` for graphs of up to `graph_size` nodes
/// and leafs, once the host has room for its arena.
fn new_scheduler(backends: &[Backend], graph_size: usize) -> Result<NonNull<sys::ggml_backend_sched>> {
    let mut raw_backends: Vec<sys::ggml_backend_t> = backends.iter().map(|b| b.raw()).collect();
    // The scheduler's arena (ggml_backend_sched_new: one split per node at
    // most, GGML_SCHED_MAX_SPLIT_INPUTS = 30 inputs each, copies of both
    // sides), allocated twice over: ggml aborts when that fails.
    // SAFETY: size computation.
    let arena =
        graph_size * 30 * 2 * std::mem::size_of::<sys::ggml_tensor>() + unsafe { sys::ggml_graph_overhead_custom(graph_size, false) };
    crate::backend::check_host_arena(2 * arena, "the scheduler's buffers")?;
    // SAFETY: valid backend list with the CPU last.
    let sched = unsafe {
        sys::ggml_backend_sched_new(raw_backends.as_mut_ptr(), std::ptr::null_mut(), raw_backends.len() as i32, graph_size, false, true)
    };
    NonNull::new(sched).ok_or_else(|| Error::Compute("cannot create a scheduler".into()))
}

impl Graph<'_> {
    /// Every optimizer update node (`opt_step_adamw`, `opt_step_sgd`) of `nodes`
    /// belongs to an optimizer attached to this graph, whose step state its
    /// computes follow ([`crate::optim::Optimizer::prepare_step`]).
    fn check_steps_gated(&self, nodes: &[RawTensor]) -> Result<()> {
        for &n in nodes {
            // SAFETY: live nodes of this graph; an update node's src[0] is its parameter.
            let (op, param) = unsafe { ((*n).op, (*n).src[0]) };
            let update = op == sys::GGML_OP_OPT_STEP_ADAMW || op == sys::GGML_OP_OPT_STEP_SGD;
            if update && !self.steps_param(param as usize) {
                let name = unsafe { CStr::from_ptr((*param).name.as_ptr()) }.to_string_lossy().into_owned();
                return Err(Error::op(
                    "allocate",
                    format!(
                        "the update of {name:?} has no optimizer attached to this graph: update nodes run only under an Optimizer (optim::Optimizer::adamw or sgd on this graph), which writes their hyper-parameters each step; one built for another graph belongs to that graph"
                    ),
                ));
            }
        }
        Ok(())
    }
}
