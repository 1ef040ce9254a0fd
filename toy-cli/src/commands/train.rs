//! `toy train`: resolve the configuration (preset < `toy.toml` < flags), read
//! the corpus, create the run folder and run the recipe.

use super::setup::{finish, load_training_corpus, record_corpus, resolve, run_dir, Start};
use crate::cli::TrainArgs;
use crate::config::{Preset, Recipe, TrainConfig};
use crate::data::Corpus;
use crate::error::{input, Error, Result};
use crate::run::RunDir;
use crate::train::schedule::Cosine;
use crate::train::{train, Init, Outcome, Plan, RunOptions};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

/// Where a TOML error is: the file, its line and the line's text (which names the key).
fn where_in(path: &Path, text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let shown = crate::output::shown(path);
    let Some(at) = span.map(|s| s.start.min(text.len())) else { return shown };
    if text[at..].trim().is_empty() {
        // past the last line's text (an array or string left open): the end, not an empty line after it
        return format!("{shown}: at the end of the file");
    }
    let line = text[..at].matches('\n').count() + 1;
    let content = text.lines().nth(line - 1).unwrap_or_default().trim();
    format!("{shown} line {line} (`{}`)", crate::output::one_line(content))
}

/// The first key of `text`'s `[train]` table that [`TrainArgs`] refuses, with
/// where its value is and why: [`TrainArgs`] reads its flattened groups from
/// the table as a whole, so serde's own error would point at the table only.
fn refused_key(text: &str) -> Option<(std::ops::Range<usize>, String)> {
    use serde::Deserialize;
    #[derive(serde::Deserialize)]
    struct Keys {
        #[serde(default)]
        train: std::collections::BTreeMap<String, toml::Spanned<toml::Value>>,
    }
    let mut keys: Vec<_> = toml::from_str::<Keys>(text).ok()?.train.into_iter().collect();
    keys.sort_by_key(|(_, v)| v.span().start);
    let (span, message) = keys.into_iter().find_map(|(k, v)| {
        // Every number with a fraction in [train] is an f32: one beyond its range
        // is refused as the flag is, not read as inf or 0.
        if let toml::Value::Float(x) = v.get_ref() {
            if let Err(e) = crate::cli::float32(&x.to_string()) {
                return Some((v.span(), e));
            }
        }
        let one = toml::Value::Table(toml::Table::from_iter([(k, v.get_ref().clone())]));
        TrainArgs::deserialize(one).err().map(|e| (v.span(), e.message().to_string()))
    })?;
    if !message.starts_with("unknown field") {
        return Some((span, message));
    }
    // serde lists every key; one close to the typo says more.
    let message = message.split(", expected").next().unwrap_or(&message).to_string();
    let typo = message.split('`').nth(1).unwrap_or_default().to_string();
    // Flags of one command line, not of a project.
    if ["out", "json", "resume", "allow_corpus_change"].contains(&typo.as_str()) {
        let flag = format!("--{}", typo.replace('_', "-"));
        return Some((span, format!("`{typo}` is not a [train] key: give {flag} on the command line")));
    }
    let known = TrainArgs::default().flags().into_iter().map(|f| f.flag[2..].replace('-', "_")).chain(["recipe".to_string()]);
    let near = known.map(|k| (strsim::levenshtein(&k, &typo), k)).min_by_key(|(d, _)| *d).filter(|(d, _)| *d <= 2 + typo.len() / 4);
    let hint = match near {
        Some((_, k)) => format!("; did you mean `{k}`?"),
        None => "; [train] takes `recipe` and toy train's flags, `_` for `-` (`--lora-rank` as `lora_rank`)".into(),
    };
    Some((span, format!("{message}{hint}")))
}

/// Say so when a folder above `dir` holds a project's toy.toml, which `toy
/// train` in `dir` does not read (a run started in `proj/data` would train
/// on the built-in corpus into `proj/data/runs`).
fn note_project_above(dir: &Path) {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if let Some(p) = dir.ancestors().skip(1).find(|a| a.join("toy.toml").is_file()) {
        crate::note!(
            "note: {} belongs to a project that toy train reads only in its own folder (cd {})",
            p.join("toy.toml").display(),
            crate::output::shell_quoted(p)
        );
    }
}

