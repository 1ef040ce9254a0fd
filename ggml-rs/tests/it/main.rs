//! The ggml-rs integration tests, one binary: cargo runs test binaries one
//! after another, and the tests of one binary side by side; one binary is
//! also linked once. Each module is one subject.

mod activations;
mod attention;
mod bf16_logits;
mod bias_bf16;
mod common;
mod cross_entropy;
mod errors;
mod gguf;
mod gguf_hostile;
mod gguf_strings;
mod grad;
mod kept;
mod kernels;
mod linkage;
mod merged;
mod misuse;
mod misuse2;
mod misuse3;
mod misuse4;
mod norm_back;
mod ops;
mod optim;
mod optim_many;
mod products;
mod qkv_bf16;
mod quant;
mod recompute;
mod sgemm;
mod side;
