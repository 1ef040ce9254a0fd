//! The finetune recipe: it starts from the given model exactly, keeps frozen
//! tensors fixed, resumes exactly, and refuses bases it cannot train.

use crate::common::process::toy;
use crate::common::{eval_loss, rewrite_gguf};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use std::path::Path;
use std::process::Output;
use toy_stories as stories;

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
    ok(&finetune(t, "ft", &["--steps", "30", "--save-initial", "--eval-every", "30", "--lr", "1e-3"]));
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
    // Named after its base (general.name), not after a preset it does not have.
    assert_eq!(b.get("general.name").and_then(|v| v.as_str()), Some("toy-llama-smoke"));
    assert_eq!(s0.get("general.name").and_then(|v| v.as_str()), Some("toy-llama-smoke-finetune"));
    assert!(events.contains("\"name\":\"toy-llama-smoke-finetune\""));
    // and so is its loss plot (not "llama tiny", the preset that gave its batch)
    let svg = std::fs::read_to_string(t.join("ft/loss.svg")).unwrap();
    assert!(svg.contains("toy-llama-smoke-finetune") && !svg.contains("llama tiny"), "loss.svg's title");
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
    fails(&toy(t, &["train", "finetune", "--from", "g/weights/latest", "--steps", "1", "--out", "x"]), "takes llama and qwen2 models");
    fails(&toy(t, &["train", "finetune", "--from", "missing.gguf", "--steps", "1", "--out", "x"]), "missing.gguf");
    fails(&toy(t, &["train", "finetune", "--steps", "1", "--out", "x"]), "--from");
    fails(&toy(t, &["train", "--from", "base/weights/latest", "--steps", "1", "--out", "x"]), "finetune recipe");
    fails(&finetune(t, "x", &["--d-model", "32"]), "--d-model");
    fails(&finetune(t, "x", &["--context", "4096"]), "--context 4096");
    // A corpus prepared with another tokenizer than the base's.
    std::fs::write(t.join("new.txt"), stories::generate_with(3, 30)).unwrap();
    ok(&toy(t, &["prep", "new.txt", "--vocab-size", "280", "--out", "p"]));
    fails(&finetune(t, "x", &["--corpus", "p"]), "another tokenizer");
    assert!(!t.join("x").exists());
}

