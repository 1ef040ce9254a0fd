//! The warm-start recipe after a new user's trial: a resume that takes the
//! settings the run used, the donor match report in `--json` and events,
//! index matching said as such, a freezable lens, degenerate donors refused,
//! and messages that name the real cause.

use crate::common::process::{fails, ok, toy};
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use std::path::Path;
use std::process::Output;

/// `toy train ARGS` on one thread, the loss lines kept off stdout.
fn train(dir: &Path, args: &[&str]) -> Output {
    toy(dir, &[&["train"], args, &["--threads", "1", "--log-every", "1000"]].concat())
}

/// A smoke warm-start run into `out` from `donor`, of `steps` steps.
fn warm(dir: &Path, donor: &str, out: &str, steps: &str, extra: &[&str]) -> Output {
    train(dir, &[&["warm-start", "--donor", donor, "--preset", "smoke", "--steps", steps, "--out", out], extra].concat())
}

/// `toy train --resume DIR --steps N ARGS`.
fn resume(dir: &Path, run: &str, steps: &str, extra: &[&str]) -> Output {
    train(dir, &[&["--resume", run, "--steps", steps], extra].concat())
}

/// A donor run in `dir/NAME`: a 32-wide smoke llama of one step (`seed`).
fn donor_run(dir: &Path, name: &str, seed: &str) {
    ok(&train(dir, &["--preset", "smoke", "--d-model", "32", "--steps", "1", "--seed", seed, "--out", name]));
}

/// config.toml records the resolved `--init`, `--match-by`, `--lens-init`,
/// the donor's file and SHA-256; a resume given them (the donor as its run
/// folder, a moved copy) goes on, one given others is refused, and a resume
/// needs no donor file unless it starts the run again.
#[test]
fn a_resume_takes_the_settings_and_donor_the_run_used() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    donor_run(t, "d", "1");
    ok(&warm(t, "d", "w", "1", &[]));
    let file = std::fs::canonicalize(t.join("d/weights/step_1.gguf")).unwrap();
    let config = std::fs::read_to_string(t.join("w/config.toml")).unwrap();
    for line in
        ["donor_init = \"donor\"", "match_by = \"token\"", "lens_init = \"pca\"", &format!("donor = {:?}", file.display().to_string())]
    {
        assert!(config.contains(line), "{line} not in {config}");
    }
    let sha = config.lines().find_map(|l| l.strip_prefix("donor_sha256 = ")).unwrap().trim_matches('"').to_string();
    assert_eq!(sha.len(), 64);
    let same = ["--init", "donor", "--match-by", "token", "--lens-init", "pca", "--donor", "d"];
    ok(&resume(t, "w", "2", &same));
    fails(&resume(t, "w", "3", &["--lens-init", "random"]), "train", "--lens-init random (the run has pca) contradicts the run");
    // Another donor is refused; the same bytes elsewhere are the donor moved.
    donor_run(t, "e", "2");
    fails(&resume(t, "w", "3", &["--donor", "e"]), "train", "--donor e (the run has");
    std::fs::copy(&file, t.join("moved.gguf")).unwrap();
    ok(&resume(t, "w", "3", &["--donor", "moved.gguf"]));
    assert!(std::fs::read_to_string(t.join("w/config.toml")).unwrap().contains("moved.gguf"));
    // No donor file needed to go on; a run from before the values were recorded.
    std::fs::remove_file(t.join("moved.gguf")).unwrap();
    let old = std::fs::read_to_string(t.join("w/config.toml")).unwrap();
    let old: String = old.lines().filter(|l| !l.starts_with("lens_init") && !l.starts_with("match_by")).map(|l| format!("{l}\n")).collect();
    std::fs::write(t.join("w/config.toml"), old).unwrap();
    ok(&resume(t, "w", "4", &["--lens-init", "pca", "--match-by", "token"]));
    // Starting again (no checkpoint) reads the donor again: its bytes must not have changed.
    ok(&warm(t, "e", "w2", "1", &[]));
    std::fs::create_dir(t.join("r")).unwrap();
    std::fs::copy(t.join("w2/config.toml"), t.join("r/config.toml")).unwrap();
    let e = std::fs::canonicalize(t.join("e/weights/step_1.gguf")).unwrap();
    std::fs::copy(t.join("d/weights/step_1.gguf"), &e).unwrap();
    fails(&resume(t, "r", "1", &[]), "train", "changed since the run started");
}

