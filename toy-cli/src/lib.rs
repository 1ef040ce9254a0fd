//! `toy`: train small transformer language models from scratch on ggml.
//!
//! The binary is a thin layer over this library: [`cli`] parses arguments,
//! [`commands`] holds one function per command, and the concepts live in their
//! own modules — [`model`], [`train`], [`data`], [`run`], [`formats`].

pub mod cli;
pub mod commands;
pub mod config;
pub mod data;
pub mod donor;
pub mod error;
pub mod files;
pub mod formats;
pub mod model;
pub mod output;
pub mod rng;
pub mod run;
pub mod sample;
pub mod signals;
pub mod train;
