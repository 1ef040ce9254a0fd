//! The third reliability pass over run folders, one test per defect class of
//! issue 19 that concerns them: `--resume` on a changed corpus, options lost
//! on resume, a run that fails before its first save, and the smaller ones
//! (duplicated `--lora-targets`, `finetune --preset`, unknown keys in a run's
//! config.toml, the identity of a merged model, an unwritable `--out`).

use crate::common::process::toy;
use ggml_rs::gguf::GgufFile;
use std::path::Path;
use std::process::{Command, Output};
use toy_stories as stories;

const QUICK: &[&str] = &["--preset", "smoke", "--threads", "1", "--log-every", "1000", "--eval-every", "0"];

/// `toy train --out OUT` with the quick settings and `extra`.
fn train(dir: &Path, out: &str, extra: &[&str]) -> Output {
    toy(dir, &[&["train", "--out", out], QUICK, extra].concat())
}

/// `toy train --resume RUN --threads 1` with `extra`.
fn resume(dir: &Path, run: &str, extra: &[&str]) -> Output {
    toy(dir, &[&["train", "--resume", run, "--threads", "1"], extra].concat())
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Exit code 2 and one line on stderr containing `needle`.
fn fails(o: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("toy ") && err.contains(needle) && !err.contains("panicked"), "{err:?} lacks {needle:?}");
    err
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// The tokenizer of a checkpoint: its vocabulary and merges, printed.
fn tokenizer(ck: &Path) -> String {
    let f = GgufFile::open(ck).unwrap();
    format!("{:?} {:?}", f.get("tokenizer.ggml.tokens"), f.get("tokenizer.ggml.merges"))
}

/// Class 2: `--resume` must not silently switch the corpus or its tokenizer.
/// A raw-text corpus with one line appended, or a prepared folder prepared
/// again, is refused with one line; `--allow-corpus-change` takes the new text
/// but tokenizes it with the checkpoint's own tokenizer (no BPE is trained on
/// resume), and a prepared folder with another tokenizer stays refused.
#[test]
fn resume_refuses_a_changed_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("c.txt"), stories::generate_with(5, 40)).unwrap();
    ok(&train(t, "r", &["--corpus", "c.txt", "--vocab-size", "300", "--steps", "2"]));
    let config = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    assert!(config.contains("corpus_sha256"), "{config}");
    let before = tokenizer(&t.join("r/weights/latest"));
    // One more line: another BPE would come out of it.
    let mut text = std::fs::read_to_string(t.join("c.txt")).unwrap();
    text.push_str("Then a purple zebra quietly juggled seventeen xylophones.\n");
    std::fs::write(t.join("c.txt"), &text).unwrap();
    fails(&resume(t, "r", &["--steps", "4"]), "--allow-corpus-change");
    assert!(t.join("r/weights/step_2.gguf").is_file() && !t.join("r/weights/step_4.gguf").exists());
    ok(&resume(t, "r", &["--steps", "4", "--allow-corpus-change"]));
    assert_eq!(tokenizer(&t.join("r/weights/step_4.gguf")), before, "the resumed run switched tokenizer");
    // The new corpus is the run's now: a plain resume takes it.
    ok(&resume(t, "r", &["--steps", "5"]));

    // A prepared folder prepared again from other text with the same vocabulary size.
    ok(&toy(t, &["prep", "c.txt", "--vocab-size", "300", "--out", "p"]));
    ok(&train(t, "q", &["--corpus", "p", "--steps", "2"]));
    std::fs::write(t.join("d.txt"), stories::generate_with(9, 40)).unwrap();
    ok(&toy(t, &["prep", "d.txt", "--vocab-size", "300", "--out", "p", "--force"]));
    fails(&resume(t, "q", &["--steps", "4"]), "changed");
    fails(&resume(t, "q", &["--steps", "4", "--allow-corpus-change"]), "another tokenizer");
    // The built-in corpus is identified too (another build may carry another).
    ok(&train(t, "e", &["--steps", "1"]));
    let config = std::fs::read_to_string(t.join("e/config.toml")).unwrap();
    let sha = config.lines().find_map(|l| l.strip_prefix("corpus_sha256 = ")).unwrap().to_string();
    std::fs::write(t.join("e/config.toml"), config.replace(&sha, &format!("\"{}\"", "0".repeat(64)))).unwrap();
    fails(&resume(t, "e", &["--steps", "2"]), "<embedded> changed");
    let help = String::from_utf8_lossy(&toy(t, &["train", "--help"]).stdout).into_owned();
    assert!(help.contains("--allow-corpus-change"), "{help}");
}