/// Read `toy.toml` (its `[train]` table) from `dir`, if present.
pub fn read_toml(dir: &Path) -> Result<Option<TrainArgs>> {
    let path = dir.join("toy.toml");
    // Missing is fine; anything there that is not a regular file is refused
    // (a FIFO would block the read, a folder or dangling link would be ignored).
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            note_project_above(dir);
            return Ok(None);
        }
        Err(e) => return Err(input(format!("cannot read {}: {e}", path.display()))),
        Ok(_) => match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(input(format!("{} is not a regular file", path.display()))),
            Err(e) => return Err(input(format!("{} is a link to nothing ({e})", path.display()))),
        },
    }
    let text = std::fs::read_to_string(&path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    // A typo'd table (`[trian]`) or a key outside [train] is an error, as unknown keys inside it are.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        train: TrainArgs,
    }
    let f: File = toml::from_str(&text).map_err(|e| {
        let (span, message) = refused_key(&text).map_or((e.span(), e.message().to_string()), |(s, m)| (Some(s), m));
        // toml's messages run over lines ("invalid table header\nexpected ..."): one line here.
        let message = plain_types(&message.trim().replace('\n', "; "));
        input(format!("{}: {message}", where_in(&path, &text, span)))
    })?;
    // toml reads an f32 out of range as inf (or 0) without an error.
    if let Some((span, message)) = refused_key(&text) {
        return Err(input(format!("{}: {message}", where_in(&path, &text, Some(span)))));
    }
    let mut t = f.train;
    // An empty path would name the folder itself (the command line refuses one).
    for (key, p) in [("corpus", &t.data.corpus), ("from", &t.finetune.from), ("donor", &t.warm.donor)] {
        if p.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(input(format!("{}: {key} is empty: give a path, or remove the key", path.display())));
        }
    }
    // Relative paths in toy.toml are relative to its folder.
    if let Some(c) = &t.data.corpus {
        if c.is_relative() {
            t.data.corpus = Some(dir.join(c));
        }
    }
    Ok(Some(t))
}

/// Flags win over `toy.toml`.
fn merged(args: &TrainArgs, file: Option<TrainArgs>) -> TrainArgs {
    let mut a = args.clone();
    if let Some(t) = file {
        a.or_from(&t);
    }
    a
}

/// SIGINT/SIGTERM stop the run after the current step (see [`crate::signals`]).
fn install_signal_handlers() -> Arc<AtomicI32> {
    let stop = Arc::new(AtomicI32::new(0));
    crate::signals::install(stop.clone());
    stop
}

