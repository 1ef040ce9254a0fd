//! Contexts own tensor metadata; tensors are handles that cannot outlive them.
//!
//! A [`Context`] is a ggml context created with `no_alloc`: it holds tensor
//! descriptions only. Data lives either in backend buffers the context owns
//! ([`Context::allocate`], for weights and other persistent state) or in the
//! compute buffers of a [`Graph`](crate::Graph) allocated through the backend
//! scheduler (for intermediate values). A [`Tensor`] borrows its context, so no
//! handle to freed metadata can exist in safe code; data is reachable only while
//! the buffer holding it is alive (see [`Tensor::read`]).

use crate::arena::Arena;
use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;

mod io;

/// Maximum number of dimensions of a ggml tensor.
pub const MAX_DIMS: usize = sys::GGML_MAX_DIMS as usize;

struct OwnedBuffer {
    ptr: sys::ggml_backend_buffer_t,
    // Keeps the backend (and so its device context) alive as long as the buffer.
    _backend: Backend,
}

/// A ggml context: an arena of tensor descriptions with a fixed capacity.
pub struct Context {
    ptr: NonNull<sys::ggml_context>,
    max_tensors: usize,
    buffers: RefCell<Vec<OwnedBuffer>>,
    /// The arenas of other contexts (and graphs) whose tensors an op result
    /// of this one reads or views ([`Context::note_sources`]).
    reads: RefCell<Vec<u64>>,
    /// The host memory of the descriptions; dropped after `ggml_free`.
    arena: Arena,
}

