//! SIGINT/SIGTERM and SIGPIPE for `toy train` (and, for commands that write
//! one file, [`remove_on_interrupt`]).
//!
//! The first SIGINT/SIGTERM asks the loop to stop after the current step (or
//! between a step's micro-batches, `--grad-accum`) and save; a second one only says that it is on its way (so an impatient double
//! Ctrl-C still gets its checkpoint); a third ends the process within 10 ms,
//! removing a run folder that holds no checkpoint yet ([`on_quit`]), else the
//! temporaries of the writes it cut short, and saying whether the checkpoint
//! the first signal asked for was written ([`saved`]) — unless
//! it lands inside a [`critical`] section (a checkpoint and its state being
//! written, an event line, `config.toml`), which no signal cuts: the run then
//! stops as the first signal asked. SIGPIPE is ignored, so a closed stdout
//! (`toy train | head -1`) does not kill a run: its lines are dropped
//! ([`outln!`](crate::outln)) and training goes on.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

static CRITICAL: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Inside [`interruptible`]: a first signal ends that work, with nothing to save.
static PREPARING: AtomicBool = AtomicBool::new(false);
/// Inside a [`preparing`] section: what is being done, for the line a first
/// signal ends the process with (nothing exists yet that a signal could lose).
static PREPARED_WHAT: Mutex<&str> = Mutex::new("");
static IN_PREPARATION: AtomicBool = AtomicBool::new(false);
/// The number of the signal that asked to quit without saving (the third), else 0.
static QUIT: AtomicI32 = AtomicI32::new(0);
/// A checkpoint was written after the first signal ([`saved`]): a third one
/// then quits with it saved, and says so.
static SAVED_SINCE_STOP: AtomicBool = AtomicBool::new(false);

/// For the run folder, when a checkpoint (with its state and `latest`) is
/// written: after a first signal, that is the checkpoint it asked for, and a
/// third signal's line says it is saved instead of "quit without saving".
pub fn saved() {
    if COUNT.load(Ordering::SeqCst) > 0 {
        SAVED_SINCE_STOP.store(true, Ordering::SeqCst);
    }
}

/// What quitting does first, outside the handler ([`on_quit`]): its note, if any.
type OnQuit = Box<dyn Fn() -> Option<String> + Send>;
static ON_QUIT: Mutex<Option<OnQuit>> = Mutex::new(None);

/// Have a quit signal run `f` before the process ends (on a watcher thread, not
/// in the handler: removing a run folder that holds no checkpoint is not
/// async-signal-safe); `f`'s note is printed after the handler's "quit
/// without saving". The last registration wins.
pub fn on_quit(f: OnQuit) {
    if let Ok(mut slot) = ON_QUIT.lock() {
        *slot = Some(f);
    }
}

/// Who reports how the process ends (`--json`'s object, the error line): 0
/// no one yet, [`BY_MAIN`] or [`BY_WATCHER`]; the first to claim it.
static ENDING: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
const BY_MAIN: u8 = 1;
const BY_WATCHER: u8 = 2;

/// Whether `who` reports the end: it claimed it first, or had already.
fn claim_end(who: u8) -> bool {
    match ENDING.compare_exchange(0, who, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        Err(had) => had == who,
    }
}

/// For the main thread, before it reports how the command ended (its JSON
/// object, its error line): a quit signal's watcher may be reporting it already
/// (a signal while the corpus is read ends both the work and the process), and
/// then this waits for the watcher to end the process, so that one object and
/// one line are printed, not two.
pub fn main_reports_end() {
    if !claim_end(BY_MAIN) {
        loop {
            std::thread::park();
        }
    }
}

