//! The `toy` command.

use std::process::ExitCode;
use toy::cli::{Cli, Command};
use toy::output::{one_line, shown};
use toy::say;

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
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let i = args.iter().position(|a| cli.find_subcommand(a).is_some())?;
    let sub = cli.find_subcommand(&args[i])?;
    // And its own subcommand (`debug bench`, `export merge`), whose help is the one to see.
    match args[i + 1..].iter().find(|a| !a.starts_with('-')).and_then(|a| sub.find_subcommand(a)) {
        Some(inner) => Some(format!("{} {}", args[i], inner.get_name())),
        None => Some(args[i].clone()),
    }
}

/// Run the command and write its result on stdout.
fn dispatch(command: &Command) -> toy::error::Result<()> {
    match command {
        Command::Train(a) => match toy::commands::train::run(a) {
            Ok(o) => {
                if a.json {
                    toy::signals::main_reports_end();
                    say!("{}", o.summary())?;
                }
                o.into_result().map(|_| ())
            }
            // --json: stdout holds one object however the command ends.
            Err(e) => {
                toy::signals::main_reports_end();
                if a.json {
                    let reason = if matches!(e, toy::error::Error::Interrupted(..)) { "interrupted" } else { "errored" };
                    let _ = say!("{}", toy::train::summary_without_outcome(reason, &e.to_string(), e.exit_code()));
                }
                Err(e)
            }
        },
        Command::Generate(a) => toy::commands::generate::run(a).and_then(|g| {
            if a.json {
                say!("{}", serde_json::json!({ "format": "toy/generate-v1", "text": g.text, "ids": g.ids, "n_prompt": g.n_prompt }))
            } else if g.text.is_none() {
                let ids: Vec<String> = g.ids.iter().map(|i| i.to_string()).collect();
                say!("ids: {}", ids.join(" "))
            } else {
                Ok(())
            }
        }),
        Command::Eval(a) => toy::commands::eval::run(a).and_then(|r| {
            if a.json {
                let mut out = serde_json::json!({ "format": "toy/eval-v1", "loss": r.loss, "perplexity": r.perplexity, "tokens": r.tokens,
                                                  "context": r.context, "bytes": r.bytes, "bits_per_byte": r.bits_per_byte });
                if let Some(c) = &r.chat {
                    out["chat"] = serde_json::json!(c);
                }
                return say!("{out}");
            }
            let bpb = r.bits_per_byte.map(|b| format!(" · {b:.4} bits/byte")).unwrap_or_default();
            let n = if r.tokens == 1 { "token" } else { "tokens" };
            if let Some(c) = &r.chat {
                let w = if c.windows == 1 { "conversation" } else { "conversations" };
                // Without --context each conversation has a window of about its length.
                let up_to = if a.context.is_none() && c.windows > 1 { "up to " } else { "" };
                return say!(
                    "loss {:.4} · perplexity {:.2} · {} assistant {n} scored in {} {w} (windows of {up_to}{})",
                    r.loss,
                    r.perplexity,
                    r.tokens,
                    c.windows,
                    r.context
                );
            }
            say!("loss {:.4} · perplexity {:.2} · {} {n} in windows of {}{bpb}", r.loss, r.perplexity, r.tokens, r.context)
        }),
        Command::Describe(a) => toy::commands::describe::run(a),
        Command::Devices(a) => toy::commands::devices::run(a),
        Command::New(a) => {
            toy::commands::new::run(a).and_then(|d| say!("created {} (cd {} && toy train)", shown(&d), toy::output::shell_quoted(&d)))
        }
        Command::Prep(a) => toy::commands::prep::run(a).and_then(|m| {
            if a.json {
                say!("{}", serde_json::to_string(&m).unwrap_or_default())
            } else {
                say!(
                    "prepared {} document{}: {} train + {} validation tokens, vocabulary {} → {}",
                    m.n_documents,
                    if m.n_documents == 1 { "" } else { "s" },
                    m.train_tokens,
                    m.val_tokens,
                    m.vocab_size,
                    shown(&a.out)
                )
            }
        }),
        Command::Debug(a) => toy::commands::debug::run(a),
        Command::Export(a) => toy::commands::export::run(a).and_then(|p| say!("wrote {}", shown(&p))),
    }
}