impl Context {
    /// A context with room for `max_tensors` tensor descriptions (views and op
    /// results included; about 370 bytes of host memory each; a `max_tensors`
    /// of 0 is taken as 1). Creating more returns [`Error::Capacity`].
    ///
    /// # Errors
    /// [`Error::Capacity`] when the descriptions' size overflows or the host
    /// cannot allocate it; [`Error::OutOfMemory`] past the process's
    /// address-space limit.
    pub fn new(max_tensors: usize) -> Result<Context> {
        log::init();
        let max_tensors = max_tensors.max(1);
        // SAFETY: pure size computation.
        let per = unsafe { sys::ggml_tensor_overhead() };
        let mem_size = max_tensors
            .checked_mul(per)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Error::Capacity(format!("a context of {max_tensors} tensors ({per} bytes each) is too large")))?;
        let mut arena = Arena::new(mem_size, "the tensors of a context")?;
        // SAFETY: the arena is aligned and at least mem_size bytes, and lives as
        // long as the context (a field dropped after ggml_free).
        let ptr = unsafe { sys::ggml_init(arena.params()) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::Capacity(format!("cannot allocate a context of {mem_size} bytes")))?;
        Ok(Context { ptr, max_tensors, buffers: RefCell::new(Vec::new()), reads: RefCell::new(Vec::new()), arena })
    }

    /// The number of tensors this context can hold.
    pub fn capacity(&self) -> usize {
        self.max_tensors
    }

    /// How many more tensors fit.
    pub fn remaining(&self) -> usize {
        // SAFETY: live context.
        let (used, size, per) =
            unsafe { (sys::ggml_used_mem(self.ptr.as_ptr()), sys::ggml_get_mem_size(self.ptr.as_ptr()), sys::ggml_tensor_overhead()) };
        size.saturating_sub(used) / per
    }

    /// Fail with [`Error::Capacity`] unless `n` more tensors fit.
    pub(crate) fn reserve(&self, op: &str, n: usize) -> Result<()> {
        let left = self.remaining();
        if left < n {
            return Err(Error::Capacity(format!(
                "{op}: the context is full ({left} of its {} tensors left, {n} needed); create it with a larger capacity",
                self.max_tensors
            )));
        }
        Ok(())
    }

    pub(crate) fn raw(&self) -> *mut sys::ggml_context {
        self.ptr.as_ptr()
    }

    /// Record the other contexts' arenas that op result `t` reads or views.
    pub(crate) fn note_sources(&self, t: &Tensor<'_>) {
        let r = t.get();
        // (most operands are this context's own: no lookup in the live arenas for them)
        for &src in r.src.iter().chain(std::iter::once(&r.view_src)).filter(|&&s| !s.is_null() && !self.arena.contains(s as usize)) {
            match crate::arena::owner(src as usize) {
                Some(id) if !self.reads.borrow().contains(&id) => self.reads.borrow_mut().push(id),
                _ => {}
            }
        }
    }

    /// Refuse when a tensor of this context reads or views one of a context
    /// (or graph) that has been dropped: ggml would read its freed description.
    fn check_reads(&self, op: &'static str) -> Result<()> {
        if self.reads.borrow().iter().all(|&id| crate::arena::is_live(id)) {
            return Ok(());
        }
        Err(Error::op(
            op,
            "a tensor of this context reads or views a tensor of a context (or graph) that has been \
             dropped; keep that one alive while this context is allocated"
                .to_string(),
        ))
    }

    /// Refuse a view of another context's tensor that has no memory yet: ggml
    /// would place the view on it (`ggml_backend_view_init`) and assert.
    fn check_view_sources(&self) -> Result<()> {
        for t in self.all_tensors() {
            let r = t.get();
            if r.view_src.is_null() || !r.data.is_null() {
                continue;
            }
            // SAFETY: a live source (check_reads: its context is alive).
            let src = unsafe { &*r.view_src };
            if src.data.is_null() && !self.arena.contains(r.view_src as usize) {
                // SAFETY: ggml's names are NUL-terminated within the struct.
                let name = unsafe { std::ffi::CStr::from_ptr(src.name.as_ptr()) }.to_string_lossy();
                return Err(Error::op(
                    "allocate",
                    format!(
                        "{} views {}, a tensor of another context that has no memory yet: allocate that context first",
                        crate::ops::label(&t),
                        crate::ops::label_of(&name)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Wrap a tensor pointer that belongs to (or outlives) this context.
    pub(crate) fn wrap<'a>(&'a self, t: *mut sys::ggml_tensor) -> Result<Tensor<'a>> {
        NonNull::new(t)
            .map(|ptr| Tensor { ptr, _ctx: PhantomData })
            .ok_or_else(|| Error::Capacity("ggml returned no tensor (context full?)".into()))
    }

    /// A new tensor of `dtype` with shape `ne` (ggml order: `ne[0]` is the
    /// contiguous dimension; 1 to 4 dimensions, each ≥ 1).
    ///
    /// # Errors
    /// [`Error::Op`] for a bad shape or a row length that is not a multiple of a
    /// quantized type's block; [`Error::Capacity`] when the context is full.
    pub fn new_tensor(&self, dtype: DType, ne: &[i64]) -> Result<Tensor<'_>> {
        check_shape("new_tensor", dtype, ne)?;
        self.reserve("new_tensor", 1)?;
        // SAFETY: shape validated; context has room.
        let t = unsafe { sys::ggml_new_tensor(self.raw(), dtype.to_raw(), ne.len() as i32, ne.as_ptr()) };
        self.wrap(t)
    }

    /// A new 1-d tensor `[ne0]`.
    pub fn new_tensor_1d(&self, dtype: DType, ne0: i64) -> Result<Tensor<'_>> {
        self.new_tensor(dtype, &[ne0])
    }

    /// A new 2-d tensor `[ne0, ne1]` (`ne1` rows of `ne0` elements).
    pub fn new_tensor_2d(&self, dtype: DType, ne0: i64, ne1: i64) -> Result<Tensor<'_>> {
        self.new_tensor(dtype, &[ne0, ne1])
    }

    /// A new 3-d tensor `[ne0, ne1, ne2]`.
    pub fn new_tensor_3d(&self, dtype: DType, ne0: i64, ne1: i64, ne2: i64) -> Result<Tensor<'_>> {
        self.new_tensor(dtype, &[ne0, ne1, ne2])
    }

    /// Allocate every tensor of this context that has no data yet in one buffer
    /// of `backend` (`ggml_backend_alloc_ctx_tensors`). The buffer is owned by the
    /// context and freed with it. Tensors created later can be allocated by
    /// another call. The memory is zeroed.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the tensors do not fit in the device's free
    /// memory (checked first), [`Error::Backend`] when the allocation fails anyway;
    /// [`Error::Op`] when a tensor of this context views another context's
    /// tensor that has no memory yet, or reads one of a context that was
    /// dropped (then for good: the context keeps that tensor; make a new one).
    pub fn allocate(&self, backend: &Backend) -> Result<()> {
        self.check_reads("allocate")?;
        crate::graph::forget_stale_views(self.all_tensors().map(|t| t.raw()));
        self.check_view_sources()?;
        // SAFETY: live context and backend. NULL means "nothing to allocate" or failure.
        let pending: Vec<Tensor<'_>> = self.all_tensors().filter(|t| !t.is_allocated() && !t.is_view()).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let needed: u64 = pending.iter().map(|t| t.nbytes() as u64 + 512).sum();
        crate::backend::check_fits(backend, needed, "the tensors of a context")?;
        let buf = unsafe { sys::ggml_backend_alloc_ctx_tensors(self.raw(), backend.raw()) };
        if buf.is_null() {
            let why = log::take_last_error().unwrap_or_default();
            return Err(Error::Backend(format!("cannot allocate tensors on {}: out of memory? {why}", backend.name())));
        }
        // SAFETY: fresh buffer.
        unsafe { sys::ggml_backend_buffer_clear(buf, 0) };
        self.buffers.borrow_mut().push(OwnedBuffer { ptr: buf, _backend: backend.clone() });
        Ok(())
    }

    /// Total bytes of the buffers this context owns.
    pub fn allocated_bytes(&self) -> usize {
        // SAFETY: live buffers.
        self.buffers.borrow().iter().map(|b| unsafe { sys::ggml_backend_buffer_get_size(b.ptr) }).sum()
    }

    /// Iterate over the tensors of the context in creation order that are
    /// made from this context's tensors alone. An op result that reads or
    /// views a tensor of another context (a graph over another context's
    /// weights) is left out: a handle from here would be tied to this context
    /// only and could outlive that one; keep the handle the op returned, whose
    /// lifetime is bounded by both.
    pub fn tensors(&self) -> impl Iterator<Item = Tensor<'_>> + '_ {
        let mut own: HashSet<*mut sys::ggml_tensor> = HashSet::new();
        self.all_tensors().filter(move |t| {
            // Sources come before their results: each is known by the time it is read.
            let r = t.get();
            let ok = r.src.iter().chain(std::iter::once(&r.view_src)).all(|&s| s.is_null() || own.contains(&s));
            if ok {
                own.insert(t.raw());
            }
            ok
        })
    }

    /// Every tensor of the context in creation order, whatever it reads.
    fn all_tensors(&self) -> impl Iterator<Item = Tensor<'_>> + '_ {
        // SAFETY: live context; the list is stable while we borrow it.
        let mut cur = unsafe { sys::ggml_get_first_tensor(self.raw()) };
        std::iter::from_fn(move || {
            let t = NonNull::new(cur)?;
            // SAFETY: `t` is a tensor of this context.
            cur = unsafe { sys::ggml_get_next_tensor(self.raw(), t.as_ptr()) };
            Some(Tensor { ptr: t, _ctx: PhantomData })
        })
    }

    /// The tensor named `name`, if any, among [`tensors`](Self::tensors) (not
    /// an op result that reads another context's tensors).
    pub fn get(&self, name: &str) -> Option<Tensor<'_>> {
        self.tensors().find(|t| t.name() == name)
    }

    /// Mark `t` as a trainable parameter (`ggml_set_param`): backward computes its
    /// gradient. It must be an f32 leaf (created by `new_tensor`, not an op
    /// result): gradients, and the AdamW and SGD steps, are f32 (a compact
    /// copy for the forward is a [`cast`](Self::cast) of it).
    ///
    /// # Errors
    /// [`Error::Tensor`] for an op result or a type other than f32.
    pub fn set_param(&self, t: Tensor<'_>) -> Result<()> {
        if t.op() != sys::GGML_OP_NONE {
            return Err(t.err("only leaf tensors (not op results) can be parameters"));
        }
        if t.dtype() != DType::F32 {
            return Err(t.err(format!("parameters must be f32, not {} (train an f32 copy and cast it for the forward)", t.dtype())));
        }
        // SAFETY: checked above.
        unsafe { sys::ggml_set_param(t.raw()) };
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        for b in self.buffers.get_mut().drain(..) {
            // SAFETY: we own the buffer; no tensor of ours can be used after this.
            unsafe { sys::ggml_backend_buffer_free(b.ptr) };
        }
        // SAFETY: we own the context.
        unsafe { sys::ggml_free(self.ptr.as_ptr()) };
    }
}

