//! The error type of the safe API.

use std::path::PathBuf;

/// Everything that can go wrong in `ggml_rs`. Each variant names what failed and
/// why, so the message can be shown to a user as one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op's operands do not satisfy its preconditions (shapes in ggml `ne` order).
    #[error("{op}: {msg}")]
    Op {
        /// The op (method) that refused its operands (`"mul_mat"`, `"view"`, ...).
        op: &'static str,
        /// What is wrong.
        msg: String,
    },

    /// A context, graph or buffer has no room left.
    #[error("capacity: {0}")]
    Capacity(String),

    /// A tensor was used in a way its state does not allow (not allocated, wrong dtype, ...).
    #[error("tensor {}: {msg}", shown_name(.name))]
    Tensor {
        /// The tensor's name (empty when unset).
        name: String,
        /// What is wrong.
        msg: String,
    },

    /// No such device or backend, or a backend could not be started.
    #[error("backend: {0}")]
    Backend(String),

    /// The graph cannot be differentiated or has no parameters / loss.
    #[error("backward: {0}")]
    Backward(String),

    /// ggml reported a failure while allocating or computing.
    #[error("compute: {0}")]
    Compute(String),

    /// A buffer would not fit in a device's free memory (checked before asking ggml).
    #[error("out of memory on {device}: {what} need {needed_mib} MiB, {free_mib} MiB are free")]
    OutOfMemory {
        /// The device (`"CPU"`, `"CUDA0"`).
        device: String,
        /// What the memory was for.
        what: String,
        /// MiB (2²⁰ bytes) needed, rounded up.
        needed_mib: u64,
        /// MiB free on the device (or left under the process's address-space limit).
        free_mib: u64,
    },

    /// A GGUF file is malformed or unsupported.
    #[error("{}{msg}", gguf_prefix(path))]
    Gguf {
        /// The file (empty when the error concerns data not yet written).
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },

    /// An I/O error, with the file it concerns.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn op(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Op { op, msg: msg.into() }
    }

    pub(crate) fn gguf(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Gguf { path: path.into(), msg: msg.into() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

/// `path: ` before a GGUF error's message, or nothing for data not yet written.
fn gguf_prefix(path: &std::path::Path) -> String {
    if path.as_os_str().is_empty() {
        "gguf: ".into()
    } else {
        format!("{}: ", path.display())
    }
}

/// A tensor's name as [`Error::Tensor`] says it: quoted, or "(unnamed)" for
/// an empty name (as the ops' messages name unnamed operands).
fn shown_name(name: &str) -> String {
    // quoted, or "(unnamed)" for no name and the names ggml gives unnamed tensors
    crate::ops::label_of(name)
}
