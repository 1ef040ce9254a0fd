//! The ninth reliability pass (fresh users' trials, stop 50).

use crate::chat::{chat_model, finetune, persona, CHATML};
use crate::common::process::{ok, toy};
use ggml_rs::gguf::{GgufFile, GgufWriter, Value};

/// A copy of `b` at `to` with the metadata `keys` set (added or replaced).
fn with_keys(b: &GgufFile, to: &std::path::Path, keys: &[(&str, Value)]) {
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata().iter().filter(|(k, _)| k != "general.alignment") {
        g.set(k, v.clone()).unwrap();
    }
    for (k, v) in keys {
        g.set(k, v.clone()).unwrap();
    }
    for info in b.tensors() {
        g.add_tensor_data(&info.name, &info.shape(), &b.tensor_f32(&info.name).unwrap()).unwrap();
    }
    g.write(to).unwrap();
}

/// One conversation far longer than the rest does not size the default
/// window of finetune or eval (it was: windows of the cap, mostly padding);
/// it is cut to the window, and the note says so.
#[test]
fn an_outlier_conversation_does_not_size_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let long = serde_json::json!({"messages": [
        {"role": "user", "content": "Tell me a story.".repeat(200)},
        {"role": "assistant", "content": "Once upon a time."}
    ]});
    std::fs::write(t.join("chats.jsonl"), format!("{}{long}\n", persona(40))).unwrap();
    let o = finetune(t, "chat.gguf", "chats.jsonl", "ft", &["--steps", "1"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    // (its answer lies past the model's 256 tokens: left out at any window, it sizes none)
    assert!(
        err.contains(
            "note: context 128: the longest conversation is 67 tokens, not counting 1 left out (no trained token within 256 tokens)"
        ),
        "{err}"
    );
    let args = ["eval", "chat.gguf", "--corpus", "chats.jsonl", "--json", "--threads", "1"];
    let o = toy(t, &args);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // eval scores each conversation in a window of about its length: the long
    // one alone in the model's 256 (cut, and left out: no answer in it), the
    // others in windows of the longest of theirs.
    assert_eq!(v["context"].as_u64(), Some(66), "{v}");
    assert_eq!((v["chat"]["truncated"].as_u64(), v["chat"]["dropped"].as_u64()), (Some(1), Some(1)), "{v}");
    let o = toy(t, &["eval", "chat.gguf", "--corpus", "chats.jsonl", "--threads", "1"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("scored in 40 conversations (windows of up to 66)"));
}

/// A `toy new` project leaves the preset to the default (commented out), so
/// that finetune in it takes the model's context, not the tiny preset's 64
/// (toy.toml's preset gives a finetune run its batch and context).
#[test]
fn a_new_projects_finetune_takes_the_models_context() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let base = ["train", "--preset", "smoke", "--context", "128", "--steps", "1", "--threads", "1", "--out", "base"];
    ok(&toy(t, &base));
    ok(&toy(t, &["new", "p"]));
    let p = t.join("p");
    let text = std::fs::read_to_string(p.join("toy.toml")).unwrap();
    assert!(text.contains("\n# preset = \"tiny\"  (the default"), "{text}");
    ok(&toy(&p, &["train", "finetune", "--from", "../base", "--steps", "1", "--threads", "1", "--out", "ft"]));
    let cfg = std::fs::read_to_string(p.join("ft/config.toml")).unwrap();
    assert!(cfg.contains("context = 128"), "{cfg}");
    // From scratch the project trains the tiny preset, as before.
    ok(&toy(&p, &["train", "--steps", "1", "--out", "scratch"]));
    let cfg = std::fs::read_to_string(p.join("scratch/config.toml")).unwrap();
    assert!(cfg.contains("preset = \"tiny\"") && cfg.contains("context = 64"), "{cfg}");
}

/// A GGUF with `tokenizer.ggml.add_bos_token = true` (Llama 3's files) gets
/// its BOS before the prompt, as llama.cpp's tokenizer adds it; not twice,
/// and not before `--prompt-ids`; the text shown starts with the prompt; a
/// fine-tune keeps the key; documents read with its tokenizer start with it.
#[test]
fn generate_adds_the_bos_a_model_asks_for() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "base"]));
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    let bos = b.get_u64("tokenizer.ggml.bos_token_id").unwrap();
    with_keys(&b, &t.join("bos.gguf"), &[("tokenizer.ggml.add_bos_token", Value::Bool(true)), ("general.license", "apache-2.0".into())]);
    let ids = |model: &str, prompt: &[&str]| {
        let args = [&["generate", model, "-n", "1", "--greedy", "--json", "--threads", "1"][..], prompt].concat();
        let o = toy(t, &args);
        ok(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let ids: Vec<u64> = v["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        (ids, v["text"].as_str().unwrap().to_string())
    };
    let (plain, text) = ids("base/weights/latest", &["--prompt", "Once"]);
    let (with, text_with) = ids("bos.gguf", &["--prompt", "Once"]);
    assert_eq!(with[0], bos);
    assert_eq!(&with[1..plain.len()], &plain[..plain.len() - 1], "{with:?} vs {plain:?}");
    assert!(text.starts_with("Once") && text_with.starts_with("Once"), "{text:?} / {text_with:?}");
    let (given, _) = ids("bos.gguf", &["--prompt-ids", "5"]);
    assert_eq!(given[0], 5);
    // A fine-tune keeps the base's add_bos_token and licence (it wrote false, and none).
    ok(&toy(t, &["train", "finetune", "--from", "bos.gguf", "--steps", "1", "--threads", "1", "--out", "ft"]));
    let f = GgufFile::open(t.join("ft/weights/latest")).unwrap();
    assert_eq!(f.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool), Some(true));
    assert_eq!(f.get_str("general.license").unwrap(), "apache-2.0");
    assert_eq!(ids("ft", &["--prompt", "Once"]).0[0], bos);
    // Text read with such a model's tokenizer starts each document with it (one id more a document).
    std::fs::write(t.join("docs.txt"), "One cat.\n<|endoftext|>\nTwo dogs.\n<|endoftext|>\nThree birds.\n").unwrap();
    let tokens = |model: &str| {
        let o = toy(t, &["eval", model, "--corpus", "docs.txt", "--context", "1", "--json", "--threads", "1"]);
        ok(&o);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].as_u64().unwrap()
    };
    assert_eq!(tokens("bos.gguf"), tokens("base/weights/latest") + 3);
}