/// Class 3: every option that shapes a run is recorded in config.toml and
/// honoured on resume. `--keep` and `--record-batches` were lost (a resumed
/// `--keep 2` run kept every checkpoint, batches.bin stopped at the first
/// segment, and `--record-batches` given again was refused); the resume flags
/// (`--steps`, `--keep`, `--skip-nonfinite`, ...) given to one resume were
/// forgotten by the next. TrainArgs audit: recipe, corpus, text_field, preset,
/// arch, seed, batch, context, d_model, layers, heads, kv_heads, d_ff,
/// vocab_size, lr, min_lr, warmup_steps, weight_decay, grad_clip, norm_eps,
/// rope_base, tied, donor, init, match_by, lens_init, donor_width,
/// train_table, shuffle, from, freeze, lora_* and save_initial are fixed
/// (recorded, equal values accepted, others refused); steps, eval_every,
/// save_every, log_every, device, threads, matmul_precision, keep,
/// skip_nonfinite may change and are recorded for the next resume;
/// record_batches is recorded and continued; out, json and resume are not
/// part of a run.
#[test]
fn resume_keeps_every_option_of_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "r", &["--steps", "4", "--save-every", "2", "--keep", "2", "--record-batches"]));
    let config = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    assert!(config.contains("keep = 2") && config.contains("record_batches = true"), "{config}");
    // A step recorded after the last checkpoint (a killed process) is done again, not kept twice.
    let mut bin = std::fs::read(t.join("r/batches.bin")).unwrap();
    bin.extend_from_slice(&[0u8; 33 * 4]);
    std::fs::write(t.join("r/batches.bin"), &bin).unwrap();
    ok(&resume(t, "r", &["--steps", "8", "--record-batches"]));
    ok(&resume(t, "r", &["--steps", "12", "--keep", "3"]));
    let w = names(&t.join("r/weights"));
    assert_eq!(
        w,
        ["latest", "step_10.gguf", "step_10.state.gguf", "step_12.gguf", "step_12.state.gguf", "step_8.gguf", "step_8.state.gguf"]
    );
    // smoke: one window of context 32 + 1 per step, u32 ids.
    let recorded = std::fs::metadata(t.join("r/batches.bin")).unwrap().len();
    assert_eq!(recorded, 12 * 33 * 4, "batches.bin must hold every step");
    // The last resume's --steps and --keep are the run's now.
    let done = resume(t, "r", &[]);
    fails(&done, "already completed its 12 steps");
    fails(&resume(t, "r", &["--steps", "5"]), "the run is at step 12, past --steps 5");
    assert!(done.stdout.is_empty(), "refused before the resuming note: {}", String::from_utf8_lossy(&done.stdout));
    let config = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    assert!(config.contains("keep = 3") && config.contains("steps = 12"), "{config}");
    // A run that did not record cannot start recording half-way; refused
    // while the run is set up, it prints no resuming note either.
    ok(&train(t, "s", &["--steps", "2"]));
    let late = resume(t, "s", &["--steps", "3", "--record-batches"]);
    fails(&late, "--record-batches");
    assert!(late.stdout.is_empty(), "a refused resume announced itself: {}", String::from_utf8_lossy(&late.stdout));
    let going = resume(t, "s", &["--steps", "3"]);
    ok(&going);
    assert!(String::from_utf8_lossy(&going.stdout).starts_with("resuming "), "{}", String::from_utf8_lossy(&going.stdout));
}

