//! The toy-cli integration tests, one binary: cargo runs test binaries one
//! after another, and the tests of one binary side by side; one binary is
//! also linked once. Each module is one subject.

mod accum;
mod chat;
mod chat_data;
mod cli_data;
mod cli_errors;
mod common;
mod data;
mod finetune;
mod hostile;
mod model;
mod parallel;
mod precision;
mod prep_inputs;
mod quant_base;
mod qwen2;
mod qwen2_fixture;
mod reliability;
mod reliability10;
mod reliability11;
mod reliability12;
mod reliability13;
mod reliability14;
mod reliability3_data;
mod reliability3_models;
mod reliability3_runs;
mod reliability4_inputs;
mod reliability4_output;
mod reliability5;
mod reliability6;
mod reliability7;
mod reliability8;
mod reliability9;
mod run_safety;
mod warm_start2;
