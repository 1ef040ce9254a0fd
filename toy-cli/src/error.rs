//! Errors of the `toy` command: bad input (exit 2) or a failure while running (exit 1).

/// What went wrong, as one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's input is wrong: a flag, a path, a file's content. Exit code 2.
    #[error("{0}")]
    Input(String),
    /// Something failed while running (out of memory, a write that failed). Exit code 1.
    #[error("{0}")]
    Runtime(String),
    /// The run was interrupted by a signal (exit 130 for SIGINT, 143 for SIGTERM)
    /// after saving; the message says where and how to resume.
    #[error("{1}")]
    Interrupted(i32, String),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) => 2,
            Error::Runtime(_) => 1,
            Error::Interrupted(sig, _) => 128 + sig,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for a bad-input error.
pub fn input(msg: impl Into<String>) -> Error {
    Error::Input(msg.into())
}

/// An error while building `what` (a step's graph): bad input when the
/// machine cannot hold it, a failure otherwise.
pub fn building(what: &str, e: ggml_rs::Error) -> Error {
    match Error::from(e) {
        Error::Input(m) => Error::Input(format!("{what}: {m}")),
        other => Error::Runtime(format!("cannot build {what}: {other}")),
    }
}

/// What an out-of-memory error advises, for the command that runs: its own
/// flags only (set once by the command; the default names none).
static OOM_ADVICE: std::sync::Mutex<&str> = std::sync::Mutex::new("use a smaller model");

/// Make out-of-memory errors of this process advise `advice` (e.g. "use a
/// smaller --batch or --context"): the command's own flags.
pub fn set_oom_advice(advice: &'static str) {
    *OOM_ADVICE.lock().unwrap_or_else(|p| p.into_inner()) = advice;
}

fn oom_advice() -> &'static str {
    *OOM_ADVICE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Shorthand for a runtime failure.
pub fn runtime(msg: impl Into<String>) -> Error {
    Error::Runtime(msg.into())
}

impl From<ggml_rs::Error> for Error {
    fn from(e: ggml_rs::Error) -> Self {
        match e {
            // A malformed file or an impossible shape comes from the user's input.
            ggml_rs::Error::Gguf { .. } | ggml_rs::Error::Op { .. } => Error::Input(e.to_string()),
            ggml_rs::Error::Backend(m) => Error::Input(m),
            // A shape the machine cannot hold is the user's choice to change.
            ggml_rs::Error::OutOfMemory { .. } => Error::Input(format!("{e} ({})", oom_advice())),
            // A file the user named that cannot be opened (missing, unreadable): as
            // every command's own checks of its paths say (exit 2).
            ggml_rs::Error::Io { ref source, .. }
                if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied) =>
            {
                Error::Input(e.to_string())
            }
            other => Error::Runtime(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// A model file that cannot be opened is the user's input (exit 2) in every
    /// command; a failing write (a full disk) stays a runtime failure (exit 1).
    #[test]
    fn unreadable_files_are_input_and_failed_writes_runtime() {
        let io = |kind| ggml_rs::Error::Io { path: "m.gguf".into(), source: std::io::Error::from(kind) };
        for kind in [std::io::ErrorKind::PermissionDenied, std::io::ErrorKind::NotFound] {
            assert!(matches!(Error::from(io(kind)), Error::Input(_)), "{kind:?}");
        }
        assert!(matches!(Error::from(io(std::io::ErrorKind::StorageFull)), Error::Runtime(_)));
    }

    /// Out of memory is input (exit 2) and advises what the running command
    /// set: its own flags, none by default (generate takes no --batch).
    #[test]
    fn out_of_memory_advises_the_commands_own_flags() {
        let oom = || ggml_rs::Error::OutOfMemory { device: "CPU".into(), what: "x".into(), needed_mib: 2, free_mib: 1 };
        let e = Error::from(oom());
        assert!(matches!(e, Error::Input(_)) && e.to_string().ends_with("(use a smaller model)"), "{e}");
        super::set_oom_advice("use a smaller --batch or --context");
        assert!(Error::from(oom()).to_string().ends_with("(use a smaller --batch or --context)"));
        super::set_oom_advice("use a smaller model");
    }
}
