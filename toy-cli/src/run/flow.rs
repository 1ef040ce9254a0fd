//! `flow.json`: the training graph described once after it is built.

use crate::error::Result;
use ggml_rs::{Graph, Tensor};
use serde_json::{json, Value};
use std::path::Path;

/// `role` of a tensor: weight > loss > input > output, else ephemeral (op
/// result) or constant (leaf). (An input is flagged an output too where a
/// view of it is read after compute: it is still what the caller writes.)
fn role(t: &Tensor<'_>, is_node: bool) -> &'static str {
    if t.is_param() {
        "weight"
    } else if t.is_loss() {
        "loss"
    } else if t.is_input() {
        "input"
    } else if t.is_output() {
        "output"
    } else if is_node {
        "ephemeral"
    } else {
        "constant"
    }
}

fn describe(t: &Tensor<'_>, is_node: bool) -> Value {
    let shape: Vec<String> = t.shape().iter().map(|n| n.to_string()).collect();
    json!({
        "name": t.name(),
        "role": role(t, is_node),
        "shape": shape.join("×"),
        "dtype": t.dtype().name(),
        "nelements": t.nelements(),
        "nbytes": t.nbytes(),
        "op": t.op_name(),
    })
}

/// The graph as a `toy/v1` flow document: leaves first, then nodes in execution order.
pub fn flow_json(graph: &Graph<'_>) -> Value {
    let leafs = graph.leafs();
    let nodes = graph.nodes();
    let mut all: Vec<Value> = leafs.iter().map(|t| describe(t, false)).collect();
    all.extend(nodes.iter().map(|t| describe(t, true)));
    json!({
        "format": "toy/v1",
        "nodes": all,
        "summary": { "n_leafs": leafs.len(), "n_nodes": nodes.len() },
    })
}

/// Write `flow.json` for `graph` into `dir` (atomically).
pub fn write_flow(dir: &Path, graph: &Graph<'_>) -> Result<()> {
    let text = serde_json::to_string_pretty(&flow_json(graph)).expect("serializable");
    crate::files::write_atomic(&dir.join("flow.json"), text.as_bytes())
}