/// The `--json` summary (stdout's last line) and `run_start` of the run in `dir/run`.
fn json_and_start(o: &Output, run: &Path) -> (serde_json::Value, serde_json::Value) {
    ok(o);
    let out = String::from_utf8_lossy(&o.stdout);
    let summary = serde_json::from_str(out.trim_end().lines().last().unwrap()).unwrap();
    let events = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let start = events.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|e| e["kind"] == "run_start").unwrap();
    (summary, start)
}

/// `--json` keeps the match report: in the summary and in `run_start`.
#[test]
fn the_match_report_is_in_json_and_events() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    donor_run(t, "d", "1");
    let (summary, start) = json_and_start(&warm(t, "d", "w", "1", &["--json"]), &t.join("w"));
    for v in [&summary["donor"], &start["donor"]] {
        assert_eq!((v["matched"].as_u64(), v["total"].as_u64(), v["match_rate"].as_f64()), (Some(1024), Some(1024), Some(1.0)), "{v}");
        assert_eq!(v["match_by"], "token");
    }
    // A from-scratch run has none.
    ok(&train(t, &["--preset", "smoke", "--steps", "1", "--out", "s"]));
    let events = std::fs::read_to_string(t.join("s/events.jsonl")).unwrap();
    assert!(!events.contains("\"donor\""));
}

/// A donor GGUF at `path`: a `[16, 1024]` token table (an LCG's values of
/// RMS about 0.05, times `scale`; `zero`: all zeros) whose tokens are
/// `tok0`, `tok1`, ... (none the student's).
fn synthetic_donor(path: &Path, scale: f32, zero: bool) {
    let mut x = 12345u64;
    let table: Vec<f32> = (0..16 * 1024)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if zero {
                0.0
            } else {
                scale * 0.1 * (((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5) * 2.0
            }
        })
        .collect();
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.set("llama.embedding_length", 16u32).unwrap();
    g.set("tokenizer.ggml.tokens", Value::Array(Array::String((0..1024).map(|i| format!("tok{i}")).collect()))).unwrap();
    g.add_tensor_data("token_embd.weight", &[16, 1024], &table).unwrap();
    g.write(path).unwrap();
}

/// `--match-by index` says that ids are paired by number, and how many of
/// them have the same token text on both sides.
#[test]
fn index_matching_says_when_the_tokenizers_differ() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    donor_run(t, "d", "1");
    synthetic_donor(&t.join("syn.gguf"), 1.0, false);
    let o = warm(t, "syn.gguf", "w", "1", &["--match-by", "index"]);
    ok(&o);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("1024 ids paired by number") && said.contains("the tokenizers differ: 0 of them (0.0%)"), "{said}");
    assert!(!said.contains("matched (100.0%)"), "{said}");
    let o = warm(t, "d", "w2", "1", &["--match-by", "index"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("every id has the same token text in both"));
    let (summary, _) = json_and_start(&warm(t, "syn.gguf", "w3", "1", &["--match-by", "index", "--json"]), &t.join("w3"));
    assert_eq!((summary["donor"]["match_by"].as_str(), summary["donor"]["same_text"].as_u64()), (Some("index"), Some(0)));
}