/// Within 10 ms of a quit signal, outside any [`critical`] section: run
/// [`on_quit`]'s work, print its note and end the process with 128 + the signal
/// (unless the main thread is reporting an end of its own:
/// [`main_reports_end`]).
fn watch_quit() {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let sig = QUIT.load(Ordering::SeqCst);
        if sig == 0 || CRITICAL.load(Ordering::SeqCst) != 0 {
            continue;
        }
        if !claim_end(BY_WATCHER) {
            return;
        }
        let note = match PREPARED_WHAT.lock().ok().map(|w| *w).filter(|_| IN_PREPARATION.load(Ordering::SeqCst)) {
            Some(what) => Some(format!("interrupted while {what}; nothing was saved")),
            None => ON_QUIT.lock().ok().and_then(|f| f.as_ref().and_then(|f| f())),
        };
        if JSON.load(Ordering::SeqCst) {
            let error = note.clone().unwrap_or_else(|| "interrupted".into());
            crate::outln!("{}", crate::train::summary_without_outcome("interrupted", &error, 128 + sig));
        }
        if let Some(note) = note {
            let cmd = COMMAND.lock().map_or("train", |c| *c);
            say(&format!("toy {cmd}: {note}\n"));
        }
        signal_hook::low_level::exit(128 + sig);
    }
}

/// The command whose name [`watch_quit`]'s note starts with.
static COMMAND: Mutex<&str> = Mutex::new("train");

/// `toy train --json`: [`watch_quit`] also prints the run's one JSON object.
static JSON: AtomicBool = AtomicBool::new(false);

/// Make a process that a signal ends before its run returns (while it reads
/// the corpus or loads a model, or at a third signal) print `toy train
/// --json`'s object on stdout: `reason` "interrupted", the note as `error`.
pub fn json_on_quit() {
    JSON.store(true, Ordering::SeqCst);
}

/// For a command that writes one file `out` (`toy export merge`, the debug
/// dumps) to its temporary ([`crate::files::temp_path`]) and renames it: the
/// temporaries that killed writers left beside `out` are removed
/// ([`crate::files::remove_stale_temps`]), and SIGINT or SIGTERM ends the
/// command within 10 ms with this one's removed and the line `toy <cmd>:
/// interrupted; <out> not written`, where the default disposition left a
/// half-written temporary behind. (A temporary created in the instant between
/// the removal and the exit is one that the next write of `out` removes.)
pub fn remove_on_interrupt(cmd: &'static str, out: &Path) {
    crate::files::remove_stale_temps(out);
    let out_path = out.to_path_buf();
    if let Ok(mut c) = COMMAND.lock() {
        *c = cmd;
    }
    let note = format!("interrupted; {} not written", out.display());
    on_quit(Box::new(move || {
        crate::files::remove_own_temps(&out_path);
        Some(note.clone())
    }));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // SAFETY: the handler stores to an atomic, which is async-signal-safe.
        let _ = unsafe { signal_hook::low_level::register(sig, move || QUIT.store(sig, Ordering::SeqCst)) };
    }
    std::thread::spawn(watch_quit);
}

/// Whether stderr is a terminal, where a message starts on a line of its own
/// (a progress line may be open); set by [`install`].
static TTY: AtomicBool = AtomicBool::new(false);

