//! [`Graph::flag_side_branches`]: the nodes of a backward pass that only
//! lead to parameters' gradients, which a backend may run beside the rest.

use super::Graph;
use crate::error::{Error, Result};
use ggml_sys as sys;
use std::collections::{HashMap, HashSet};

type RawTensor = *mut sys::ggml_tensor;

impl Graph<'_> {
    /// Flag (`GGML_TENSOR_FLAG_SIDE`, toy-rs patch 0060) the nodes that nothing
    /// reads but other flagged nodes and the optimizer's tail, that are not the
    /// gradient of an activation, that hold at most `max_elements` values, and
    /// that are a matrix product or are computed from a flagged one: the
    /// products and casts that end in a parameter's gradient (LoRA's
    /// `dA = x·dhᵀ` `[in, r]` and `dB` `[r, out]`). CUDA runs runs of them on a
    /// second stream, beside the gradient of the activations that the next
    /// products wait for; other backends ignore the flag, and no value changes.
    /// Returns how many nodes were flagged.
    ///
    /// The tail is every node that reads a parameter's gradient, directly or
    /// through another tail node (the gradient norm's sums, the clip, AdamW).
    /// An activation is a node computed from the graph's inputs (leaves
    /// without data, or marked as inputs) other than through a detached view
    /// ([`Context::detach`](crate::Context::detach)); the gradients of activations are
    /// the backward's main path, which the next layer's products wait for,
    /// and stay where they are. A flagged node writes a buffer of its own (not
    /// in place), or is a view (which writes nothing) read only by flagged or
    /// tail nodes.
    ///
    /// # Errors
    /// [`Error::Compute`] when the graph is already allocated or has no
    /// backward pass.
    pub fn flag_side_branches(&mut self, max_elements: usize) -> Result<usize> {
        self.not_allocated("flag_side_branches")?;
        if !self.grads || self.loss.is_none() {
            return Err(Error::Compute("flag_side_branches: the graph has no backward pass".into()));
        }
        // SAFETY: live graph; its node array has n_nodes entries.
        let nodes: Vec<RawTensor> = unsafe {
            let n = sys::ggml_graph_n_nodes(self.raw()) as usize;
            std::slice::from_raw_parts(sys::ggml_graph_nodes(self.raw()), n).to_vec()
        };
        let (grads, main) = self.gradients(&nodes);
        let flagged = side_branches(&nodes, &grads, &main, max_elements);
        for &t in &flagged {
            // SAFETY: a node of this live graph, not yet allocated.
            unsafe { (*t).flags |= sys::GGML_TENSOR_FLAG_SIDE as i32 };
        }
        Ok(flagged.len())
    }

    /// The gradients of the parameters among `nodes` (contiguous where
    /// [`Graph::grad`] gives a copy), and those of the activations.
    fn gradients(&self, nodes: &[RawTensor]) -> (HashSet<RawTensor>, HashSet<RawTensor>) {
        // SAFETY (all blocks): tensors of this live graph; lookups only.
        let flag = |t: RawTensor, f: sys::ggml_tensor_flag| unsafe { (*t).flags & f as i32 != 0 };
        let data_input = |t: RawTensor| unsafe {
            (*t).op == sys::GGML_OP_NONE
                && !flag(t, sys::GGML_TENSOR_FLAG_PARAM)
                && (flag(t, sys::GGML_TENSOR_FLAG_INPUT) || ((*t).data.is_null() && (*t).view_src.is_null()))
        };
        let mut activation: HashSet<RawTensor> = HashSet::new();
        for &t in nodes {
            let srcs = unsafe { (*t).src };
            // a detached view (Context::detach) passes no gradient: what reads it is no activation for it
            if flag(t, sys::GGML_TENSOR_FLAG_DETACHED) {
                continue;
            }
            if srcs.iter().any(|&s| !s.is_null() && (data_input(s) || activation.contains(&s))) {
                activation.insert(t);
            }
        }
        let grad = |t: RawTensor| {
            let g = unsafe { [sys::ggml_graph_get_grad(self.raw(), t), sys::ggml_graph_get_grad_acc(self.raw(), t)] };
            g.into_iter().filter(|g| !g.is_null())
        };
        // What the optimizer reads: the contiguous copy where there is one.
        let params = nodes.iter().copied().filter(|&t| flag(t, sys::GGML_TENSOR_FLAG_PARAM));
        let grads = params.flat_map(|p| match self.cont_grads.get(&p) {
            Some(&c) => vec![c],
            None => grad(p).collect(),
        });
        let grads = grads.collect();
        let main = activation.iter().flat_map(|&t| grad(t)).collect();
        (grads, main)
    }
}

/// The nodes of `nodes` (in graph order) that [`Graph::flag_side_branches`]
/// flags, given the parameters' gradients and those of the activations.
fn side_branches(nodes: &[RawTensor], grads: &HashSet<RawTensor>, main: &HashSet<RawTensor>, max_elements: usize) -> Vec<RawTensor> {
    // SAFETY (all blocks): nodes of a live graph and their operands are live.
    let srcs = |t: RawTensor| unsafe { (*t).src }.into_iter().filter(|s| !s.is_null());
    // The tail, in graph order: readers of a gradient or of the tail.
    let mut tail: HashSet<RawTensor> = HashSet::new();
    for &t in nodes {
        if srcs(t).any(|s| grads.contains(&s) || tail.contains(&s)) {
            tail.insert(t);
        }
    }
    let mut readers: HashMap<RawTensor, Vec<RawTensor>> = HashMap::new();
    for &t in nodes {
        for s in srcs(t) {
            readers.entry(s).or_default().push(t);
        }
    }
    // Readers come after what they read: decide in reverse graph order.
    let mut side: HashSet<RawTensor> = HashSet::new();
    for &t in nodes.iter().rev() {
        // A view (a transposed gradient, say) writes nothing: it follows its readers.
        let op = unsafe { (*t).op };
        let view = matches!(op, sys::GGML_OP_VIEW | sys::GGML_OP_RESHAPE | sys::GGML_OP_PERMUTE | sys::GGML_OP_TRANSPOSE);
        let own_buffer = unsafe { (*t).view_src.is_null() } && op != sys::GGML_OP_NONE;
        let small = unsafe { sys::ggml_nelements(t) } as usize <= max_elements;
        let read = readers.get(&t).is_some_and(|r| r.iter().all(|c| side.contains(c) || tail.contains(c)));
        if (view || (own_buffer && small)) && read && !tail.contains(&t) && !main.contains(&t) {
            side.insert(t);
        }
    }
    // Only what hangs off a matrix product: a branch without one (a norm's gain
    // gradient, a reduction of a few hundred values) costs its stream's fork and
    // wait more than it saves.
    let mut kept: HashSet<RawTensor> = HashSet::new();
    for &t in nodes {
        let op = unsafe { (*t).op };
        let product = matches!(op, sys::GGML_OP_MUL_MAT | sys::GGML_OP_OUT_PROD);
        if side.contains(&t) && (product || srcs(t).any(|s| kept.contains(&s))) {
            kept.insert(t);
        }
    }
    nodes.iter().copied().filter(|t| kept.contains(t)).collect()
}