/// Class 9: a run that fails before its first save (divergence, a full disk)
/// left a folder that `--resume` called "no checkpoint" while `--out` said to
/// resume it. Such a run now removes its folder (saying so), and a folder
/// without a checkpoint (a process killed before its first save) restarts
/// from step 0 on `--resume`, as `--out` says.
#[test]
fn a_run_that_fails_before_its_first_save_leaves_no_dead_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let o = train(t, "r", &["--steps", "5", "--lr", "1e30", "--warmup-steps", "0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("non-finite") && err.contains("removed"), "{err}");
    assert!(!t.join("r").exists(), "a dead run folder was left");
    // --save-initial's step_0.gguf has no resume state: still nothing to resume.
    let o = train(t, "r", &["--steps", "5", "--lr", "1e30", "--warmup-steps", "0", "--save-initial"]);
    assert!(o.status.code() == Some(1) && !t.join("r").exists(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(&train(t, "r", &["--steps", "2"]));

    // A folder whose process died before its first save.
    ok(&train(t, "k", &["--steps", "3", "--seed", "7"]));
    let first = std::fs::read_to_string(t.join("k/events.jsonl")).unwrap();
    for n in names(&t.join("k/weights")) {
        std::fs::remove_file(t.join("k/weights").join(n)).unwrap();
    }
    fails(&train(t, "k", &["--steps", "3"]), "--resume");
    let o = resume(t, "k", &[]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("step 0"), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(t.join("k/weights/step_3.gguf").is_file());
    let loss = |events: &str| {
        events
            .lines()
            .filter(|l| l.contains("\"kind\":\"step\""))
            .map(|l| l.split("\"loss\":").nth(1).unwrap().split(',').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(loss(&std::fs::read_to_string(t.join("k/events.jsonl")).unwrap()), loss(&first), "the restart is the same run");
}

/// Smaller class: duplicated `--lora-targets` were kept (then refused on
/// resume even when given again as they were); they are deduplicated, and a
/// resume given the same LoRA flags is accepted.
#[test]
fn duplicated_lora_targets_are_deduplicated_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "base", &["--steps", "2"]));
    let lora = ["--lora-rank", "2", "--lora-targets", "attn_q,attn_v,attn_q"];
    ok(&toy(t, &[&["train", "finetune", "--from", "base/weights/latest", "--out", "ft", "--steps", "2"], QUICK, &lora].concat()));
    let config = std::fs::read_to_string(t.join("ft/config.toml")).unwrap();
    assert!(config.contains("targets = [\"attn_q\", \"attn_v\"]"), "{config}");
    ok(&resume(t, "ft", &[&["--steps", "3"], &lora[..]].concat()));
    fails(&resume(t, "ft", &["--steps", "4", "--lora-rank", "4"]), "--lora-rank 4 (the run has 2)");
}

/// Smaller class: `finetune --preset medium` silently trained the base's
/// shape under the preset's name. finetune takes a preset's batch and context
/// (its help says so; `debug bench --from` does the same) and keeps the
/// model's shape, with a note when the preset's shape is another.
#[test]
fn finetune_takes_a_presets_batch_and_context_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "base", &["--steps", "1"]));
    let ft = |preset: &str, out: &str| {
        toy(t, &["train", "finetune", "--from", "base/weights/latest", "--out", out, "--steps", "1", "--threads", "1", "--preset", preset])
    };
    let o = ft("medium", "ft");
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: --preset medium gives the batch (32) and the context (32: the preset's 512, capped by the model's); the model keeps its own shape"), "{err}");
    let cfg: toml::Value = toml::from_str(&std::fs::read_to_string(t.join("ft/config.toml")).unwrap()).unwrap();
    assert_eq!((cfg["batch"].as_integer(), cfg["model"]["d_model"].as_integer()), (Some(32), Some(64)), "{cfg}");
    let o = ft("smoke", "ft2");
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("--preset smoke gives"));
}