/// The line for a command given without its subcommand (`toy`, `toy export`):
/// the subcommands it takes and where its help is.
fn missing_subcommand(seen: &[String]) -> String {
    let root = toy::cli::command_for(seen);
    let path: Vec<&str> = seen.iter().take_while(|a| !a.starts_with('-')).map(String::as_str).collect();
    let mut cmd = &root;
    for p in &path {
        if let Some(sub) = cmd.find_subcommand(p) {
            cmd = sub;
        }
    }
    let names: Vec<&str> = cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help").map(|s| s.get_name()).collect();
    let (prefix, help, what) = match path.first() {
        Some(first) => (format!("toy {first}"), format!("toy {}", path.join(" ")), "subcommand"),
        None => ("toy".to_string(), "toy".to_string(), "command"),
    };
    format!("{prefix}: a {what} is needed: {} (see `{help} --help`)", names.join(", "))
}

/// What a command line clap refused ends with: help or the version printed
/// (status 0), else one line `toy <cmd>: ...` on stderr (and `toy train
/// --json`'s object on stdout), status 2.
fn refused(e: clap::Error, seen: &[String]) -> ExitCode {
    use clap::error::ErrorKind;
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // `toy`, `toy export`: one line naming what may follow, not the whole help.
        eprintln!("{}", missing_subcommand(seen));
        return ExitCode::from(2);
    }
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Help that cannot be written (`toy --help > /dev/full`) is an error, as other output's is.
        let written = e.print().and_then(|_| std::io::Write::flush(&mut std::io::stdout()));
        if let Err(w) = written {
            eprintln!("toy: cannot write the help to stdout: {w}");
            return ExitCode::from(1);
        }
        return ExitCode::SUCCESS;
    }
    // One line: clap's message up to its usage block, without the "error: " prefix
    // (a missing argument's name is on the lines after the first).
    let text = e.render().to_string();
    let msg: Vec<&str> =
        text.lines().map(str::trim).take_while(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("tip:")).collect();
    let msg = msg.join(" ");
    let msg = msg.trim_start_matches("error: ");
    // clap's tip (a similar argument's name) after the usage block, or the toy
    // spelling of a llama.cpp flag, kept on the line.
    let tip = text.lines().map(str::trim).find_map(|l| l.strip_prefix("tip: ")).filter(|t| !t.starts_with("to pass")).map(str::to_string);
    let named = named_command();
    let msg = match flag_hint(named.as_deref().map(|c| c.split(' ').next().unwrap_or(c)), seen).or(tip) {
        Some(t) => format!("{msg}; {t}"),
        None => msg.to_string(),
    };
    let msg = msg.as_str();
    // `toy debug: ... (see `toy debug bench --help`)`: the prefix of the command's
    // other errors, the help of the subcommand given.
    let (prefix, help) = match named {
        Some(cmd) => (format!("toy {}", cmd.split(' ').next().unwrap_or(&cmd)), format!("toy {cmd}")),
        None => ("toy".to_string(), "toy".to_string()),
    };
    let msg = one_line(if msg.is_empty() { "bad arguments" } else { msg });
    // `toy train --json`: one object on stdout however it ends, a refused argument too.
    if prefix == "toy train" && seen.iter().any(|a| a == "--json") {
        let _ = say!("{}", toy::train::summary_without_outcome("errored", &format!("{msg} (see `{help} --help`)"), 2));
    }
    eprintln!("{prefix}: {msg} (see `{help} --help`)");
    ExitCode::from(2)
}

