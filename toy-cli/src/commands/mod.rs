//! One module per `toy` command; each is a plain function a test can call.

pub mod debug;
pub mod describe;
pub mod devices;
pub mod eval;
pub mod export;
pub mod finetune;
pub mod generate;
pub mod new;
pub mod prep;
pub mod resume;
pub mod setup;
pub mod train;
pub mod warm_start;