/// Smaller class: a run's config.toml with an unknown key (a typo) was
/// accepted on resume; it is refused naming the key, at the top and in
/// `[model]`.
#[test]
fn a_run_config_with_an_unknown_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "r", &["--steps", "1"]));
    let config = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    std::fs::write(t.join("r/config.toml"), format!("lerning_rate = 0.5\n{config}")).unwrap();
    fails(&resume(t, "r", &["--steps", "2"]), "lerning_rate");
    std::fs::write(t.join("r/config.toml"), config.replace("[model]\n", "[model]\nd_modle = 3\n")).unwrap();
    fails(&resume(t, "r", &["--steps", "2"]), "d_modle");
    // A bad value is refused with its line, as toy.toml's are.
    let line = config.lines().position(|l| l.starts_with("lr = ")).unwrap() + 1;
    let bad: String = config.lines().map(|l| if l.starts_with("lr = ") { "lr = \"fast\"\n".into() } else { format!("{l}\n") }).collect();
    std::fs::write(t.join("r/config.toml"), bad).unwrap();
    fails(&resume(t, "r", &["--steps", "2"]), &format!("config.toml line {line} (`lr = \"fast\"`)"));
    // A missing key is named without a line (the parser pointed at the file's first)
    let gone: String = config.lines().filter(|l| !l.starts_with("lr = ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(t.join("r/config.toml"), gone).unwrap();
    let e = fails(&resume(t, "r", &["--steps", "2"]), "config.toml: missing field `lr`");
    assert!(!e.contains(" line "), "{e}");
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    ok(&resume(t, "r", &["--steps", "2"]));
}

/// A hand edit of a run's config.toml that no longer describes its checkpoint:
/// fewer layers (a LoRA run then trained and saved 2 of its blocks' adapters,
/// which toy could not read back), other adapter targets, a context above
/// the model's (`--context` is refused so for a new run), a recipe that is
/// unknown or not the run's, no base, another base's SHA-256. Each is refused
/// on resume naming the field; the run as it was resumes.
#[test]
fn a_run_config_that_no_longer_describes_its_checkpoint_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "r", &["--steps", "1"]));
    let ft = &["train", "finetune", "--from", "r", "--out", "ft", "--steps", "1", "--threads", "1", "--eval-every", "0"];
    ok(&toy(t, &[&ft[..], &["--lora-rank", "2", "--context", "16"]].concat()));
    let edit = |run: &str, from: &str, to: &str| {
        let config = std::fs::read_to_string(t.join(run).join("config.toml")).unwrap();
        assert!(config.contains(from), "{config}");
        std::fs::write(t.join(run).join("config.toml"), config.replacen(from, to, 1)).unwrap();
        config
    };
    let layers = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    let n = layers.lines().find_map(|l| l.strip_prefix("n_layers = ")).unwrap().to_string();
    let config = edit("r", &format!("n_layers = {n}"), "n_layers = 1");
    fails(&resume(t, "r", &["--steps", "2"]), &format!("config.toml's n_layers 1 is not the checkpoint's {n}"));
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    let ctx = config.lines().find_map(|l| l.strip_prefix("context = ")).unwrap().to_string();
    edit("r", &format!("context = {ctx}"), "context = 100000");
    fails(&resume(t, "r", &["--steps", "2"]), &format!("config.toml's context 100000 is not the checkpoint's {ctx}"));
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    // A finetune run trains at a context its base takes (its checkpoint records the base's).
    let ft_config = edit("ft", "context = 16", "context = 100000");
    fails(&resume(t, "ft", &["--steps", "2"]), &format!("config.toml's context 100000: the model takes 1 to {ctx} tokens"));
    std::fs::write(t.join("ft/config.toml"), &ft_config).unwrap();
    // The model's own numbers: a tied head (it dropped the trained output.weight),
    // another RoPE base or norm epsilon, another context were taken as edited.
    let tied = config.lines().find(|l| l.starts_with("tied = ")).unwrap().to_string();
    let flipped = if tied.ends_with("true") { "tied = false" } else { "tied = true" };
    edit("r", &tied, flipped);
    fails(&resume(t, "r", &["--steps", "2"]), "config.toml's head is ");
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    for key in ["rope_base", "norm_eps"] {
        let line = config.lines().find(|l| l.starts_with(&format!("{key} = "))).unwrap().to_string();
        edit("r", &line, &format!("{key} = 2.0"));
        fails(&resume(t, "r", &["--steps", "2"]), &format!("config.toml's {key} 2 is not the checkpoint's"));
        std::fs::write(t.join("r/config.toml"), &config).unwrap();
    }
    edit("r", &format!("context = {ctx}"), "context = 8");
    fails(&resume(t, "r", &["--steps", "2"]), &format!("config.toml's context 8 is not the checkpoint's {ctx}"));
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    // Values the resume was not given are config.toml's keys in the message, not flags.
    let lr = config.lines().find(|l| l.starts_with("lr = ")).unwrap().to_string();
    edit("r", &lr, "lr = nan");
    fails(&resume(t, "r", &["--steps", "2"]), "--resume r: config.toml: lr NaN must be positive and finite");
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    edit("r", "\nsteps = 1\n", "\nsteps = 0\n");
    fails(&resume(t, "r", &[]), "config.toml: steps must be at least 1");
    fails(&resume(t, "r", &["--steps", "0"]), "toy train: --steps must be at least 1");
    std::fs::write(t.join("r/config.toml"), &config).unwrap();
    ok(&resume(t, "r", &["--steps", "2"]));
    let lora = edit("ft", "\"attn_k\", ", "");
    fails(&resume(t, "ft", &["--steps", "2"]), "config.toml's LoRA (rank 2 on attn_q,attn_v,attn_output) is not the checkpoint's");
    std::fs::write(t.join("ft/config.toml"), &lora).unwrap();
    // The recipe and the base: an unknown recipe (it read as from-scratch), none (a
    // finetune run's adapters then went on as a from-scratch run), no `from` (an
    // internal error, exit 1), another from_sha256 than the adapter's record.
    let line = |key: &str| lora.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key} in {lora}")).to_string() + "\n";
    edit("ft", "recipe = \"finetune\"", "recipe = \"wat\"");
    fails(&resume(t, "ft", &["--steps", "2"]), "unknown recipe \"wat\": from-scratch, warm-start or finetune");
    std::fs::write(t.join("ft/config.toml"), &lora).unwrap();
    edit("ft", &line("recipe = "), "");
    fails(&resume(t, "ft", &["--steps", "2"]), "has recipe = \"from-scratch\" but LoRA adapters, which only a finetune run has");
    std::fs::write(t.join("ft/config.toml"), &lora).unwrap();
    edit("ft", &line("from = "), "");
    fails(&resume(t, "ft", &["--steps", "2"]), "has recipe = \"finetune\" but no `from`");
    std::fs::write(t.join("ft/config.toml"), &lora).unwrap();
    let sha = line("from_sha256 = ");
    edit("ft", &sha, &format!("from_sha256 = \"{}\"\n", "0".repeat(64)));
    fails(&resume(t, "ft", &["--steps", "2"]), "from_sha256 000000000000… is not the base the checkpoint records");
    std::fs::write(t.join("ft/config.toml"), &lora).unwrap();
    ok(&resume(t, "ft", &["--steps", "2"]));
}