/// The lens is frozen by name: the checkpoint's table (the donor's table
/// times the lens) stays as it was while the rest trains.
#[test]
fn the_lens_can_be_frozen() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    synthetic_donor(&t.join("syn.gguf"), 1.0, false);
    for (out, pattern) in [("a", "lens"), ("b", "lens.weight")] {
        ok(&warm(t, "syn.gguf", out, "2", &["--match-by", "index", "--freeze", pattern, "--save-every", "1", "--lr", "1e-2"]));
        let at =
            |step: u32, name: &str| GgufFile::open(t.join(format!("{out}/weights/step_{step}.gguf"))).unwrap().tensor_f32(name).unwrap();
        assert_eq!(at(1, "token_embd.weight"), at(2, "token_embd.weight"), "--freeze {pattern}: the lens trained");
        assert_ne!(at(1, "output.weight"), at(2, "output.weight"));
    }
    fails(&warm(t, "syn.gguf", "c", "1", &["--match-by", "index", "--freeze", "lenz"]), "train", "lens.weight)");
}

/// A donor table the student cannot train from is refused, no run made.
#[test]
fn degenerate_donor_tables_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let cases =
        [("zero.gguf", 1.0, true, "is all zeros"), ("tiny.gguf", 1e-30, false, "is too small"), ("huge.gguf", 1e22, false, "is too large")];
    for (name, scale, zero, said) in cases {
        synthetic_donor(&t.join(name), scale, zero);
        fails(&warm(t, name, "w", "1", &["--match-by", "index"]), "train", said);
    }
    // Every row the same: 0.5 everywhere.
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.add_tensor_data("token_embd.weight", &[16, 1024], &[0.5f32; 16 * 1024]).unwrap();
    g.write(t.join("const.gguf")).unwrap();
    fails(&warm(t, "const.gguf", "w", "1", &["--match-by", "index"]), "train", "has every row the same");
    assert!(!t.join("w").exists());
}

/// Refusals that name the real cause, before a donor is read or a BPE trained.
#[test]
fn warm_start_refusals_name_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("text.txt"), "one two three four five six seven eight nine ten\n".repeat(200)).unwrap();
    let ws = |extra: &[&str]| {
        train(t, &[&["warm-start", "--donor", "missing.gguf", "--steps", "1", "--corpus", "text.txt", "--out", "w"], extra].concat())
    };
    fails(&ws(&["--preset", "gpt2-124m"]), "train", "--preset gpt2-124m is a gpt2 model; warm-start trains a llama student");
    fails(&ws(&["--preset", "smollm2-135m"]), "train", "--preset smollm2-135m ties its output head");
    fails(&ws(&["--preset", "smoke", "--tied"]), "train", "drop --tied");
    // An existing --out is said before the donor is read.
    std::fs::create_dir(t.join("w")).unwrap();
    std::fs::write(t.join("w/x"), "").unwrap();
    fails(&ws(&["--preset", "smoke"]), "train", "already exists");
    // Chat records: the finetune recipe's, not --data-format's.
    synthetic_donor(&t.join("syn.gguf"), 1.0, false);
    std::fs::write(t.join("chat.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n").unwrap();
    let o = train(t, &["warm-start", "--donor", "syn.gguf", "--preset", "smoke", "--steps", "1", "--corpus", "chat.jsonl", "--out", "c"]);
    fails(&o, "train", "chat data needs the finetune recipe");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("--data-format"));
}

/// config.toml names a stream's order (`stream = "in-order"`); a run that
/// wrote the old `stream = false` still resumes.
#[test]
fn the_stream_order_is_named_and_old_runs_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    synthetic_donor(&t.join("syn.gguf"), 1.0, false);
    ok(&warm(t, "syn.gguf", "w", "1", &["--match-by", "index"]));
    let config = std::fs::read_to_string(t.join("w/config.toml")).unwrap();
    assert!(config.contains("stream = \"in-order\"\n"), "{config}");
    std::fs::write(t.join("w/config.toml"), config.replace("stream = \"in-order\"", "stream = false")).unwrap();
    ok(&resume(t, "w", "2", &[]));
    assert!(std::fs::read_to_string(t.join("w/config.toml")).unwrap().contains("stream = \"in-order\"\n"));
}