/// Write the line `msg` to stderr from a signal handler (`write(2)` is
/// async-signal-safe), after a newline on a terminal.
fn say(msg: &str) {
    #[cfg(unix)]
    // SAFETY: valid buffers of the lengths given.
    unsafe {
        if TTY.load(Ordering::SeqCst) {
            libc::write(2, b"\n".as_ptr().cast(), 1);
        }
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// Install the handlers; `stop` receives the first signal's number.
pub fn install(stop: Arc<AtomicI32>) {
    use std::io::IsTerminal as _;
    TTY.store(std::io::stderr().is_terminal(), Ordering::SeqCst);
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let flag = stop.clone();
        // SAFETY: the handler touches atomics and calls `write`, all
        // async-signal-safe (the watcher thread ends the process).
        let _ = unsafe {
            signal_hook::low_level::register(sig, move || {
                flag.store(sig, Ordering::SeqCst);
                let preparing = PREPARING.load(Ordering::SeqCst);
                match COUNT.fetch_add(1, Ordering::SeqCst) {
                    // A [`preparing`] section ends the process within 10 ms
                    // ([`watch_quit`]); [`interruptible`] within 50 ms, with its own line.
                    0 if IN_PREPARATION.load(Ordering::SeqCst) => QUIT.store(sig, Ordering::SeqCst),
                    0 if preparing => {}
                    0 => say(
                        "toy train: stopping after this step (or micro-batch) to save a checkpoint (twice more to quit without saving)\n",
                    ),
                    1 if preparing => say("toy train: still stopping\n"),
                    1 => say("toy train: still stopping; saving the checkpoint first (once more to quit without saving)\n"),
                    _ if CRITICAL.load(Ordering::SeqCst) == 0 => {
                        if SAVED_SINCE_STOP.load(Ordering::SeqCst) {
                            say("toy train: quitting; the checkpoint is saved\n");
                        } else {
                            say("toy train: quit without saving\n");
                        }
                        QUIT.store(sig, Ordering::SeqCst)
                    }
                    _ => say("toy train: a checkpoint is being written; it ends first\n"),
                }
            })
        };
    }
    std::thread::spawn(watch_quit);
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The work before a run exists (loading a base model or donor, hashing the
/// corpus), which creates nothing: a first signal ends the process within 10 ms
/// with `toy train: interrupted while <what>; nothing was saved`, 128 + the
/// signal. The section lasts until the guard is dropped, which must happen
/// before anything is written.
#[must_use = "the section ends when the guard is dropped"]
pub struct Preparing(());

/// Enter a [`Preparing`] section doing `what`.
pub fn preparing(what: &'static str) -> Preparing {
    if let Ok(mut w) = PREPARED_WHAT.lock() {
        *w = what;
    }
    IN_PREPARATION.store(true, Ordering::SeqCst);
    PREPARING.store(true, Ordering::SeqCst);
    Preparing(())
}

impl Drop for Preparing {
    fn drop(&mut self) {
        IN_PREPARATION.store(false, Ordering::SeqCst);
        PREPARING.store(false, Ordering::SeqCst);
    }
}

/// A section a second signal does not cut (see the module docs); it lasts
/// until the guard is dropped. Sections nest.
#[must_use = "the section ends when the guard is dropped"]
pub struct Critical(());

/// Enter a critical section.
pub fn critical() -> Critical {
    CRITICAL.fetch_add(1, Ordering::SeqCst);
    Critical(())
}

impl Drop for Critical {
    fn drop(&mut self) {
        CRITICAL.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `println!` that drops the line when stdout is closed instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Run `f` on a thread and wait for it while `stop` stays 0: within 50 ms of a
/// signal, [`Error::Interrupted`](crate::error::Error::Interrupted) saying what
/// was going on (`what`), the thread left to end with the process. For the work
/// before a run exists (tokenizing a raw-text corpus: 15 s for 20 MB), which
/// has nothing to save.
pub fn interruptible<T: Send + 'static>(
    stop: Option<&AtomicI32>,
    what: &'static str,
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    let Some(stop) = stop else { return f() };
    PREPARING.store(true, Ordering::SeqCst);
    // Inside a [`preparing`] section, whose exit then says this work.
    let outer = PREPARED_WHAT.lock().ok().map(|mut w| std::mem::replace(&mut *w, what));
    let r = wait_for(stop, what, f);
    if let (Some(outer), Ok(mut w)) = (outer, PREPARED_WHAT.lock()) {
        *w = outer;
    }
    // Interrupted, the process ends with nothing saved: later signals must not say otherwise.
    if !matches!(r, Err(crate::error::Error::Interrupted(..))) {
        PREPARING.store(false, Ordering::SeqCst);
    }
    r
}

/// [`interruptible`]'s thread and wait.
fn wait_for<T: Send + 'static>(
    stop: &AtomicI32,
    what: &str,
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(r) => return r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let sig = stop.load(Ordering::SeqCst);
                if sig != 0 {
                    return Err(crate::error::Error::Interrupted(sig, format!("interrupted while {what}; nothing was saved")));
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(crate::error::runtime(format!("{what} stopped unexpectedly")))
            }
        }
    }
}
