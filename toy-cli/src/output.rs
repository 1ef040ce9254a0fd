//! What the commands write for the user: results on stdout, notes on stderr
//! (held until the command commits to its work), and paths shown in one-line
//! messages.
//!
//! A result that cannot be written is a failure like any other: a full disk is
//! one line on stderr and exit 1. A closed pipe (`toy describe R | head -1`)
//! ends the command quietly, as cargo and ripgrep do; `toy train`'s progress
//! lines ([`crate::outln!`]) are dropped instead, so training goes on.

use crate::error::{runtime, Result};
use std::io::Write;
use std::path::Path;

/// Write `args` to stdout and flush it. A closed pipe exits quietly (status
/// 0); any other failure is an error.
pub fn write(args: std::fmt::Arguments<'_>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(runtime(format!("cannot write to stdout: {e}"))),
    }
}

/// `println!` for results: a [`Result`] that fails when stdout cannot be written.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Notes (`note: ...` lines on stderr) held until the command commits to its
/// work ([`release_notes`]), so that a refusal after one is still one line:
/// `None` once released, when notes go out as they come.
static HELD: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(Some(Vec::new()));

/// Say `text` on stderr: now if the command has committed to its work, else
/// once it does ([`release_notes`]), or never if it ends in an error first.
pub fn note(text: String) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    match held.as_mut() {
        Some(notes) => notes.push(text),
        None => eprintln!("{text}"),
    }
}

/// Write the held notes and let later ones out as they come. A command calls
/// it where its checks are over and its work starts (a run's start, the
/// first sampled token, the first scored window); `main` when it succeeds.
pub fn release_notes() {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).take();
    for text in held.into_iter().flatten() {
        eprintln!("{text}");
    }
}

/// `eprintln!` for notes: held by [`note`] until the command commits to its work.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::output::note(format!($($arg)*))
    };
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`, ...), so that a
/// message stays one line and a file name cannot drive the terminal.
pub fn one_line(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// A path as messages show it: lossy UTF-8 with control characters escaped.
pub fn shown(path: &Path) -> String {
    one_line(&path.to_string_lossy())
}

/// A path as a shell command takes it: as it is when it holds only
/// characters no shell treats specially (letters, digits, `/._-+,:@%=`), else
/// in single quotes (a `'` inside as `'\''`), as Python's `shlex.quote` does;
/// with control characters, in bash's `$'...'` with `\xHH`/`\uHHHH` escapes.
/// A relative path that starts with `-` gets `./` (not read as an option).
pub fn shell_quoted(path: &Path) -> String {
    let mut s = path.to_string_lossy().into_owned();
    if s.starts_with('-') {
        s.insert_str(0, "./");
    }
    if s.chars().any(char::is_control) {
        let escaped: String = s
            .chars()
            .map(|c| match c {
                '\\' | '\'' => format!("\\{c}"),
                c if c.is_control() && (c as u32) < 0x80 => format!("\\x{:02x}", c as u32),
                c if c.is_control() => format!("\\u{:04x}", c as u32),
                c => c.to_string(),
            })
            .collect();
        return format!("$'{escaped}'");
    }
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A progress bar of `total` units drawn with indicatif's `template` (the
/// default bar if the template does not parse).
pub fn progress_bar(total: u64, template: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    pb
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_are_quoted_for_a_shell_where_needed() {
        use std::path::Path;
        assert_eq!(super::shell_quoted(Path::new("runs/a-1.x")), "runs/a-1.x");
        assert_eq!(super::shell_quoted(Path::new("pr ü 空")), "'pr ü 空'");
        assert_eq!(super::shell_quoted(Path::new("it's")), "'it'\\''s'");
        assert_eq!(super::shell_quoted(Path::new("-dash")), "./-dash");
        assert_eq!(super::shell_quoted(Path::new("a\nb'c")), "$'a\\x0ab\\'c'");
    }
}
