//! One module per `toy` command; each is a plain function a test can call.

pub mod debug;
pub mod devices;
pub mod train;
