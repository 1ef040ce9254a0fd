//! The `toy` command.

use clap::Parser;
use std::process::ExitCode;
use toy::cli::{Cli, Command};

fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Train(_) => "train",
        Command::Generate(_) => "generate",
        Command::Eval(_) => "eval",
        Command::Describe(_) => "describe",
        Command::Devices(_) => "devices",
        Command::Prep(_) => "prep",
        Command::New(_) => "new",
        Command::Debug(_) => "debug",
        Command::Export(_) => "export",
    }
}

/// The subcommand named on the command line, if any (global flags may come first).
fn named_command() -> Option<String> {
    let cli = <Cli as clap::CommandFactory>::command();
    std::env::args().skip(1).find(|a| cli.find_subcommand(a).is_some())
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when stdout is a closed pipe (`toy describe x | head -1`)
    // instead of panicking in println!. Checkpoints are written to temp files and renamed, so
    // dying mid-write leaves no partial file.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of a signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand)
            {
                let _ = e.print();
                return ExitCode::from(if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { 2 } else { 0 });
            }
            // One line: clap's message up to its usage block, without the "error: " prefix
            // (a missing argument's name is on the lines after the first).
            let text = e.render().to_string();
            let msg: Vec<&str> =
                text.lines().map(str::trim).take_while(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("tip:")).collect();
            let msg = msg.join(" ");
            let msg = msg.trim_start_matches("error: ");
            let prefix = match named_command() {
                Some(cmd) => format!("toy {cmd}"),
                None => "toy".to_string(),
            };
            eprintln!("{prefix}: {} (see `{prefix} --help`)", if msg.is_empty() { "bad arguments" } else { msg });
            return ExitCode::from(2);
        }
    };
    let name = command_name(&cli.command);
    let dir = cli.backend_dir.clone().or_else(|| std::env::var_os("TOY_BACKEND_DIR").map(Into::into));
    if let Some(dir) = dir {
        if let Err(e) = ggml_rs::backend::load_backends_from(&dir) {
            eprintln!("toy {name}: --backend-dir: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match &cli.command {
        Command::Train(a) => toy::commands::train::run(a).map(|o| {
            if a.json {
                toy::outln!(
                    "{}",
                    serde_json::json!({ "format": "toy/train-v1", "run_id": o.run_id, "run_dir": o.run_dir, "steps": o.steps,
                                        "seed": a.seed.unwrap_or(0), "final_loss": o.final_loss, "val_loss": o.val_loss })
                );
            }
        }),
        Command::Generate(a) => toy::commands::generate::run(a).map(|g| {
            if a.json {
                println!("{}", serde_json::json!({ "format": "toy/generate-v1", "text": g.text, "ids": g.ids, "n_prompt": g.n_prompt }));
            } else if g.text.is_none() {
                let ids: Vec<String> = g.ids.iter().map(|i| i.to_string()).collect();
                println!("ids: {}", ids.join(" "));
            }
        }),
        Command::Eval(a) => toy::commands::eval::run(a).map(|r| {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({ "format": "toy/eval-v1", "loss": r.loss, "perplexity": r.perplexity, "tokens": r.tokens,
                                                   "bytes": r.bytes, "bits_per_byte": r.bits_per_byte })
                );
            } else {
                print!("loss {:.4} · perplexity {:.2} · {} tokens", r.loss, r.perplexity, r.tokens);
                match r.bits_per_byte {
                    Some(b) => println!(" · {b:.4} bits/byte"),
                    None => println!(),
                }
            }
        }),
        Command::Describe(a) => toy::commands::describe::run(a),
        Command::Devices(a) => toy::commands::devices::run(a),
        Command::New(a) => toy::commands::new::run(a).map(|d| println!("created {} (cd {} && toy train)", d.display(), d.display())),
        Command::Prep(a) => toy::commands::prep::run(a).map(|m| {
            if a.json {
                println!("{}", serde_json::to_string(&m).unwrap_or_default());
            } else {
                println!(
                    "prepared {} documents: {} train + {} validation tokens, vocabulary {} → {}",
                    m.n_documents,
                    m.train_tokens,
                    m.val_tokens,
                    m.vocab_size,
                    a.out.display()
                );
            }
        }),
        Command::Debug(a) => toy::commands::debug::run(a),
        Command::Export(a) => toy::commands::export::run(a).map(|p| toy::outln!("wrote {}", p.display())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toy {name}: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
