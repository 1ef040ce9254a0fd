//! [`Graph::hoist_param_casts`]: the step's low-precision copies of its
//! trainable parameters first in the graph, where a backend can run them as
//! one launch.

use super::Graph;
use crate::error::Result;
use ggml_sys as sys;
use std::collections::HashSet;

type RawTensor = *mut sys::ggml_tensor;

impl Graph<'_> {
    /// Move to the front of the graph, before every other op, the nodes that
    /// depend on trainable parameters alone and make their bf16 or f16 copies:
    /// casts (`ggml_cast`, a CPY into itself) of parameters, and the SCALEs or
    /// PADs of parameters that such casts read (LoRA's `cast(s·A)`, a training
    /// head's `cast(pad(W))`). The SCALEs and PADs come first, then the
    /// casts, each kind in graph order, so that the casts stand in one run: CUDA
    /// runs a run of f32 → bf16 casts as one launch (toy-rs patch 0057), where
    /// each was a launch of its own, spread through the forward pass. Returns
    /// how many nodes moved.
    ///
    /// Casts of frozen weights (leaves that are not parameters) move too where
    /// they are kept for the backward ([`crate::Context::cast_kept`]), after
    /// the parameters' and grouped by source type (graph order within a type),
    /// so that each type's copies stand in one run as well (toy-rs patch 0061);
    /// other casts of frozen weights stay where they are, next to the product
    /// that reads them.
    ///
    /// The order is valid whatever the graph: a moved node reads parameters,
    /// frozen leaves or moved nodes only. The copies then live from the graph's
    /// start to their last use (the backward's), as autocast's cache of cast
    /// weights does: half the bytes of the f32 parameters they copy, at most,
    /// and 2 bytes a weight for a frozen weight's kept bf16 copy.
    ///
    /// # Errors
    /// [`crate::Error::Compute`] when the graph is already allocated.
    pub fn hoist_param_casts(&mut self) -> Result<usize> {
        self.not_allocated("hoist_param_casts")?;
        // SAFETY: live graph; `ggml_graph_nodes` is its array of n_nodes pointers,
        // rewritten below as a permutation of itself.
        let nodes: &mut [RawTensor] = unsafe {
            let n = sys::ggml_graph_n_nodes(self.raw()) as usize;
            std::slice::from_raw_parts_mut(sys::ggml_graph_nodes(self.raw()), n)
        };
        let (scales, casts) = param_copies(nodes);
        if casts.is_empty() {
            return Ok(0);
        }
        let moved: HashSet<RawTensor> = scales.iter().chain(casts.iter()).copied().collect();
        let rest: Vec<RawTensor> = nodes.iter().copied().filter(|t| !moved.contains(t)).collect();
        // Parameters (nodes without an op) first, as before; then the copies; then the rest.
        let (params, ops): (Vec<RawTensor>, Vec<RawTensor>) = rest.into_iter().partition(|&t| unsafe { (*t).op } == sys::GGML_OP_NONE);
        let order: Vec<RawTensor> = params.into_iter().chain(scales).chain(casts).chain(ops).collect();
        debug_assert_eq!(order.len(), nodes.len());
        nodes.copy_from_slice(&order);
        Ok(moved.len())
    }
}

/// The SCALEs and PADs of parameters and the bf16/f16 casts among `nodes`
/// computed from parameters alone, in graph order, then the kept casts of
/// frozen leaves by source type. A SCALE or PAD counts only where a cast reads it.
fn param_copies(nodes: &[RawTensor]) -> (Vec<RawTensor>, Vec<RawTensor>) {
    // SAFETY (all blocks): tensors of a live graph and their operands are live.
    let is_cast = |t: RawTensor| unsafe {
        (*t).op == sys::GGML_OP_CPY && (*t).src[1] == t && matches!((*t).type_, sys::GGML_TYPE_BF16 | sys::GGML_TYPE_F16)
    };
    let param = |t: RawTensor| unsafe { (*t).op == sys::GGML_OP_NONE && (*t).flags & sys::GGML_TENSOR_FLAG_PARAM as i32 != 0 };
    let mut scaled: HashSet<RawTensor> = HashSet::new();
    for &t in nodes {
        if matches!(unsafe { (*t).op }, sys::GGML_OP_SCALE | sys::GGML_OP_PAD) && param(unsafe { (*t).src[0] }) {
            scaled.insert(t);
        }
    }
    let mut casts: Vec<RawTensor> = nodes
        .iter()
        .copied()
        .filter(|&t| {
            is_cast(t) && {
                let s = unsafe { (*t).src[0] };
                param(s) || scaled.contains(&s)
            }
        })
        .collect();
    let kept_leaf = |t: RawTensor| unsafe {
        (*t).op == sys::GGML_OP_CPY
            && (*t).src[1] == t
            && (*t).flags & sys::GGML_TENSOR_FLAG_KEEP as i32 != 0
            && (*(*t).src[0]).op == sys::GGML_OP_NONE
            && (*(*t).src[0]).flags & sys::GGML_TENSOR_FLAG_PARAM as i32 == 0
    };
    let mut kept: Vec<RawTensor> = nodes.iter().copied().filter(|&t| kept_leaf(t)).collect();
    kept.sort_by_key(|&t| unsafe { (*(*t).src[0]).type_ }); // stable: graph order within a type
    casts.extend(kept);
    let read: HashSet<RawTensor> = casts.iter().map(|&t| unsafe { (*t).src[0] }).collect();
    let scales = nodes.iter().copied().filter(|t| scaled.contains(t) && read.contains(t)).collect();
    (scales, casts)
}