/// Smaller classes: a model written by `toy export merge` kept the base's run
/// id and save id (it is no checkpoint of that run), and an `--out` on a
/// read-only place exited 1 where train and prep exit 2.
#[test]
fn a_merged_model_is_no_checkpoint_of_the_base_run_and_unwritable_out_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "base", &["--steps", "1"]));
    ok(&toy(
        t,
        &[&["train", "finetune", "--from", "base/weights/latest", "--out", "ft", "--steps", "1", "--lora-rank", "2"], QUICK].concat(),
    ));
    ok(&toy(t, &["export", "merge", "--base", "base/weights/latest", "--lora", "ft/weights/latest", "--out", "m.gguf"]));
    let m = GgufFile::open(t.join("m.gguf")).unwrap();
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    for key in ["toy.run_id", "toy.save_id"] {
        assert!(b.get(key).is_some());
        assert!(m.get(key).is_none_or(|v| Some(v) != b.get(key)), "{key} is the base run's");
    }
    // /sys is read-only to every user where it is mounted.
    if std::fs::write("/sys/.toy-probe", b"").is_err() && Path::new("/sys").is_dir() {
        fails(
            &toy(t, &["export", "merge", "--base", "base/weights/latest", "--lora", "ft/weights/latest", "--out", "/sys/m.gguf"]),
            "/sys",
        );
        fails(&train(t, "/sys/r", &["--steps", "1"]), "/sys");
        std::fs::write(t.join("c.txt"), stories::generate_with(1, 5)).unwrap();
        fails(&toy(t, &["prep", "c.txt", "--out", "/sys/p"]), "/sys");
    }
}