/// What `--resume` found: a checkpoint to go on from, or a run that saved
/// nothing, to start again from step 0 with these flags.
enum Resumed {
    /// The run to go on with, and the line that says so once it is set up.
    Continue(Box<(TrainConfig, Corpus, RunDir, Plan<'static>, String)>),
    Restart(Box<TrainArgs>),
}

/// The run's `config.toml` in `dir`, or why `dir` is no run folder to resume.
fn run_config(dir: &Path) -> Result<TrainConfig> {
    let text = std::fs::read_to_string(dir.join("config.toml")).map_err(|e| {
        let empty = || std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        if !dir.exists() {
            input(format!("--resume {}: no such run folder", dir.display()))
        } else if !dir.is_dir() {
            input(format!("--resume {}: not a folder (give the run's folder)", dir.display()))
        } else if empty() {
            input(format!("--resume {}: an empty folder, not a run folder", dir.display()))
        } else if crate::run::is_skeleton(dir) {
            input(format!(
                "--resume {}: no config.toml, only an empty weights/ (a run stopped before it started, or no run folder); start it again with --out",
                dir.display()
            ))
        } else if e.kind() != std::io::ErrorKind::NotFound || dir.join("config.toml").exists() {
            input(format!("--resume {}: cannot read config.toml: {e}", dir.display()))
        } else {
            input(format!("--resume {}: no config.toml ({e}); is it a run folder?", dir.display()))
        }
    })?;
    toml::from_str(&text).map_err(|e| {
        let message = plain_types(&e.message().trim().replace('\n', "; "));
        // a missing key has no line of its own (the parser points at its table's first)
        let span = e.span().filter(|_| !message.starts_with("missing field"));
        input(format!("{}: {message}", where_in(&dir.join("config.toml"), &text, span)))
    })
}

/// Continue the run in `dir` (see `--resume`): only
/// [`RESUME_FLAGS`](super::resume::RESUME_FLAGS) may change;
/// any other flag that contradicts the run is refused, naming it.
fn resume(a: &TrainArgs, dir: &Path) -> Result<Resumed> {
    let mut cfg = run_config(dir)?;
    cfg.model.check_base_dtype_names().map_err(|m| input(format!("{}: {m}", dir.join("config.toml").display())))?;
    super::resume::check_recipe(&cfg, dir)?;
    let a = &super::resume::moved_base(a, &mut cfg, dir)?;
    let a = &super::resume::moved_corpus(a, &mut cfg, dir)?;
    let a = &super::warm_start::resumed(a, &mut cfg);
    let conflicts = super::resume::conflicts(a, &cfg);
    if !conflicts.is_empty() {
        return Err(input(format!(
            "--resume {}: {} contradict{} the run; the model, corpus, optimizer and schedule come from its config.toml (only {} may change; --corpus and --from may name the run's corpus and base where they moved, and --allow-corpus-change takes a changed corpus)",
            dir.display(),
            conflicts.join(", "),
            if conflicts.len() == 1 { "s" } else { "" },
            super::resume::RESUME_FLAGS.join(", ")
        )));
    }
    macro_rules! take {
        ($($g:ident.$f:ident),*) => { $( if let Some(v) = a.$g.$f.clone() { cfg.$f = v; } )* };
    }
    let planned = cfg.steps;
    take!(batch.steps, device.device, device.threads, device.matmul_precision, device.dtype, device.attention);
    take!(log.eval_every, log.eval_windows, log.save_every, log.log_every, log.keep);
    if a.device.matmul_precision.is_some() && a.device.dtype.is_none() {
        cfg.dtype = crate::config::Dtype::F32; // as for a new run: f32 products at that precision
    }
    cfg.skip_nonfinite |= a.log.skip_nonfinite;
    super::resume::check_corpus(&mut cfg, dir, a.allow_corpus_change)?;
    super::resume::check_dtype(&cfg, a, dir)?;
    cfg.validate().map_err(|e| super::resume::config_error(e, a, dir))?;
    // The id the run started with (its checkpoints carry it), even in a
    // renamed or copied folder; else the folder's name.
    let id =
        crate::run::started_as(dir).or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned())).unwrap_or_else(|| "run".into());
    let run = RunDir::create(id, dir.to_path_buf(), true)?;
    if !run.has_checkpoint() {
        drop(run);
        if !a.json {
            crate::outln!(
                "restarting {} from step 0: it saved no checkpoint; the configuration comes from its config.toml",
                crate::output::shown(dir)
            );
        }
        return Ok(Resumed::Restart(Box::new(super::resume::restart_args(a, &cfg, dir)?)));
    }
    let ck = run.latest().ok_or_else(|| input(format!("--resume {}: {}", dir.display(), run.why_no_latest())))?;
    // Checked before the note below: the checkpoint and its resume state belong
    // together (the training loop relies on it), and the run has steps left.
    if !crate::formats::state::state_path(&ck).is_file() {
        let advice = run.fall_back_from(&ck);
        return Err(input(format!("--resume {}: {} has no resume state beside it{advice}", dir.display(), ck.display())));
    }
    // A checkpoint or state that does not open (a truncated file): the checkpoint before it may be whole.
    let fall_back = |e: Error| match e {
        Error::Input(m) => input(format!("{m}{}", run.fall_back_from(&ck))),
        e => e,
    };
    let done = crate::formats::state::check_pair(&ck, crate::run::started_as(dir).as_deref()).map_err(fall_back)?;
    if done >= cfg.steps {
        let at = if done == cfg.steps {
            format!("already completed its {done} steps")
        } else {
            format!("is at step {done}, past --steps {}", cfg.steps)
        };
        return Err(input(format!("the run {at}; give a larger --steps to continue")));
    }
    let replanned = (planned != cfg.steps).then(|| replanned(&cfg, planned, done));
    let opened = super::resume::checkpoint(&cfg, &ck, dir).map_err(fall_back)?;
    let corpus = super::resume::corpus(&cfg, &ck, &opened)?;
    let note = format!(
        "resuming {} from {}: model, corpus, optimizer and schedule from its config.toml{}",
        crate::output::shown(dir),
        ck.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        replanned.unwrap_or_default()
    );
    let plan = Plan { recipe: cfg.recipe, init: Init::Random, sampling: cfg.sampling, resume: Some(ck) };
    Ok(Resumed::Continue(Box::new((cfg, corpus, run, plan, note))))
}