/// The toy spelling of a llama.cpp flag (`-m`, `--temp`, `-ngl`...) or, for
/// `toy train`, of a Hugging Face Trainer / TRL / PEFT one (`--learning-rate`,
/// `--num-train-epochs`, `--lora-r`...) on a refused command line, said as a
/// hint; `None` where none is there. `cmd` is the command given (`generate`).
fn flag_hint(cmd: Option<&str>, seen: &[String]) -> Option<String> {
    let generate = cmd == Some("generate");
    let window =
        if generate { "toy generate's window is the prompt and -n, up to the model's context" } else { "toy's window is --context" };
    let llama: &[(&[&str], &str)] = &[
        (&["-m", "--model"], "the model is the first argument, not an option (`toy generate MODEL.gguf`)"),
        (&["-p"], "toy's prompt is --prompt"),
        (&["--temp"], "toy's temperature is --temperature"),
        (&["-c", "--ctx-size"], window),
        (&["-t"], "toy's thread count is --threads"),
        (&["-s"], "toy's sampling seed is --seed"),
        (&["-ngl", "--n-gpu-layers", "--gpu-layers"], "toy runs every layer where --device says (--device cuda)"),
        (&["-f", "--file"], "toy reads its text with --corpus (eval) or --prompt (generate)"),
    ];
    const TRAINER: &[(&[&str], &str)] = &[
        (&["--learning-rate", "--learning_rate"], "--lr"),
        (&["--num-train-epochs", "--num_train_epochs"], "--epochs"),
        (&["--max-steps", "--max_steps"], "--steps"),
        (&["--max-seq-length", "--max_seq_length", "--max-length", "--max_length"], "--context"),
        (&["--per-device-train-batch-size", "--per_device_train_batch_size", "--batch-size", "--batch_size"], "--batch"),
        (&["--gradient-accumulation-steps", "--gradient_accumulation_steps"], "--grad-accum"),
        (&["--lora-r", "--lora_r", "-r"], "--lora-rank"),
        (&["--lora_alpha"], "--lora-alpha"),
        (&["--target-modules", "--target_modules"], "--lora-targets"),
        (&["--warmup_steps"], "--warmup-steps"),
        (&["--weight_decay"], "--weight-decay"),
        (&["--max-grad-norm", "--max_grad_norm"], "--grad-clip"),
        (&["--output-dir", "--output_dir"], "--out"),
        (&["--model-name-or-path", "--model_name_or_path", "--model"], "--from (finetune) or --donor (warm start)"),
        (&["--dataset", "--dataset-name", "--dataset_name", "--train-file", "--train_file"], "--corpus"),
        (&["--packing"], "--pack"),
        (&["--logging-steps", "--logging_steps"], "--log-every"),
        (&["--save-steps", "--save_steps"], "--save-every"),
        (&["--eval-steps", "--eval_steps"], "--eval-every"),
        (&["--bf16", "--fp16"], "--dtype"),
        (&["--resume-from-checkpoint", "--resume_from_checkpoint"], "--resume"),
    ];
    let given = |a: &str| seen.iter().any(|s| s == a || s.split_once('=').is_some_and(|(f, _)| f == a));
    let hint = |table: &[(&[&str], &str)], who: &str, intro: &str| -> Option<String> {
        table.iter().find_map(|(names, hint)| names.iter().find(|n| given(n)).map(|n| format!("{n} is {who}: {intro}{hint}")))
    };
    if cmd == Some("train") {
        if let Some(h) = hint(TRAINER, "the Hugging Face Trainer's", "toy's is ") {
            return Some(h);
        }
    }
    hint(llama, "llama.cpp's", "")
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when stdout is a closed pipe (`toy describe x | head -1`);
    // other write errors on stdout are errors (`toy::say!`). Checkpoints are written to temp files and renamed, so
    // dying mid-write leaves no partial file.
    #[cfg(unix)]
    // SAFETY: setting signals' dispositions, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // A file past `ulimit -f` is a write error (EFBIG: said, its temp
        // file removed), not a kill that leaves the temp file behind.
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // args_os: a path that is not UTF-8 is clap's to refuse (one line), not a panic here.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let seen: Vec<String> = args.iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let parsed = toy::cli::command_for(&seen).try_get_matches_from(&args).and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => return refused(e, &seen),
    };
    let name = command_name(&cli.command);
    // Backend modules for the commands that compute; an empty $TOY_BACKEND_DIR is unset.
    let env = std::env::var_os("TOY_BACKEND_DIR").filter(|v| !v.is_empty()).map(|v| (std::path::PathBuf::from(v), "$TOY_BACKEND_DIR"));
    let dir = cli.backend_dir.clone().map(|d| (d, "--backend-dir")).or(env);
    let computes = match &cli.command {
        Command::Prep(_) | Command::New(_) | Command::Describe(_) | Command::Export(_) => false,
        Command::Debug(d) => !matches!(d.command, toy::cli::DebugCommand::Tokenize(_) | toy::cli::DebugCommand::ChatMasks(_)),
        _ => true,
    };
    if let (Some((dir, from)), true) = (dir, computes) {
        if let Err(e) = ggml_rs::backend::load_backends_from(&dir) {
            eprintln!("toy {name}: {from}: {}", one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    }
    let result = dispatch(&cli.command);
    match result {
        Ok(()) => {
            toy::output::release_notes();
            ExitCode::SUCCESS
        }
        Err(e) => {
            toy::signals::main_reports_end();
            // One line whatever the message holds (a path with a newline or an escape sequence).
            eprintln!("toy {name}: {}", one_line(&e.to_string()));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