/// Class 9, the gap the third pass's own adversarial run found: a run killed
/// before it wrote config.toml (kill -9 while the model is built) left `.lock`
/// and `weights/`; `--out` said "resume it", `--resume` said "no config.toml".
/// Now `--out` takes the skeleton again, and `--resume` says to.
#[test]
fn a_run_killed_before_it_started_can_be_started_again() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::create_dir_all(t.join("k/weights")).unwrap();
    std::fs::write(t.join("k/.lock"), b"12345\n").unwrap();
    std::fs::write(t.join("k/weights/.step_1.gguf.tmp-12345"), b"torn").unwrap();
    fails(&toy(t, &["train", "--resume", "k", "--threads", "1"]), "start it again with --out");
    ok(&train(t, "k", &["--steps", "1"]));
    assert!(t.join("k/config.toml").is_file());
    assert!(!t.join("k/weights/.step_1.gguf.tmp-12345").exists());
    // A folder with anything else in it is still refused.
    std::fs::create_dir_all(t.join("other")).unwrap();
    std::fs::write(t.join("other/notes.txt"), b"mine").unwrap();
    fails(&train(t, "other", &["--steps", "1"]), "other already exists and is not empty (not a run folder); choose another --out");
    // a run folder: resume it
    fails(&train(t, "k", &["--steps", "1"]), "run folder k already exists; choose another --out or resume it with --resume");
}

/// A checkpoint and its state copied in from another run (another seed) were
/// resumed without a word; a renamed run folder still resumes.
#[test]
fn another_runs_checkpoint_pair_is_refused_a_renamed_run_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "a", &["--steps", "2", "--seed", "1"]));
    ok(&train(t, "b", &["--steps", "2", "--seed", "2"]));
    for f in ["step_2.gguf", "step_2.state.gguf"] {
        std::fs::copy(t.join("b/weights").join(f), t.join("a/weights").join(f)).unwrap();
    }
    fails(&toy(t, &["train", "--resume", "a", "--steps", "3", "--threads", "1"]), "not by this run");
    std::fs::rename(t.join("b"), t.join("b2")).unwrap();
    ok(&toy(t, &["train", "--resume", "b2", "--steps", "3", "--threads", "1"]));
    // ... and again: its new checkpoints keep the id it started with (a second
    // resume was refused as "another run's"), as does a copied folder.
    ok(&toy(t, &["train", "--resume", "b2", "--steps", "4", "--threads", "1"]));
    let copy = std::process::Command::new("cp").args(["-r", "b2", "b3"]).current_dir(t).status().unwrap();
    assert!(copy.success());
    ok(&toy(t, &["train", "--resume", "b3", "--steps", "5", "--threads", "1"]));
    ok(&toy(t, &["train", "--resume", "b3", "--steps", "6", "--threads", "1"]));
}

/// A corpus path that is not UTF-8 was recorded lossily in config.toml: the
/// run trained, and every `--resume` said the corpus no longer existed.
#[test]
fn a_corpus_path_that_is_not_utf8_is_refused_up_front() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let name = std::ffi::OsStr::from_bytes(b"\xff\xfe.txt");
    std::fs::write(t.join(name), stories::generate_with(1, 5)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toy"))
        .current_dir(t)
        .args(["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "r", "--corpus"])
        .arg(name)
        .output()
        .unwrap();
    fails(&o, "UTF-8");
    assert!(!t.join("r").exists());
}

/// A run folder whose newest checkpoint was deleted by hand: its dangling
/// weights/latest is named (it was "a folder without weights/latest").
#[test]
fn a_dangling_latest_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "r", &["--steps", "1"]));
    let target = std::fs::read_link(t.join("r/weights/latest")).unwrap();
    std::fs::remove_file(t.join("r/weights").join(&target)).unwrap();
    fails(&toy(t, &["describe", "r"]), &format!("r: weights/latest points to {}, which is gone", target.display()));
}

/// A run that recorded no batches, its config.toml edited to record them, is
/// refused on resume (its recording would lack the steps done) before a
/// `batches.bin` or `batches.json` is written (both were left behind) and
/// before the resume is logged in `events.jsonl`.
#[test]
fn a_recording_that_cannot_go_on_leaves_no_files() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, "r", &["--steps", "2"]));
    let path = t.join("r/config.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    assert!(config.contains("record_batches = false"), "{config}");
    std::fs::write(&path, config.replacen("record_batches = false", "record_batches = true", 1)).unwrap();
    let (before, events) = (names(&t.join("r")), std::fs::read_to_string(t.join("r/events.jsonl")).unwrap());
    fails(&resume(t, "r", &["--steps", "3"]), "the recording cannot go on");
    assert_eq!(names(&t.join("r")), before);
    assert_eq!(std::fs::read_to_string(t.join("r/events.jsonl")).unwrap(), events, "no resume event");
}