/// What `--resume --steps` does to the run's schedule: the cosine spans the
/// run's steps, so a new length moves the rate of the steps to come.
fn replanned(cfg: &TrainConfig, planned: u64, done: u64) -> String {
    let sched = |steps| Cosine { lr: cfg.lr, min_lr: cfg.min_lr, warmup_steps: cfg.warmup_steps.min(steps), steps };
    format!(
        "; --steps {} re-plans the learning-rate schedule it had for {planned} steps: step {done} ran at {:.3e}, step {} runs at {:.3e}",
        cfg.steps,
        sched(planned).at(done),
        done + 1,
        sched(cfg.steps).at(done + 1)
    )
}

/// What a run writes besides the essentials, as `a` asks.
fn run_options(a: &TrainArgs, stop: &Arc<AtomicI32>) -> RunOptions {
    RunOptions {
        quiet: a.json,
        progress: std::io::stderr().is_terminal(),
        save_initial: a.log.save_initial,
        record_batches: a.log.record_batches,
        keep: a.log.keep.unwrap_or(0),
        skip_nonfinite: a.log.skip_nonfinite,
        warmup_given: a.optim.warmup_steps.map(|_| "--warmup-steps"),
        stop: Some(stop.clone()),
        announce: None,
        notes: Vec::new(),
    }
}

/// Run `toy train` with `args`.
pub fn run(args: &TrainArgs) -> Result<Outcome> {
    let cwd = std::env::current_dir().map_err(|e| input(format!("no current folder: {e}")))?;
    // A resumed run takes everything from its own config.toml: toy.toml is not read
    // (said when there is one, as its keys might be taken for settings of the run).
    if args.resume.is_some() && cwd.join("toy.toml").is_file() {
        crate::note!("note: --resume takes the run's config.toml; this folder's toy.toml is not read (flags give what may change)");
    }
    let toml = if args.resume.is_some() { None } else { read_toml(&cwd)? };
    let from_toml = toml.as_ref().map_or_else(Vec::new, |t| set_in_toml(args, t));
    let a = merged(args, toml);
    if args.resume.is_none() {
        let corpus: Vec<PathBuf> =
            a.data.corpus.iter().filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "<embedded>").cloned().collect();
        crate::data::corpus::check_text_field(&corpus, a.data.text_field.as_deref())?;
    }
    let stop = install_signal_handlers();
    if args.json {
        crate::signals::json_on_quit();
    }
    crate::error::set_oom_advice(if args.resume.is_some() {
        "a run keeps its --batch and --context: resume it where more memory is free"
    } else {
        "use a smaller --batch, --context or model"
    });
    if let Some(dir) = &args.resume {
        // Nothing of the run changes before its training goes on (hashing its
        // corpus, loading a base): a signal ends the process at once.
        let preparing = crate::signals::preparing("loading the run");
        // The run's config.toml, not toy.toml, says what the run is.
        let (cfg, corpus, run, plan, note) = match resume(args, dir)? {
            Resumed::Continue(c) => *c,
            Resumed::Restart(r) => {
                drop(preparing);
                return start(&r, &run_options(&r, &stop), Start { cli_preset: None, restart: true });
            }
        };
        // The run's own options, resume flags taken (recorded again in its config.toml).
        let opts = RunOptions {
            save_initial: false,
            record_batches: cfg.record_batches,
            keep: cfg.keep,
            skip_nonfinite: cfg.skip_nonfinite,
            announce: Some(note),
            ..run_options(args, &stop)
        };
        // A LoRA run's state holds the adapters only: the base comes from its file
        // again (resume() opened the latest adapter on it, checking its sha256).
        let base = match (&cfg.model.lora, &cfg.from) {
            (Some(_), Some(f)) => Some(crate::commands::finetune::open_base(Path::new(f))?.0),
            _ => None,
        };
        let plan = match &base {
            Some(b) => Plan { init: Init::Model(b), ..plan },
            None => plan,
        };
        // A device that config.toml names (no --device given) and that cannot be
        // used is said of config.toml.
        if args.device.device.is_none() {
            crate::train::devices::parse_as(&cfg.device, &format!("--resume {}: config.toml: device", dir.display())).map_err(
                |e| match e {
                    Error::Input(m) => Error::Input(format!("{m} (--device overrides it on resume)")),
                    e => e,
                },
            )?;
        }
        drop(preparing);
        let out = train(&plan, &cfg, &corpus, &run, &opts)?;
        if !a.json {
            crate::outln!("run {} → {}", crate::output::one_line(&out.run_id), crate::output::shown(&out.run_dir));
        }
        return Ok(out);
    }
    let mut opts = run_options(&a, &stop);
    if args.optim.warmup_steps.is_none() && opts.warmup_given.is_some() {
        opts.warmup_given = Some("toy.toml's warmup_steps");
    }
    // A recipe that toy.toml chose, refused for what it needs, says where it came from.
    let toml_recipe = a.recipe.filter(|_| args.recipe.is_none());
    start(&a, &opts, Start { cli_preset: args.batch.preset, restart: false }).map_err(|e| match (toml_origin(e, &from_toml), toml_recipe) {
        (Error::Input(m), Some(r)) if m.starts_with(&format!("{} needs ", r.name())) => {
            Error::Input(format!("{m} (toy.toml sets recipe = \"{}\")", r.name()))
        }
        (e, _) => e,
    })
}

