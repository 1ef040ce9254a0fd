//! Misuse a new user of the library reported: each returned `Ok` with wrong
//! results, or aborted the process in ggml, and is now an `Err` with one line.

use crate::errors::{err_with, still_works};
use ggml_rs::{Context, Error, Graph};

#[test]
fn huge_contexts_and_graphs_are_errors() {
    // ggml's own malloc of the arena failed and aborted (mem_buffer != NULL);
    // usize::MAX tensors wrapped the size computation.
    for n in [1usize << 40, usize::MAX] {
        match Context::new(n) {
            Err(e @ Error::Capacity(_)) => println!("{e}"),
            Err(e) => panic!("Context::new({n}): expected Error::Capacity, got {e:?}"),
            Ok(c) => panic!("Context::new({n}) gave a context of {}", c.capacity()),
        }
    }
    let ctx = Context::new(16).unwrap();
    for n in [1usize << 40, usize::MAX] {
        let e = err_with(Graph::new(&ctx, n).map(|g| g.n_nodes()), "too large");
        assert!(matches!(e, Error::Capacity(_)));
        err_with(Graph::with_grads(&ctx, n).map(|g| g.n_nodes()), "too large");
    }
    // Ordinary sizes still work.
    let g = Graph::new(&ctx, 1 << 16).unwrap();
    assert_eq!(g.n_nodes(), 0);
    assert_eq!(Context::new(1 << 16).unwrap().capacity(), 1 << 16);
    still_works();
}