/// `export merge`: over a q8_0 base the default is `same` with no note (q8_0
/// keeps an update; it said both "keeps" and "can lose"); a coarse `--type`
/// writes a tied token_embd (the output head) in q6_k, as llama-quantize does.
#[test]
fn merge_defaults_and_the_tied_head_type() {
    use ggml_rs::{gguf::GgufFile, DType};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let base = ["train", "--preset", "smoke", "--d-model", "256", "--tied", "--steps", "1", "--threads", "1", "--out", "base"];
    ok(&toy(t, &base));
    let ft = ["train", "finetune", "--lora-rank", "2", "--steps", "1", "--threads", "1"];
    ok(&toy(t, &[&ft[..], &["--from", "base", "--out", "lo"]].concat()));
    let merge = |base: &str, extra: &[&str], out: &str| {
        let o = toy(t, &[&["export", "merge", "--base", base, "--lora", "lo", "--out", out][..], extra].concat());
        ok(&o);
        let f = GgufFile::open(t.join(out)).unwrap();
        let ty = |n: &str| f.tensor(n).unwrap().dtype;
        (ty("blk.0.attn_q.weight"), ty("token_embd.weight"), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (q, emb, _) = merge("base", &["--type", "q4_0"], "m4.gguf");
    assert_eq!((q, emb), (DType::Q4_0, DType::Q6K));
    let (q, emb, err) = merge("base", &["--type", "q8_0"], "q8.gguf");
    assert_eq!((q, emb), (DType::Q8_0, DType::Q8_0), "{err}");
    let (q, _, err) = merge("q8.gguf", &[], "m8.gguf");
    assert_eq!(q, DType::Q8_0);
    assert!(!err.contains("wrote q8_0"), "{err}");
}

/// Notes a run owed its user: a BPE smaller than asked (built-in corpus, and
/// raw text at the default size), a corpus that holds nothing out, a `.txt`
/// read as token ids, a default warm-up as long as the run, and prep's sample
/// (not the text) being what had too few pairs.
#[test]
fn notes_on_vocabularies_splits_ids_and_warmup() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let err = |o: &std::process::Output| {
        ok(o);
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let quick = ["--preset", "smoke", "--steps", "2", "--threads", "1"];
    let e = err(&toy(t, &[&["train", "--vocab-size", "5000", "--out", "a"][..], &quick].concat()));
    assert!(e.contains("note: the BPE trained on the built-in corpus has") && e.contains("fewer than the 5000 of --vocab-size"), "{e}");
    assert!(!e.contains("warm-up"), "{e}");
    let e = err(&toy(t, &["train", "--preset", "smoke", "--steps", "10", "--threads", "1", "--out", "a10"]));
    assert!(e.contains("note: the default warm-up (20 steps) covers the whole run of 10"), "{e}");
    std::fs::write(t.join("mat.txt"), "the cat sat on the mat. ".repeat(20)).unwrap();
    let e = err(&toy(t, &[&["train", "--corpus", "mat.txt", "--out", "b"][..], &quick].concat()));
    std::fs::write(t.join("s.txt"), toy_stories::generate_with(3, 40)).unwrap();
    assert!(e.contains("fewer than the 1024 of the default"), "{e}");
    ok(&toy(t, &["prep", "s.txt", "--vocab-size", "300", "--val-fraction", "0", "--out", "p0"]));
    let e = err(&toy(t, &[&["train", "--corpus", "p0", "--warmup-steps", "1", "--out", "c"][..], &quick].concat()));
    assert!(e.contains("note: the corpus holds nothing out"), "{e}");
    assert!(!e.contains("warm-up"), "{e}");
    std::fs::write(t.join("ids.txt"), "1 2 3 4 5 6 7 8\n".repeat(40)).unwrap();
    let e = err(&toy(t, &[&["train", "--corpus", "ids.txt", "--out", "d"][..], &quick].concat()));
    assert!(e.contains("note: ids.txt: read as toy's token ids"), "{e}");
    let e = err(&toy(t, &["prep", "s.txt", "--vocab-size", "4000", "--bpe-sample", "0.001", "--out", "p1"]));
    assert!(e.contains("its sample of") && !e.contains("the text ("), "{e}");
}

/// A refusal is one line: the notes said while the command checked its inputs
/// (here the BPE's "fewer ids" note on a text too short for one window) are
/// held until the work starts, and dropped when it never does.
#[test]
fn a_refusal_after_a_note_is_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("tiny.txt"), "hello world\n").unwrap();
    let o = toy(t, &["train", "--corpus", "tiny.txt", "--out", "r", "--steps", "1", "--threads", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("toy train: the training split of tiny.txt has 12 tokens"), "{err}");
    assert!(!t.join("r").exists());
}

/// `--resume` in a project says that toy.toml is not read (its keys changed
/// nothing, silently); `toy new --force` names the folder, not prep's --out.
#[test]
fn resume_in_a_project_and_new_force_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["new", "p"]));
    let p = t.join("p");
    ok(&toy(&p, &["train", "--preset", "smoke", "--steps", "1", "--out", "r"]));
    let o = toy(&p, &["train", "--resume", "r", "--steps", "2"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("this folder's toy.toml is not read"));
    std::fs::remove_dir_all(p.join("data/default")).unwrap();
    std::fs::write(p.join("data/default"), "a file").unwrap();
    let o = toy(t, &["new", "p", "--force"]);
    crate::common::process::fails(&o, "new", "data/default exists and is not a folder");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("--out"));
}