/// The flags that `toy.toml` (`file`) sets and the command line (`args`) does not.
fn set_in_toml(args: &TrainArgs, file: &TrainArgs) -> Vec<String> {
    let given: Vec<String> = args.flags().into_iter().filter(|f| f.given).map(|f| f.flag).collect();
    file.flags().into_iter().filter(|f| f.given && !given.contains(&f.flag)).map(|f| f.flag).collect()
}

/// serde's names of Rust types in a toml message (`expected u64`, `expected
/// struct TrainArgs`) as what to write instead.
fn plain_types(message: &str) -> String {
    let mut m = message.to_string();
    for (rust, plain) in [
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected u32", "expected a whole number, 0 or more"),
        ("expected f32", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("number too large to fit in target type", "number too large"),
    ] {
        m = m.replace(rust, plain);
    }
    match m.find("expected struct ") {
        Some(i) => format!("{}expected a table of keys", &m[..i]),
        None => m,
    }
}

/// An input error about a flag whose value came from `toy.toml` says so: its
/// message starts with the flag (as for one given on the command line), or
/// names the key as a word (`bad model shape: context must be at least 1`,
/// `corpus X is not a regular file`).
fn toml_origin(e: Error, from_toml: &[String]) -> Error {
    let names = |m: &str, flag: &str| {
        let key = flag.trim_start_matches("--").replace('-', "_");
        m.strip_prefix(flag).is_some_and(|r| r.starts_with([' ', ':', '=']))
            || m.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).any(|w| w == key || w == flag)
    };
    match e {
        Error::Input(m) if from_toml.iter().any(|f| names(&m, f)) => Error::Input(format!("{m} (set in toy.toml)")),
        e => e,
    }
}

/// A chat record found in the corpus of a from-scratch or warm-start run:
/// the data reader's advice (`--data-format`, a chat template) is the
/// finetune recipe's, which these recipes refuse; say so.
fn chat_needs_finetune(e: Error) -> Error {
    crate::data::sources::chat_refused(
        e,
        "chat data needs the finetune recipe, which renders it with a model's chat template (toy train finetune --from MODEL.gguf ...); from-scratch and warm-start train on text",
    )
}