pub(crate) fn check_shape(op: &'static str, dtype: DType, ne: &[i64]) -> Result<()> {
    if ne.is_empty() || ne.len() > MAX_DIMS {
        return Err(Error::op(op, format!("tensors have 1 to {MAX_DIMS} dimensions, not {}", ne.len())));
    }
    if let Some(d) = ne.iter().position(|&n| n < 1) {
        return Err(Error::op(op, format!("dimension {d} is {} in {ne:?}; every dimension must be ≥ 1", ne[d])));
    }
    let mut total: i64 = 1;
    for &n in ne {
        total = total.checked_mul(n).ok_or_else(|| Error::op(op, format!("shape {ne:?} overflows")))?;
    }
    if ne[0] % dtype.block_size() != 0 {
        return Err(Error::op(op, format!("ne0 = {} is not a multiple of the {dtype} block size {}", ne[0], dtype.block_size())));
    }
    let bytes = dtype.type_size() as u128 * (ne[0] / dtype.block_size()) as u128 * (total / ne[0]) as u128;
    if bytes > (isize::MAX as u128) {
        return Err(Error::op(op, format!("shape {ne:?} of {dtype} is too large")));
    }
    Ok(())
}

/// A handle to a tensor of a [`Context`]; `Copy`, valid while the context lives.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tensor<'a> {
    ptr: NonNull<sys::ggml_tensor>,
    _ctx: PhantomData<&'a Context>,
}