/// Half a prompt-completion pair is named as such by `debug chat-masks` (it
/// said the file held no chat records).
#[test]
fn half_a_prompt_completion_pair_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("half.jsonl"), "{\"prompt\": \"p\"}\n").unwrap();
    let o = toy(t, &["debug", "chat-masks", "chat.gguf", "--corpus", "half.jsonl"]);
    crate::common::process::fails(&o, "debug", "half.jsonl:1: a prompt-completion record needs both \"prompt\" and \"completion\"");
}

/// A chat model whose GGUF asks for a BOS trains and evaluates its
/// conversations after it, as `generate --chat` prompts it (training had
/// none where the template writes none).
#[test]
fn chat_examples_start_with_the_bos_a_model_asks_for() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let b = GgufFile::open(t.join("chat.gguf")).unwrap();
    with_keys(&b, &t.join("bos.gguf"), &[("tokenizer.ggml.add_bos_token", Value::Bool(true))]);
    std::fs::write(t.join("chats.jsonl"), persona(3)).unwrap();
    let shown = |model: &str| {
        let o = toy(t, &["debug", "chat-masks", model, "--corpus", "chats.jsonl", "-n", "1"]);
        ok(&o);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let (plain, with) = (shown("chat.gguf"), shown("bos.gguf"));
    assert!(plain.contains("<|im_start|>") && !plain.contains("<|endoftext|><|im_start|>"), "{plain}");
    assert!(with.contains("<|endoftext|><|im_start|>"), "{with}");
}