/// Start a new run for `a` (toy.toml merged), or start again a run that saved nothing.
fn start(a: &TrainArgs, opts: &RunOptions, how: Start) -> Result<Outcome> {
    if a.allow_corpus_change {
        return Err(input("--allow-corpus-change goes with --resume"));
    }
    // config.toml records these paths for --resume, as UTF-8 text.
    for (flag, p) in [("--corpus", &a.data.corpus), ("--donor", &a.warm.donor), ("--from", &a.finetune.from)] {
        if let Some(p) = p.as_ref().filter(|p| p.to_str().is_none()) {
            return Err(input(format!(
                "{flag} {}: the run records this path in config.toml, which takes UTF-8 paths only (rename it)",
                crate::output::shown(p)
            )));
        }
    }
    let recipe = a.recipe.unwrap_or(Recipe::FromScratch);
    if recipe == Recipe::Finetune {
        return crate::commands::finetune::run(a, opts, how);
    }
    let given = a.finetune.given();
    if !given.is_empty() {
        let verb = if given.len() == 1 { "belongs" } else { "belong" };
        return Err(input(format!("{} {verb} to the finetune recipe (toy train finetune --from MODEL.gguf ...)", given.join(", "))));
    }
    if a.data.data_format.is_some() || a.data.pack {
        return Err(input(
            "--data-format and --pack belong to the finetune recipe: chat data is rendered with a model's chat template (toy train finetune --from MODEL.gguf ...)",
        ));
    }
    if recipe == Recipe::FromScratch
        && (a.warm.donor.is_some() || a.warm.init.is_some() || a.warm.match_by.is_some() || a.warm.lens_init.is_some() || a.warm.shuffle)
    {
        return Err(input(
            "--donor, --init, --match-by, --lens-init and --shuffle belong to the warm-start recipe (toy train warm-start ...)",
        ));
    }
    if recipe == Recipe::FromScratch && a.warm.train_table && a.warm.donor_width.is_none() {
        return Err(input("--train-table applies to a projection lens (toy train warm-start ..., or --donor-width)"));
    }
    // Refused before a donor is read or a BPE trained: a taken --out, a student warm-start cannot train.
    if let (Some(out), false) = (&a.out, how.restart) {
        RunDir::check_new(out)?;
    }
    if recipe == Recipe::WarmStart {
        super::warm_start::check_student(a)?;
    }
    // Nothing is written before the run folder: a signal ends the process at once.
    let preparing = crate::signals::preparing(if recipe == Recipe::WarmStart { "loading the donor" } else { "preparing the run" });
    let (vocab, bpe_default) = (a.shape.vocab_size, a.batch.preset.and_then(Preset::vocab));
    let (path, field) = (a.data.corpus.clone(), a.data.text_field.clone().unwrap_or_else(|| "text".into()));
    let corpus = crate::signals::interruptible(opts.stop.as_deref(), "reading the corpus", move || {
        load_training_corpus(path.as_deref(), vocab, bpe_default, &field)
    })
    .map_err(chat_needs_finetune)?;
    let mut a = a.clone();
    let donor = if recipe == Recipe::WarmStart { Some(super::warm_start::donor(&mut a, &corpus)?) } else { None };
    let mut cfg = resolve(&a, corpus.vocab_size)?;
    record_corpus(&mut cfg, a.data.corpus.as_deref())?;
    if let Some(f) = &a.data.text_field {
        cfg.text_field = f.clone();
    }
    let epochs = super::setup::apply_epochs(&a, &mut cfg, &corpus)?;
    let opts = &RunOptions { notes: opts.notes.iter().cloned().chain(epochs).collect(), ..opts.clone() };
    drop(preparing);
    let run = run_dir(a.out.as_ref(), cfg.model.arch, how.restart)?;
    let plan = match &donor {
        Some(d) => super::warm_start::plan(d, &mut cfg, a.warm.shuffle),
        None => Plan::from_scratch(),
    };
    let out = train(&plan, &cfg, &corpus, &run, opts).map(|o| Outcome { donor: donor.as_ref().and_then(|d| d.report.clone()), ..o });
    finish(&a, &run, out)
}