#[test]
fn lora_trains_adapters_only_and_merges_into_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    std::fs::write(t.join("new.txt"), stories::generate_with(5, 40)).unwrap();
    let lora = ["--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "attn_q,attn_v,ffn_down", "--lr", "0.01"];
    ok(&finetune(t, "lo", &[&lora[..], &["--corpus", "new.txt", "--steps", "30", "--save-initial"]].concat()));
    // Step 0 is the base: B starts at zero, A within loralib's bound.
    let s0 = GgufFile::open(t.join("lo/weights/step_0.gguf")).unwrap();
    assert_eq!(s0.get_str("general.type").unwrap(), "adapter");
    assert_eq!(s0.get_str("adapter.type").unwrap(), "lora");
    assert_eq!(s0.tensors().len(), 2 * 3 * 2, "two blocks, three targets, A and B");
    let a = s0.tensor_f32("blk.0.attn_q.weight.lora_a").unwrap();
    assert!(a.iter().all(|x| x.abs() <= 1.0 / 8.0) && a.iter().any(|&x| x != 0.0));
    assert!(s0.tensor_f32("blk.1.ffn_down.weight.lora_b").unwrap().iter().all(|&x| x == 0.0));
    assert_eq!(s0.tensor("blk.0.ffn_down.weight.lora_a").unwrap().shape(), vec![128, 4]);
    let base_loss = eval_loss(t, &["base"]);
    assert!((eval_loss(t, &["lo/weights/step_0.gguf"]) - base_loss).abs() < 1e-6, "step 0 differs from the base");
    // It learned, and the run folder, the adapter on its base and the merged model agree.
    let tuned = eval_loss(t, &["lo"]);
    assert!(tuned < base_loss, "LoRA did not lower the loss on the new corpus: {tuned} vs {base_loss}");
    assert!((eval_loss(t, &["base", "--lora", "lo/weights/latest"]) - tuned).abs() < 1e-6);
    ok(&toy(t, &["export", "merge", "--base", "base/weights/latest", "--lora", "lo/weights/latest", "--out", "merged.gguf"]));
    assert!((eval_loss(t, &["merged.gguf"]) - tuned).abs() < 1e-5);
    // Run folders as --base and --lora, as generate and eval take them: the same file.
    ok(&toy(t, &["export", "merge", "--base", "base", "--lora", "lo", "--out", "merged2.gguf"]));
    let (m1, m2) = (GgufFile::open(t.join("merged.gguf")).unwrap(), GgufFile::open(t.join("merged2.gguf")).unwrap());
    // Both record the adapter by its absolute path (the run folder's: its checkpoint) and hash.
    let adapter = std::fs::canonicalize(t.join("lo/weights/latest")).unwrap();
    for m in [&m1, &m2] {
        assert_eq!(m.get_str("toy.lora.merged").unwrap(), adapter.display().to_string());
        assert_eq!(m.get_str("toy.lora.merged_sha256").unwrap(), toy::formats::adapter::file_sha256(&adapter).unwrap());
    }
    for name in ["blk.0.attn_q.weight", "blk.1.ffn_down.weight"] {
        assert!(m1.tensor_f32(name).unwrap() == m2.tensor_f32(name).unwrap(), "{name} differs between the two merges");
    }
    let m = GgufFile::open(t.join("merged.gguf")).unwrap();
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    assert_eq!(m.tensor_f32("blk.0.attn_k.weight").unwrap(), b.tensor_f32("blk.0.attn_k.weight").unwrap(), "an unadapted matrix changed");
    assert_ne!(m.tensor_f32("blk.0.attn_q.weight").unwrap(), b.tensor_f32("blk.0.attn_q.weight").unwrap());

    // --type: matrices in ggml's q8_0, vectors f32, llama.cpp's file type; the loss barely moves.
    let merge = |out: &str, ty: &str| {
        toy(t, &["export", "merge", "--base", "base/weights/latest", "--lora", "lo/weights/latest", "--out", out, "--type", ty])
    };
    ok(&merge("q8.gguf", "q8_0"));
    let q = GgufFile::open(t.join("q8.gguf")).unwrap();
    assert_eq!((q.tensor("blk.0.attn_q.weight").unwrap().dtype, q.tensor("output_norm.weight").unwrap().dtype), (DType::Q8_0, DType::F32));
    assert_eq!(q.get_u64("general.file_type").unwrap(), 7);
    let lq = eval_loss(t, &["q8.gguf"]);
    assert!((lq - tuned).abs() / tuned < 1e-2, "q8_0 loss {lq} against {tuned}");
    // Rows of 64 do not split into q4_K's blocks of 256: q5_0 as llama.cpp falls back, said on stderr.
    let o = merge("q4k.gguf", "q4_k");
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("do not split into q4_K blocks of 256"));
    assert_eq!(GgufFile::open(t.join("q4k.gguf")).unwrap().tensor("blk.0.attn_q.weight").unwrap().dtype, DType::Q5_0);
    crate::common::process::fails(&merge("x.gguf", "q3_k"), "export", "q3_k");
}

#[test]
fn a_resumed_lora_run_gives_the_same_curve() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    let args = ["--lora-rank", "2", "--lr", "0.01", "--min-lr", "0.01", "--warmup-steps", "0"];
    ok(&finetune(t, "a", &[&args[..], &["--steps", "8"]].concat()));
    ok(&finetune(t, "b", &[&args[..], &["--steps", "4"]].concat()));
    // The base moves before the resume: the run names the new path with --from,
    // which must be the same bytes; a changed copy is refused.
    std::fs::copy(t.join("base/weights/latest"), t.join("moved.gguf")).unwrap();
    let mut changed = std::fs::read(t.join("moved.gguf")).unwrap();
    changed.push(0);
    std::fs::write(t.join("changed.gguf"), changed).unwrap();
    std::fs::rename(t.join("base"), t.join("gone")).unwrap();
    fails(&toy(t, &["train", "--resume", "b", "--steps", "8", "--threads", "1"]), "moved?");
    fails(&toy(t, &["train", "--resume", "b", "--steps", "8", "--from", "changed.gguf"]), "SHA-256");
    ok(&toy(t, &["train", "--resume", "b", "--steps", "8", "--threads", "1", "--from", "moved.gguf"]));
    assert_eq!(losses(&t.join("a"), "step", "loss"), losses(&t.join("b"), "step", "loss"));
    fails(&toy(t, &["train", "--resume", "b", "--steps", "9", "--lora-rank", "3"]), "--lora-rank");
    // The run now records the new path: it resumes without --from.
    ok(&toy(t, &["train", "--resume", "b", "--steps", "9", "--threads", "1"]));
}

