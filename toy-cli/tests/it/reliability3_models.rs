//! The third reliability pass over models, checkpoints and the commands that
//! load them, one test per defect class of issue 19: non-finite results,
//! a checkpoint's tokenizer and vocabulary, `llama.rope.dimension_count`, and
//! `generate --prompt` with `--prompt-ids`.

use crate::common::process::toy;
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use ggml_rs::DType;
use std::path::Path;
use std::process::Output;
use toy_stories as stories;

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Exit `code` with one line on stderr that contains `needle`, no panic, no ggml assert.
fn fails_with(o: &Output, code: i32, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("toy ") && err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(!err.contains("panicked") && !err.contains("ggml_"), "{err:?}");
    err
}

fn fails(o: &Output, needle: &str) -> String {
    fails_with(o, 2, needle)
}

/// A smoke llama (width 64, 4 heads of 16) trained 2 steps on `s.txt` with its
/// own BPE: `r/weights/step_2.gguf`.
fn base(t: &Path) -> std::path::PathBuf {
    std::fs::write(t.join("s.txt"), stories::generate_with(3, 30)).unwrap();
    let args = ["train", "--preset", "smoke", "--steps", "2", "--threads", "1", "--log-every", "1000", "--corpus", "s.txt"];
    ok(&toy(t, &[&args[..], &["--vocab-size", "300", "--out", "r"]].concat()));
    t.join("r/weights/step_2.gguf")
}

/// Copy the GGUF at `from` to `to` with the keys in `keys` set (`Some`) or
/// removed (`None`), every tensor through `tensor` (as f32; `None` drops it),
/// and the `extra` tensors appended.
fn rewrite(
    from: &Path,
    to: &Path,
    keys: &[(&str, Option<Value>)],
    tensor: impl Fn(&str, Vec<i64>, Vec<f32>) -> Option<(Vec<i64>, Vec<f32>)>,
    extra: &[(&str, Vec<f32>)],
) {
    let f = GgufFile::open(from).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "general.alignment" && !keys.iter().any(|(name, _)| name == k) {
            g.set(k, v.clone()).unwrap();
        }
    }
    for (k, v) in keys {
        if let Some(v) = v {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in f.tensors() {
        if let Some((shape, data)) = tensor(&info.name, info.shape(), f.tensor_f32(&info.name).unwrap()) {
            g.add_tensor_data(&info.name, &shape, &data).unwrap();
        }
    }
    for (name, data) in extra {
        g.add_tensor_data(name, &[data.len() as i64], data).unwrap();
    }
    g.write(to).unwrap();
}

fn keys_only(from: &Path, to: &Path, keys: &[(&str, Option<Value>)]) {
    rewrite(from, to, keys, |_, s, d| Some((s, d)), &[]);
}

/// A LoRA adapter in llama.cpp's layout on `attn_q` of both blocks of a width-64
/// base: rank 2, every value of A and B `value`, and `alpha`.
fn adapter(to: &Path, alpha: f32, value: f32) {
    let mut g = GgufWriter::new();
    g.set("general.type", "adapter").unwrap();
    g.set("general.architecture", "llama").unwrap();
    g.set("adapter.type", "lora").unwrap();
    g.set("adapter.lora.alpha", alpha).unwrap();
    for i in 0..2 {
        g.add_tensor_data(&format!("blk.{i}.attn_q.weight.lora_a"), &[64, 2], &[value; 128]).unwrap();
        g.add_tensor_data(&format!("blk.{i}.attn_q.weight.lora_b"), &[2, 64], &[value; 128]).unwrap();
    }
    g.write(to).unwrap();
}

/// The model at `from` with every matrix in f16, as llama.cpp converts models.
fn to_f16(from: &Path, to: &Path) {
    let f = GgufFile::open(from).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "general.alignment" {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in f.tensors() {
        let v = f.tensor_f32(&info.name).unwrap();
        if info.ne[1] > 1 {
            let bytes = v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
            g.add_tensor_bytes(&info.name, DType::F16, &info.shape(), bytes).unwrap();
        } else {
            g.add_tensor_data(&info.name, &info.shape(), &v).unwrap();
        }
    }
    g.write(to).unwrap();
}

pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// Class 4 (issue 19): non-finite results exited 0. `eval` with an adapter of
/// alpha 1e38 printed "loss NaN"; `generate` sampled from NaN logits; `export
/// merge` wrote inf weights (an f16 base under a large alpha, an f32 base under
/// a huge one). Each is now a failure: exit 1, one line, no file written and no
/// temporary left behind.
#[test]
fn non_finite_results_are_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = base(t);
    let ck = ck.to_str().unwrap();
    adapter(&t.join("huge.gguf"), 1e38, 1.0);
    let o = toy(t, &["eval", ck, "--lora", "huge.gguf", "--corpus", "s.txt", "--threads", "1"]);
    fails_with(&o, 1, "not finite");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("NaN"));
    let o = toy(t, &["eval", ck, "--lora", "huge.gguf", "--corpus", "s.txt", "--threads", "1", "--json"]);
    fails_with(&o, 1, "not finite");
    assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = toy(t, &["generate", ck, "--lora", "huge.gguf", "-n", "3", "--threads", "1"]);
    fails_with(&o, 1, "not finite");
    assert!(o.stdout.is_empty(), "printed before failing: {}", String::from_utf8_lossy(&o.stdout));
    fails_with(&toy(t, &["generate", ck, "--lora", "huge.gguf", "-n", "3", "--greedy", "--json"]), 1, "not finite");
    // Merges: finite in f64, but not in the base's type.
    to_f16(Path::new(ck), &t.join("b16.gguf"));
    adapter(&t.join("large.gguf"), 1e6, 1.0);
    adapter(&t.join("max.gguf"), 3e38, 2.0);
    let before = names(t);
    for (b, a) in [("b16.gguf", "large.gguf"), (ck, "max.gguf")] {
        let err = fails_with(&toy(t, &["export", "merge", "--base", b, "--lora", a, "--out", "m.gguf"]), 1, "blk.0.attn_q.weight");
        assert!(err.contains("not finite"), "{err}");
        assert_eq!(names(t), before, "a file was left behind");
    }
    // A broken input is the input's fault (exit 2), and leaves nothing either.
    adapter(&t.join("nan.gguf"), 1.0, f32::NAN);
    fails(&toy(t, &["export", "merge", "--base", ck, "--lora", "nan.gguf", "--out", "m.gguf"]), "non-finite");
    assert!(!t.join("m.gguf").exists());
    // The same merges within range work.
    adapter(&t.join("small.gguf"), 1.0, 0.01);
    ok(&toy(t, &["export", "merge", "--base", "b16.gguf", "--lora", "small.gguf", "--out", "m.gguf"]));
    ok(&toy(t, &["eval", "m.gguf", "--corpus", "s.txt", "--threads", "1", "--max-windows", "2"]));
}

