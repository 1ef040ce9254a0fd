//! The finetune recipe: it starts from the given model exactly, keeps frozen
//! tensors fixed, resumes exactly, and refuses bases it cannot train.

use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use std::path::Path;
use std::process::{Command, Output};
use toy::data::stories;

fn toy(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toy")).args(args).current_dir(dir).env_remove("TOY_RUN_ID").output().unwrap()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn fails(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("toy train: ") && err.contains(needle), "{err:?} lacks {needle:?}");
}

const QUICK: &[&str] = &["--preset", "smoke", "--threads", "1", "--log-every", "1000"];

fn finetune(dir: &Path, out: &str, extra: &[&str]) -> Output {
    let mut args = vec!["train", "finetune", "--from", "base/weights/latest", "--out", out];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(extra);
    toy(dir, &args)
}

/// A smoke llama trained on other stories, with their own BPE: the base model.
fn base(dir: &Path) {
    std::fs::write(dir.join("old.txt"), stories::generate_with(11, 60)).unwrap();
    let mut args = vec!["train", "--corpus", "old.txt", "--vocab-size", "300", "--steps", "20", "--out", "base"];
    args.extend_from_slice(QUICK);
    ok(&toy(dir, &args));
}

fn losses(run: &Path, kind: &str, key: &str) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == kind)
        .map(|e| (e["step"].as_u64().unwrap(), e[key].to_string()))
        .collect();
    v.sort();
    v.dedup_by_key(|p| p.0);
    v
}

#[test]
fn finetune_starts_from_the_model_and_learns_the_new_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    ok(&finetune(t, "ft", &["--steps", "30", "--save-initial", "--eval-every", "30"]));
    let (b, s0) = (GgufFile::open(t.join("base/weights/latest")).unwrap(), GgufFile::open(t.join("ft/weights/step_0.gguf")).unwrap());
    for info in b.tensors() {
        assert_eq!(b.tensor_f32(&info.name).unwrap(), s0.tensor_f32(&info.name).unwrap(), "{} changed before step 1", info.name);
    }
    assert_eq!(s0.get("tokenizer.ggml.tokens"), b.get("tokenizer.ggml.tokens"), "the base's tokenizer is kept");
    let val = losses(&t.join("ft"), "eval", "val_loss");
    let (first, last): (f64, f64) = (val[0].1.parse().unwrap(), val.last().unwrap().1.parse().unwrap());
    assert!(val[0].0 == 0 && last < first, "validation loss on the new corpus did not fall: {val:?}");
    let events = std::fs::read_to_string(t.join("ft/events.jsonl")).unwrap();
    assert!(events.contains("\"recipe\":\"finetune\""));
}

#[test]
fn frozen_tensors_stay_fixed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    ok(&finetune(t, "ft", &["--steps", "5", "--freeze", "token_embd,blk.0."]));
    let (b, f) = (GgufFile::open(t.join("base/weights/latest")).unwrap(), GgufFile::open(t.join("ft/weights/latest")).unwrap());
    for info in b.tensors() {
        let same = b.tensor_f32(&info.name).unwrap() == f.tensor_f32(&info.name).unwrap();
        let frozen = info.name.contains("token_embd") || info.name.starts_with("blk.0.");
        assert_eq!(same, frozen, "{}: frozen {frozen}, unchanged {same}", info.name);
    }
    fails(&finetune(t, "x", &["--freeze", "nothing_like_this"]), "matches no parameter");
    fails(&finetune(t, "x", &["--freeze", "weight"]), "no parameter to train");
}

#[test]
fn a_resumed_finetune_gives_the_same_curve() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    // A constant learning rate: the schedule does not depend on --steps.
    let lr = ["--lr", "0.002", "--min-lr", "0.002", "--warmup-steps", "0"];
    ok(&finetune(t, "a", &[&lr[..], &["--steps", "8"]].concat()));
    ok(&finetune(t, "b", &[&lr[..], &["--steps", "4"]].concat()));
    ok(&toy(t, &["train", "--resume", "b", "--steps", "8", "--threads", "1"]));
    assert_eq!(losses(&t.join("a"), "step", "loss"), losses(&t.join("b"), "step", "loss"));
    let o = toy(t, &["train", "--resume", "b", "--steps", "9", "--from", "x.gguf"]);
    fails(&o, "--from");
}

#[test]
fn bases_it_cannot_train_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    let mut args = vec!["train", "--arch", "gpt2", "--steps", "2", "--out", "g"];
    args.extend_from_slice(QUICK);
    ok(&toy(t, &args));
    fails(&toy(t, &["train", "finetune", "--from", "g/weights/latest", "--steps", "1", "--out", "x"]), "takes llama models");
    fails(&toy(t, &["train", "finetune", "--from", "missing.gguf", "--steps", "1", "--out", "x"]), "missing.gguf");
    fails(&toy(t, &["train", "finetune", "--steps", "1", "--out", "x"]), "--from");
    fails(&toy(t, &["train", "--from", "base/weights/latest", "--steps", "1", "--out", "x"]), "finetune recipe");
    fails(&finetune(t, "x", &["--d-model", "32"]), "--d-model");
    fails(&finetune(t, "x", &["--context", "4096"]), "--context 4096");
    // A quantized tensor.
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata() {
        if !k.starts_with("general.alignment") {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in b.tensors() {
        if info.name == "blk.0.ffn_up.weight" {
            // q8_0: blocks of 32 values in 34 bytes.
            let n = (info.ne[0] * info.ne[1]) as usize / 32;
            g.add_tensor_bytes(&info.name, DType::Q8_0, &info.shape(), vec![0u8; n * 34]).unwrap();
        } else {
            g.add_tensor_data(&info.name, &info.shape(), &b.tensor_f32(&info.name).unwrap()).unwrap();
        }
    }
    g.write(t.join("q8.gguf")).unwrap();
    fails(&toy(t, &["train", "finetune", "--from", "q8.gguf", "--steps", "1", "--out", "x"]), "q8_0");
    // A corpus prepared with another tokenizer than the base's.
    std::fs::write(t.join("new.txt"), stories::generate_with(3, 30)).unwrap();
    ok(&toy(t, &["prep", "new.txt", "--vocab-size", "280", "--out", "p"]));
    fails(&finetune(t, "x", &["--corpus", "p"]), "another tokenizer");
    assert!(!t.join("x").exists());
}