#[test]
fn bad_lora_settings_and_adapters_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    fails(&finetune(t, "x", &["--lora-rank", "0"]), "--lora-rank 0");
    fails(&finetune(t, "x", &["--lora-rank", "65"]), "model width 64");
    fails(&finetune(t, "x", &["--lora-rank", "2", "--lora-targets", "attn_q,wq"]), "\"wq\"");
    fails(&finetune(t, "x", &["--lora-alpha", "4"]), "need --lora-rank");
    // The batch is checked against the finetune's context (the base's 32), not the default preset's 64.
    fails(&toy(t, &["train", "finetune", "--from", "base", "--batch", "600000", "--out", "x"]), "--batch 600000 × --context 32");
    fails(&finetune(t, "x", &["--lora-rank", "2", "--lora-alpha", "nan"]), "--lora-alpha");
    fails(&toy(t, &["train", "--preset", "smoke", "--lora-rank", "2", "--out", "x"]), "finetune recipe");
    assert!(!t.join("x").exists());
    // An adapter made for another base (another width) and a model given as an adapter.
    ok(&finetune(t, "lo", &["--lora-rank", "2", "--steps", "2"]));
    let mut args = vec!["train", "--d-model", "32", "--steps", "2", "--out", "other"];
    args.extend_from_slice(QUICK);
    ok(&toy(t, &args));
    let o = toy(t, &["generate", "other", "--lora", "lo/weights/latest", "-n", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("another base"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = toy(t, &["eval", "base", "--lora", "other/weights/latest", "--corpus", "old.txt"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a LoRA adapter"));
    let o = toy(t, &["export", "merge", "--base", "other/weights/latest", "--lora", "lo/weights/latest", "--out", "m.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!t.join("m.gguf").exists());
}

#[test]
fn adapters_keep_to_their_base_and_merge_never_overwrites_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    std::fs::copy(t.join("base/weights/latest"), t.join("b.gguf")).unwrap();
    let o = toy(t, &["train", "finetune", "--from", "b.gguf", "--lora-rank", "2", "--steps", "2", "--out", "lo", "--threads", "1"]);
    ok(&o);
    let ad = "lo/weights/latest";
    let merge = |out: &str| toy(t, &["export", "merge", "--base", "b.gguf", "--lora", ad, "--out", out]);
    for out in ["b.gguf", ad, "lo/weights/step_2.gguf", "lo", "lo/weights/step_2.state.gguf"] {
        let o = merge(out);
        assert_eq!(o.status.code(), Some(2), "--out {out}: {}", String::from_utf8_lossy(&o.stderr));
    }
    ok(&merge("m.gguf"));
    // A missing folder above --out is made.
    ok(&merge("out/merged/m.gguf"));
    assert_eq!(std::fs::read(t.join("m.gguf")).unwrap(), std::fs::read(t.join("out/merged/m.gguf")).unwrap());
    // An adapter whose base is itself.
    let f = GgufFile::open(t.join(ad)).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k == "toy.lora.base" {
            g.set(k, t.join("self.gguf").display().to_string()).unwrap();
        } else if k != "general.alignment" {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in f.tensors() {
        g.add_tensor_data(&info.name, &info.shape(), &f.tensor_f32(&info.name).unwrap()).unwrap();
    }
    g.write(t.join("self.gguf")).unwrap();
    let o = toy(t, &["eval", "self.gguf", "--corpus", "old.txt"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a model"));
    // The base swapped for another model of the same shape.
    let mut args = vec!["train", "--corpus", "old.txt", "--vocab-size", "300", "--steps", "3", "--seed", "9", "--out", "other"];
    args.extend_from_slice(QUICK);
    ok(&toy(t, &args));
    std::fs::copy(t.join("other/weights/latest"), t.join("b.gguf")).unwrap();
    let o = toy(t, &["eval", "lo", "--corpus", "old.txt"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("another model of the same shape"), "{}", String::from_utf8_lossy(&o.stderr));
    fails(&toy(t, &["train", "--resume", "lo", "--steps", "4", "--threads", "1"]), "another model of the same shape");
    // Named by the user, another base file is noted, not refused (another
    // quantization of the same model is how a QLoRA adapter is used).
    let o = toy(t, &["eval", "b.gguf", "--lora", "lo/weights/latest", "--corpus", "old.txt"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("note: --lora lo/weights/latest was trained on a base with sha256"), "{err}");
}

#[test]
fn an_f16_base_stays_f16_under_lora() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    // The base with every matrix in f16, as llama.cpp converts models.
    rewrite_gguf(&t.join("base/weights/latest"), &t.join("b16.gguf"), |_| DType::F16);
    std::fs::write(t.join("new.txt"), stories::generate_with(5, 40)).unwrap();
    let args = [
        "train",
        "finetune",
        "--from",
        "b16.gguf",
        "--lora-rank",
        "4",
        "--lr",
        "0.01",
        "--corpus",
        "new.txt",
        "--steps",
        "20",
        "--out",
        "lo",
    ];
    let mut a = args.to_vec();
    a.extend_from_slice(QUICK);
    ok(&toy(t, &a));
    let cfg = std::fs::read_to_string(t.join("lo/config.toml")).unwrap();
    assert!(cfg.contains("base_dtype = \"f16\""), "{cfg}");
    let tuned = eval_loss(t, &["lo"]);
    assert!(tuned.is_finite() && tuned < eval_loss(t, &["b16.gguf"]));
    assert!((eval_loss(t, &["b16.gguf", "--lora", "lo/weights/latest"]) - tuned).abs() < 1e-6);
    // Merged in f16: the same model up to f16 rounding of the merged matrices.
    ok(&toy(t, &["export", "merge", "--base", "b16.gguf", "--lora", "lo/weights/latest", "--out", "m16.gguf"]));
    assert_eq!(GgufFile::open(t.join("m16.gguf")).unwrap().tensor("blk.0.attn_q.weight").unwrap().dtype, DType::F16);
    assert!((eval_loss(t, &["m16.gguf"]) - tuned).abs() < 1e-3);
}

#[test]
fn a_smollm_pre_tokenizer_and_chat_template_are_read_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    // The base's vocabulary under SmolLM2's pre-tokenizer (llama.cpp's "smollm": digits one by one).
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata() {
        match k.as_str() {
            "general.alignment" => {}
            "tokenizer.ggml.pre" => g.set(k, "smollm").unwrap(),
            _ => g.set(k, v.clone()).unwrap(),
        }
    }
    g.set("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}").unwrap();
    for info in b.tensors() {
        g.add_tensor_data(&info.name, &info.shape(), &b.tensor_f32(&info.name).unwrap()).unwrap();
    }
    g.write(t.join("smol.gguf")).unwrap();
    let ck = toy::formats::checkpoint::open_checkpoint(&t.join("smol.gguf")).unwrap();
    let tok = ck.tokenizer.unwrap();
    let ids = tok.encode("In 2024 there were 365 days.").unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| tok.decode(&[i]).unwrap()).collect();
    for d in ["2", "0", "4", "3", "6", "5"] {
        assert!(pieces.iter().any(|p| p == d), "digit {d} is not its own token: {pieces:?}");
    }
    assert!(pieces.iter().all(|p| !p.chars().any(|c| c.is_ascii_digit()) || p.chars().count() == 1), "{pieces:?}");
    ok(&toy(t, &["train", "finetune", "--from", "smol.gguf", "--steps", "2", "--out", "ft", "--threads", "1", "--preset", "smoke"]));
    let f = GgufFile::open(t.join("ft/weights/latest")).unwrap();
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(
        f.get_str("tokenizer.chat_template").unwrap(),
        "{% for m in messages %}{{ m.content }}{% endfor %}",
        "the base's template is kept"
    );
    let mut other = GgufWriter::new();
    other.set("general.architecture", "llama").unwrap();
    for (k, v) in b.metadata() {
        if k == "tokenizer.ggml.pre" {
            other.set(k, "qwen35").unwrap();
        } else if k != "general.alignment" && k != "general.architecture" {
            other.set(k, v.clone()).unwrap();
        }
    }
    for info in b.tensors() {
        other.add_tensor_data(&info.name, &info.shape(), &b.tensor_f32(&info.name).unwrap()).unwrap();
    }
    other.write(t.join("qwen.gguf")).unwrap();
    fails(&toy(t, &["train", "finetune", "--from", "qwen.gguf", "--steps", "1", "--out", "x"]), "pre-tokenizer \"qwen35\"");
}

#[test]
fn finetune_context_defaults_to_the_models_up_to_1024() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let long = ["train", "--preset", "smoke", "--context", "1100", "--steps", "1", "--eval-every", "0", "--threads", "1", "--out", "long"];
    ok(&toy(t, &long));
    let context = |out: &str, extra: &[&str]| -> u64 {
        let args =
            [&["train", "finetune", "--from", "long/weights/latest", "--steps", "1", "--threads", "1", "--out", out][..], extra].concat();
        ok(&toy(t, &args));
        let text = std::fs::read_to_string(t.join(out).join("events.jsonl")).unwrap();
        let start: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        start["config"]["context"].as_u64().unwrap()
    };
    assert_eq!(context("a", &["--batch", "1"]), 1024, "the model's 1100, capped");
    assert_eq!(context("b", &["--preset", "smoke"]), 32, "a preset's context");
    // The checkpoint keeps the positions the model takes, not the 32-token windows it was trained on.
    let ck = GgufFile::open(t.join("b/weights/latest")).unwrap();
    assert_eq!(ck.get("llama.context_length").and_then(|v| v.as_u64()), Some(1100));
    ok(&toy(t, &["eval", "b", "--corpus", "long/config.toml", "--context", "64"]));
    assert_eq!(context("c", &["--context", "1100", "--batch", "1"]), 1100);
    // The learning rate a fine-tune starts from: TRL's 2e-5 for every weight, 2e-4 for LoRA; --lr wins.
    let lr = |out: &str| -> (f64, f64) {
        let text = std::fs::read_to_string(t.join(out).join("config.toml")).unwrap();
        let v: toml::Value = toml::from_str(&text).unwrap();
        let f = |k: &str| v[k].as_float().unwrap_or_else(|| panic!("{k} in {text}"));
        (f("lr"), f("min_lr"))
    };
    assert_eq!(lr("a"), (2e-5, 2e-6));
    assert_eq!(context("d", &["--preset", "smoke", "--lora-rank", "2"]), 32);
    assert_eq!(lr("d"), (2e-4, 2e-5));
    assert_eq!(context("e", &["--preset", "smoke", "--lr", "0.003"]), 32);
    assert_eq!(lr("e"), (3e-3, 3e-4));
    // LoRA targets by PEFT's names, and all-linear.
    let targets = |out: &str, given: &str| -> Vec<String> {
        context(out, &["--preset", "smoke", "--lora-rank", "2", "--lora-targets", given]);
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(t.join(out).join("config.toml")).unwrap()).unwrap();
        v["model"]["lora"]["targets"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
    };
    assert_eq!(targets("f", "q_proj,o_proj,attn_q"), ["attn_q", "attn_output"]);
    assert_eq!(targets("g", "all-linear").len(), 7);
    // A resume may repeat the run's flags as they were given: all-linear, PEFT's names.
    let again = |steps: &str, targets: &str| {
        toy(t, &["train", "--resume", "g", "--steps", steps, "--threads", "1", "--lora-rank", "2", "--lora-targets", targets])
    };
    ok(&again("2", "all-linear"));
    ok(&again("3", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"));
    fails(&again("4", "q_proj"), "--lora-targets");
}

/// Diverged weights (a finite training loss, then a NaN validation loss: an
/// absurd learning rate) end the run with exit 1 and no checkpoint of them, as
/// a non-finite training loss does; nothing saved, no run folder left. An
/// empty folder that the user made and named with `--out` is theirs: it stays,
/// emptied of what the run wrote.
#[test]
fn a_diverged_run_saves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    let o = finetune(t, "e8", &["--lora-rank", "4", "--lr", "1e30", "--steps", "1"]);
    crate::common::process::fails_with(&o, 1, "the validation loss is NaN after step 1: the weights diverged");
    assert!(!t.join("e8").exists());
    std::fs::create_dir(t.join("mine")).unwrap();
    let o = finetune(t, "mine", &["--lora-rank", "4", "--lr", "1e30", "--steps", "1"]);
    crate::common::process::fails_with(&o, 1, "nothing was saved, so what the run wrote in mine was removed");
    assert_eq!(std::fs::read_dir(t.join("mine")).unwrap().count(), 0, "the user's folder, emptied");
}

#[test]
fn resume_takes_a_base_folder_and_targets_in_any_order_and_merge_keeps_the_adapter() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    // PEFT's names, written with a space as a Python list often is.
    ok(&finetune(t, "r", &["--lora-rank", "2", "--lora-targets", "q_proj, v_proj", "--steps", "2"]));
    // --from a run folder (its weights/latest), as finetune takes it; the targets as a set.
    ok(&toy(t, &["train", "--resume", "r", "--steps", "3", "--threads", "1", "--from", "base", "--lora-targets", "v_proj,q_proj"]));
    // A merge must not write over the adapter it reads through the run folder's weights/latest.
    let latest = std::fs::read_link(t.join("r/weights/latest")).unwrap();
    let out = Path::new("r/weights").join(latest);
    let before = std::fs::read(t.join(&out)).unwrap();
    crate::common::process::fails(
        &toy(t, &["export", "merge", "--base", "base", "--lora", "r", "--out", out.to_str().unwrap()]),
        "export",
        "one of the inputs",
    );
    assert_eq!(std::fs::read(t.join(&out)).unwrap(), before);
}
