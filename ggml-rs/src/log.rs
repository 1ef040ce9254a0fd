//! ggml's log and abort callbacks, routed to Rust.
//!
//! [`init`] runs once, before any other call into ggml made by this crate. By
//! default warnings and errors go to stderr as `ggml: ...` lines and everything
//! else is dropped; [`set_handler`] replaces that. A ggml abort (a failed
//! `GGML_ASSERT`, which the checks in this crate exist to prevent) prints one
//! `ggml: fatal: ...` line and ends the process without launching a debugger.

use ggml_sys as sys;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, Once};

/// Severity of a ggml log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Detail for debugging ggml (`GGML_LOG_LEVEL_DEBUG`).
    Debug,
    /// Progress and configuration (`GGML_LOG_LEVEL_INFO`).
    Info,
    /// Something unexpected that ggml worked around (`GGML_LOG_LEVEL_WARN`).
    Warn,
    /// A failure ggml reports (`GGML_LOG_LEVEL_ERROR`).
    Error,
}

type Handler = Box<dyn Fn(LogLevel, &str) + Send + Sync>;
type SharedHandler = std::sync::Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

struct LogState {
    /// Called without the lock held: a handler may call back into this module.
    handler: Option<SharedHandler>,
    pending: String,
    pending_level: LogLevel,
    last_error: Option<String>,
}

static STATE: Mutex<LogState> =
    Mutex::new(LogState { handler: None, pending: String::new(), pending_level: LogLevel::Info, last_error: None });
static INIT: Once = Once::new();

/// Install the callbacks. Idempotent; called by every entry point of this crate.
pub fn init() {
    INIT.call_once(|| {
        // ggml prints a backtrace through gdb on abort unless this is set; our
        // abort callback already replaces that path, this covers C++ terminate.
        std::env::set_var("GGML_NO_BACKTRACE", "1");
        // SAFETY: both callbacks are `extern "C"` functions that never unwind.
        unsafe {
            sys::ggml_log_set(Some(log_callback), std::ptr::null_mut());
            sys::ggml_set_abort_callback(Some(abort_callback));
        }
    });
}

/// Replace the log handler. `None` restores the default (warnings and errors to stderr).
pub fn set_handler(handler: Option<Handler>) {
    init();
    STATE.lock().unwrap_or_else(|e| e.into_inner()).handler = handler.map(std::sync::Arc::from);
}

/// The last error line ggml logged, if any (used to explain a failed allocation).
pub fn take_last_error() -> Option<String> {
    STATE.lock().unwrap_or_else(|e| e.into_inner()).last_error.take()
}

unsafe extern "C" fn log_callback(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    let result = std::panic::catch_unwind(|| {
        if text.is_null() {
            return;
        }
        // SAFETY: ggml passes a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let lvl = match level {
            sys::GGML_LOG_LEVEL_DEBUG => LogLevel::Debug,
            sys::GGML_LOG_LEVEL_INFO => LogLevel::Info,
            sys::GGML_LOG_LEVEL_WARN => LogLevel::Warn,
            sys::GGML_LOG_LEVEL_ERROR => LogLevel::Error,
            _ => st.pending_level, // CONT and NONE continue the current line
        };
        if level != sys::GGML_LOG_LEVEL_CONT && level != sys::GGML_LOG_LEVEL_NONE {
            st.pending_level = lvl;
        }
        st.pending.push_str(&text);
        let mut lines = Vec::new();
        while let Some(pos) = st.pending.find('\n') {
            let line: String = st.pending.drain(..=pos).collect();
            let line = line.trim_end().to_string();
            if st.pending_level == LogLevel::Error {
                st.last_error = Some(line.clone());
            }
            lines.push((st.pending_level, line));
        }
        let handler = st.handler.clone();
        drop(st);
        for (level, line) in lines {
            match &handler {
                Some(h) => h(level, &line),
                None if level >= LogLevel::Warn => eprintln!("ggml: {line}"),
                None => {}
            }
        }
    });
    let _ = result;
}

unsafe extern "C" fn abort_callback(msg: *const c_char) {
    let _ = std::panic::catch_unwind(|| {
        let msg = if msg.is_null() {
            "unknown".into()
        } else {
            // SAFETY: ggml passes a NUL-terminated string.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        eprintln!("ggml: fatal: {msg} (a precondition this library does not check yet; please report it)");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A handler may call back into this module (it deadlocked: the state's
    /// lock was held while the handler ran).
    #[test]
    fn a_handler_may_call_back_into_the_log() {
        const MARK: &str = "toy-log-reentry-test";
        let (tx, rx) = mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        set_handler(Some(Box::new(move |level, line: &str| {
            if line.contains(MARK) {
                let taken = take_last_error();
                let _ = tx.lock().unwrap().send((level, taken));
            }
        })));
        std::thread::spawn(|| {
            let text = std::ffi::CString::new(format!("{MARK}: an error\n")).unwrap();
            // SAFETY: a NUL-terminated string, as ggml passes.
            unsafe { log_callback(sys::GGML_LOG_LEVEL_ERROR, text.as_ptr(), std::ptr::null_mut()) };
        });
        let got = rx.recv_timeout(Duration::from_secs(20));
        set_handler(None);
        let (level, taken) = got.expect("the handler ran without deadlocking");
        assert_eq!(level, LogLevel::Error);
        assert_eq!(taken.as_deref(), Some(&*format!("{MARK}: an error")));
    }
}