impl std::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {}, ne={:?})", self.name(), self.dtype(), self.shape())
    }
}

impl<'a> Tensor<'a> {
    pub(crate) fn raw(&self) -> *mut sys::ggml_tensor {
        self.ptr.as_ptr()
    }

    fn get(&self) -> &sys::ggml_tensor {
        // SAFETY: the context that owns the tensor outlives 'a and this borrow.
        unsafe { self.ptr.as_ref() }
    }

    pub(crate) fn err(&self, msg: impl Into<String>) -> Error {
        Error::Tensor { name: self.name(), msg: msg.into() }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        // ggml made the tensor with this type, so from_raw knows it.
        DType::from_raw(self.get().type_).unwrap_or(DType::F32)
    }

    /// All four dimensions, ggml order (`ne[0]` contiguous); unused ones are 1.
    pub fn ne(&self) -> [i64; 4] {
        self.get().ne
    }

    /// Strides in bytes for each dimension.
    pub fn nb(&self) -> [usize; 4] {
        self.get().nb
    }

    /// The shape with trailing dimensions of 1 removed (at least one dimension).
    pub fn shape(&self) -> Vec<i64> {
        let ne = self.ne();
        let n = (1..=4).rev().find(|&i| ne[i - 1] != 1).unwrap_or(1);
        ne[..n].to_vec()
    }

    /// Number of dimensions as ggml counts them (`ggml_n_dims`).
    pub fn n_dims(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    pub fn nelements(&self) -> i64 {
        self.ne().iter().product()
    }

    /// Bytes the data takes (`ggml_nbytes`).
    pub fn nbytes(&self) -> usize {
        // SAFETY: live tensor.
        unsafe { sys::ggml_nbytes(self.raw()) }
    }

    /// The name (empty when unset).
    pub fn name(&self) -> String {
        // SAFETY: ggml keeps a NUL-terminated name of at most 63 bytes.
        unsafe { CStr::from_ptr(self.get().name.as_ptr()) }.to_string_lossy().into_owned()
    }

    /// Set the name (at most 63 bytes; longer names are an error).
    pub fn set_name(&self, name: &str) -> Result<Tensor<'a>> {
        if name.len() >= sys::GGML_MAX_NAME as usize || name.contains('\0') {
            return Err(Error::op("set_name", format!("{name:?}: names are at most 63 bytes without NUL")));
        }
        let c = std::ffi::CString::new(name).expect("checked");
        // SAFETY: valid C string within the length limit.
        unsafe { sys::ggml_set_name(self.raw(), c.as_ptr()) };
        Ok(*self)
    }

    /// The ggml op that produces this tensor (`GGML_OP_NONE` for leaves).
    pub fn op(&self) -> sys::ggml_op {
        self.get().op
    }

    /// The op's name (`"MUL_MAT"`, `"NONE"`, or the unary/glu op for those).
    pub fn op_name(&self) -> String {
        // SAFETY: live tensor; ggml returns static strings.
        unsafe { CStr::from_ptr(sys::ggml_op_desc(self.raw())) }.to_string_lossy().into_owned()
    }