/// Class 5 (issue 19): a checkpoint's tokenizer and vocabulary were not checked
/// when it was loaded. A model without tokenizer keys was evaluated on text
/// through a BPE trained on that text; a tokenizer shorter than the embedding
/// rows passed eval and finetune; bos/eos ids out of range, a contradicting
/// `llama.vocab_size` and stray tensors were accepted. All are refused at load
/// time by every command that loads a model; `describe` warns.
#[test]
fn checkpoint_tokenizer_and_vocabulary_are_checked_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = base(t);
    let v = GgufFile::open(&ck).unwrap().tensor("token_embd.weight").unwrap().ne[1];
    // No tokenizer: text is refused, ids of the model's vocabulary are evaluated.
    let f = GgufFile::open(&ck).unwrap();
    let drop: Vec<(&str, Option<Value>)> =
        f.metadata().iter().filter(|(k, _)| k.starts_with("tokenizer.")).map(|(k, _)| (k.as_str(), None)).collect();
    keys_only(&ck, &t.join("bare.gguf"), &drop);
    fails(&toy(t, &["eval", "bare.gguf", "--corpus", "s.txt"]), "no tokenizer");
    let ids: Vec<String> = (0..200).map(|i| ((i * 7) % v).to_string()).collect();
    std::fs::write(t.join("ids.txt"), ids.join(" ")).unwrap();
    ok(&toy(t, &["eval", "bare.gguf", "--corpus", "ids.txt", "--threads", "1"]));
    // Embedding rows above the tokenizer's tokens (llama.cpp requires them equal).
    let pad = |n: &str, s: Vec<i64>, mut d: Vec<f32>| {
        if n == "token_embd.weight" || n == "output.weight" {
            d.resize(d.len() + 64 * 20, 0.0);
            return Some((vec![s[0], s[1] + 20], d));
        }
        Some((s, d))
    };
    rewrite(&ck, &t.join("padded.gguf"), &[("llama.vocab_size", Some(Value::U32(v as u32 + 20)))], pad, &[]);
    let u = |x: i64| Some(Value::U32(x as u32));
    keys_only(&ck, &t.join("vocab.gguf"), &[("llama.vocab_size", u(v + 1))]);
    keys_only(&ck, &t.join("bos.gguf"), &[("tokenizer.ggml.bos_token_id", u(v + 5))]);
    keys_only(&ck, &t.join("eos.gguf"), &[("tokenizer.ggml.eos_token_id", u(v))]);
    rewrite(&ck, &t.join("stray.gguf"), &[], |_, s, d| Some((s, d)), &[("rope_freqs.weight", vec![1.0; 8])]);
    rewrite(&ck, &t.join("bias.gguf"), &[], |_, s, d| Some((s, d)), &[("blk.1.attn_q.bias", vec![0.0; 64])]);
    let nan = |n: &str, s: Vec<i64>, mut d: Vec<f32>| {
        if n == "blk.1.ffn_up.weight" {
            d[5] = f32::NAN;
        }
        Some((s, d))
    };
    rewrite(&ck, &t.join("nan.gguf"), &[], nan, &[]);
    adapter(&t.join("a.gguf"), 1.0, 0.01);
    let cases = [
        ("padded.gguf", "tokens"),
        ("vocab.gguf", "llama.vocab_size"),
        ("bos.gguf", "bos_token_id"),
        ("eos.gguf", "eos_token_id"),
        ("stray.gguf", "rope_freqs.weight"),
        ("bias.gguf", "blk.1.attn_q.bias"),
        ("nan.gguf", "blk.1.ffn_up.weight holds a non-finite value"),
    ];
    for (file, needle) in cases {
        fails(&toy(t, &["eval", file, "--corpus", "s.txt"]), needle);
        fails(&toy(t, &["generate", file, "-n", "2"]), needle);
        fails(&toy(t, &["train", "finetune", "--from", file, "--steps", "1", "--out", "x", "--threads", "1"]), needle);
        fails(&toy(t, &["export", "merge", "--base", file, "--lora", "a.gguf", "--out", "m.gguf"]), needle);
        let o = toy(t, &["describe", file]);
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("toy describe: warning: ") && err.contains(needle), "{err:?}");
    }
    assert!(!t.join("x").exists() && !t.join("m.gguf").exists());
    // The model as written is fine, and describe says nothing about it.
    let o = toy(t, &["describe", ck.to_str().unwrap()]);
    ok(&o);
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Class 6 (issue 19): `llama.rope.dimension_count` was ignored (8, 0 and 17
/// gave the same loss). As llama.cpp does for arch llama, any value other than
/// the head width is refused; so are the other keys that would change the
/// attention math toy does not implement (key/value widths, RoPE scaling),
/// and keys that are present but unreadable (no silent default).
#[test]
fn rope_dimension_count_other_than_head_width_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = base(t);
    keys_only(&ck, &t.join("full.gguf"), &[("llama.rope.dimension_count", Some(Value::U32(16)))]);
    ok(&toy(t, &["eval", "full.gguf", "--corpus", "s.txt", "--threads", "1", "--max-windows", "2"]));
    let cases: [(&str, Value, &str); 8] = [
        ("llama.rope.dimension_count", Value::U32(8), "rope.dimension_count"),
        ("llama.rope.dimension_count", Value::U32(0), "rope.dimension_count"),
        ("llama.rope.dimension_count", Value::U32(17), "rope.dimension_count"),
        ("llama.attention.key_length", Value::U32(8), "key_length"),
        ("llama.attention.value_length", Value::U32(32), "value_length"),
        ("llama.rope.scaling.factor", Value::F32(4.0), "rope.scaling"),
        // A key that is there but unreadable is not replaced by its default.
        ("llama.rope.freq_base", Value::String("1e4".into()), "llama.rope.freq_base"),
        ("llama.attention.head_count_kv", Value::Array(Array::U32(vec![4, 4])), "head_count_kv"),
    ];
    for (i, (key, value, needle)) in cases.into_iter().enumerate() {
        let file = format!("rope{i}.gguf");
        keys_only(&ck, &t.join(&file), &[(key, Some(value))]);
        fails(&toy(t, &["eval", &file, "--corpus", "s.txt"]), needle);
        fails(&toy(t, &["generate", &file, "-n", "2"]), needle);
        fails(&toy(t, &["train", "finetune", "--from", &file, "--steps", "1", "--out", "x"]), needle);
    }
    assert!(!t.join("x").exists());
}

/// Issue 19, the smaller one: `generate --prompt X --prompt-ids Y` silently
/// dropped the prompt. The two are exclusive.
#[test]
fn generate_prompt_and_prompt_ids_are_exclusive() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let o = toy(t, &["generate", "nothing.gguf", "--prompt", "Once", "--prompt-ids", "1 2"]);
    let err = fails(&o, "--prompt-ids");
    assert!(err.contains("--prompt "), "{err}");
}