    /// The operands (`src`) of the op, in order.
    pub fn srcs(&self) -> Vec<Tensor<'a>> {
        self.get().src.iter().filter_map(|&p| NonNull::new(p).map(|ptr| Tensor { ptr, _ctx: PhantomData })).collect()
    }

    /// True for trainable parameters.
    pub fn is_param(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_PARAM as i32 != 0
    }

    /// True when flagged for a side stream ([`crate::Graph::flag_side_branches`]).
    pub fn is_side(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_SIDE as i32 != 0
    }

    /// True for a cast that the backward reads as it is ([`Context::cast_kept`]).
    pub fn is_kept(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_KEEP as i32 != 0
    }

    /// True for an activation that the backward computes again
    /// ([`Context::recompute_in_backward`]).
    pub fn is_recomputed(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_RECOMPUTE as i32 != 0
    }

    /// True for a tensor that passes no gradient ([`Context::detach`]).
    pub fn is_detached(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_DETACHED as i32 != 0
    }

    /// True when marked as a graph input ([`set_input`](Self::set_input)).
    pub fn is_input(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0
    }

    /// True when marked as a graph output ([`set_output`](Self::set_output)).
    pub fn is_output(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_OUTPUT as i32 != 0
    }

    /// True when marked as the loss of a backward pass.
    pub fn is_loss(&self) -> bool {
        self.get().flags & sys::GGML_TENSOR_FLAG_LOSS as i32 != 0
    }

    /// True when the tensor is a view of another tensor's data.
    pub fn is_view(&self) -> bool {
        !self.get().view_src.is_null()
    }

    /// True when the elements are laid out contiguously in ggml order.
    pub fn is_contiguous(&self) -> bool {
        // SAFETY: live tensor.
        unsafe { sys::ggml_is_contiguous(self.raw()) }
    }

    /// True when the tensor's data lives in a buffer (allocated).
    pub fn is_allocated(&self) -> bool {
        let root = self.root();
        !root.buffer.is_null() && !root.data.is_null()
    }

    /// The name of the buffer holding the data (`"CPU"`, `"CUDA0"`), if allocated.
    pub fn buffer_name(&self) -> Option<String> {
        let root = self.root();
        if root.buffer.is_null() {
            return None;
        }
        // SAFETY: non-null buffers are live (see the module docs).
        Some(unsafe { CStr::from_ptr(sys::ggml_backend_buffer_name(root.buffer)) }.to_string_lossy().into_owned())
    }

    /// Mark as a graph input: the scheduler allocates it first and never reuses
    /// its memory, so what was written stays for every compute (and reads back).
    /// Before its graph is allocated: afterwards, the memory is already shared
    /// with other nodes and the mark changes nothing.
    pub fn set_input(&self) -> Tensor<'a> {
        if !self.is_scratch() {
            // SAFETY: flag update on a live tensor.
            unsafe { sys::ggml_set_input(self.raw()) };
        }
        *self
    }

    /// Mark as a graph output: its memory is never reused, so it can be read
    /// after compute. Before its graph is allocated: afterwards, the memory is
    /// already shared with later nodes, the mark changes nothing and
    /// [`read`](Self::read) still refuses it.
    pub fn set_output(&self) -> Tensor<'a> {
        if !self.is_scratch() {
            // SAFETY: flag update on a live tensor.
            unsafe { sys::ggml_set_output(self.raw()) };
        }
        *self
    }

    /// True for data the caller writes: a leaf (no op), or a view of one.
    pub(crate) fn is_written_data(&self) -> bool {
        self.root().op == sys::GGML_OP_NONE
    }

    /// The tensor whose buffer holds the data, and this tensor's byte offset in it.
    fn root(&self) -> &sys::ggml_tensor {
        let t = self.get();
        if t.view_src.is_null() {
            t
        } else {
            // SAFETY: view sources live in a context that outlives the view's (ops tie
            // result lifetimes to all operands).
            unsafe { &*t.view_src }
        }
    }

    /// True for an allocated op result whose memory comes from a graph's compute buffer
    /// and that is flagged neither output, input nor parameter (nor is its
    /// source, for a view): after a compute that memory may hold a later node.
    pub(crate) fn is_scratch(&self) -> bool {
        let keep = (sys::GGML_TENSOR_FLAG_OUTPUT | sys::GGML_TENSOR_FLAG_INPUT | sys::GGML_TENSOR_FLAG_PARAM) as i32;
        self.is_graph_result() && (self.get().flags | self.root().flags) & keep == 0
    }

    /// True for an allocated op result (or a view of one) whose memory comes
    /// from a graph's compute buffer.
    fn is_graph_result(&self) -> bool {
        if !self.is_allocated() {
            return false;
        }
        let root = self.root();
        // SAFETY: allocated, so the root's buffer is live (see the module docs).
        let compute = unsafe { sys::ggml_backend_buffer_get_usage(root.buffer) } == sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE;
        compute && root.op != sys::GGML_OP_NONE
    }

    fn root_offset(&self) -> usize {
        if self.get().view_src.is_null() {
            0
        } else {
            self.get().view_offs
        }
    }
}
