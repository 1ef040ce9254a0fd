//! Chat data for `toy train finetune`: conversations rendered with the
//! model's chat template, only the assistant's tokens (and its end of turn)
//! trained, prompt-completion pairs, packing, truncation, the masked loss,
//! bad records refused with their `file:line`, and a finetune end to end.

use crate::common::process::{fails, ok, toy};
use crate::common::tiny;
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use ggml_rs::{Backend, Context};
use std::path::Path;
use toy::data::chat::{ChatTemplate, Message};
use toy::data::chat_examples::{Encoder, Example};
use toy::data::chat_records::Record;
use toy::data::tokenizer::{byte_to_unicode, PreSplit, Tokenizer};
use toy::model::{init::init_weights, Arch, Weights};
use toy::train::chat_windows::{Fit, Windows};
use toy::train::step::{capacity, Consts, EvalStep};
use toy_stories as stories;

/// ChatML without a default system turn.
pub(crate) const CHATML: &str = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// SmolLM2-Instruct's template (a default system turn when there is none).
const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// One token per byte, and `<|endoftext|>` (256), `<|im_start|>` (257), `<|im_end|>` (258) as control tokens.
fn chatml_tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_unicode(b).to_string()).collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    // llama.cpp's token types: the 256 bytes normal (1), the three specials control (3).
    let types: Vec<i32> = (0..tokens.len()).map(|i| if i < 256 { 1 } else { 3 }).collect();
    Tokenizer::from_tokens(&tokens, &[], &types, PreSplit::Gpt2, "test").unwrap()
}

const IM_END: u32 = 258;

fn chat(messages: &[(&str, &str)]) -> Record {
    Record::Chat { messages: messages.iter().map(|(r, c)| Message::new(r, c)).collect(), first_trained: 0 }
}

/// The positions `answer` takes when it follows the text `before`.
fn span(tok: &Tokenizer, before: &str, answer: &str) -> std::ops::Range<usize> {
    let s = tok.encode(before).unwrap().len();
    s..s + tok.encode(answer).unwrap().len()
}

#[test]
fn exactly_the_assistant_tokens_and_their_end_of_turn_are_trained() {
    let tok = chatml_tokenizer();
    let t = ChatTemplate::new(CHATML, "", "<|im_end|>", "m.gguf").unwrap();
    let enc = Encoder { tok: &tok, template: Some(&t), eog: vec![256, IM_END], eos: Some(IM_END) };
    let turns = [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye"), ("assistant", "Ciao.")];
    let ex = enc.encode(&chat(&turns)).unwrap();
    let msgs: Vec<Message> = turns.iter().map(|(r, c)| Message::new(r, c)).collect();
    assert_eq!(ex.ids, tok.encode(&t.render(&msgs, false).unwrap()).unwrap(), "the ids of the whole rendering");
    let p1 = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    let p2 = format!("{p1}Hello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    let (s1, s2) = (span(&tok, p1, "Hello.<|im_end|>"), span(&tok, &p2, "Ciao.<|im_end|>"));
    let want: Vec<bool> = (0..ex.ids.len()).map(|i| s1.contains(&i) || s2.contains(&i)).collect();
    assert_eq!(ex.trained, want);
    assert_eq!(ex.ids[s1.end - 1], IM_END, "the end of turn is trained");
    assert_eq!((ex.ids[s1.end], ex.trained[s1.end]), (u32::from(b'\n'), false), "the newline after it is not");
    assert_eq!(tok.decode(&ex.trained_ids()).unwrap(), "Hello.<|im_end|>Ciao.<|im_end|>");
}

#[test]
fn prompt_completion_pairs_train_the_completion_only() {
    let tok = chatml_tokenizer();
    let t = ChatTemplate::new(SMOLLM2, "", "<|im_end|>", "m.gguf").unwrap();
    let pair = Record::Pair { prompt: "What is 2+2?".into(), completion: "4".into() };
    // Under the template: a user turn (after the default system turn) and an assistant turn.
    let enc = Encoder { tok: &tok, template: Some(&t), eog: vec![256, IM_END], eos: Some(IM_END) };
    let ex = enc.encode(&pair).unwrap();
    let text = tok.decode(&ex.ids).unwrap();
    assert!(text.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), "{text}");
    assert!(text.ends_with("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"), "{text}");
    assert_eq!(tok.decode(&ex.trained_ids()).unwrap(), "4<|im_end|>");
    // Without a template: plain text, the completion and the EOS trained.
    let plain = Encoder { tok: &tok, template: None, eog: vec![IM_END], eos: Some(256) };
    let ex = plain.encode(&pair).unwrap();
    let n = "What is 2+2?".len();
    assert_eq!(ex.ids, [tok.encode("What is 2+2?4").unwrap(), vec![256]].concat());
    assert_eq!(ex.trained, [vec![false; n], vec![true; 2]].concat());
    // A conversational pair: the prompt's assistant turn is context, the completion's is trained.
    let lists = Record::Chat {
        messages: vec![
            Message::new("user", "a"),
            Message::new("assistant", "b"),
            Message::new("user", "c"),
            Message::new("assistant", "d"),
        ],
        first_trained: 3,
    };
    assert_eq!(tok.decode(&enc.encode(&lists).unwrap().trained_ids()).unwrap(), "d<|im_end|>");
}

#[test]
fn a_template_that_does_not_render_turn_by_turn_is_refused() {
    let tok = chatml_tokenizer();
    let odd = "{% for m in messages %}{% if loop.last %}<last>{% endif %}{{ m.content }}{% endfor %}";
    let t = ChatTemplate::new(odd, "", "", "odd.gguf").unwrap();
    let enc = Encoder { tok: &tok, template: Some(&t), eog: vec![IM_END], eos: None };
    let e = enc.encode(&chat(&[("user", "Hi"), ("assistant", "Yo")])).unwrap_err().to_string();
    assert!(e.contains("turn by turn"), "{e}");
    // a template that leaves assistant turns out says so (it read as "turn by turn": a helper's finding)
    let users = "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}";
    let t = ChatTemplate::new(users, "", "", "users.gguf").unwrap();
    let enc = Encoder { tok: &tok, template: Some(&t), eog: vec![IM_END], eos: None };
    let e = enc.encode(&chat(&[("user", "Hi"), ("assistant", "Yo")])).unwrap_err().to_string();
    assert!(e.contains("does not render assistant message 1: its text is not in the rendered conversation"), "{e}");
}

/// An assistant message that opens a conversation is context: SmolLM2's
/// template adds its default system turn only once there is a message, so
/// that turn has no prompt; the later assistant turn is trained as usual.
#[test]
fn an_opening_assistant_message_is_context() {
    let tok = chatml_tokenizer();
    let t = ChatTemplate::new(SMOLLM2, "", "<|im_end|>", "m.gguf").unwrap();
    let enc = Encoder { tok: &tok, template: Some(&t), eog: vec![256, IM_END], eos: Some(IM_END) };
    let ex = enc.encode(&chat(&[("assistant", "Hi there"), ("user", "Hi"), ("assistant", "Hello.")])).unwrap();
    assert_eq!(tok.decode(&ex.trained_ids()).unwrap(), "Hello.<|im_end|>");
    let one = r#"{"messages": [{"role": "assistant", "content": "Hi there"}]}"#;
    let e = toy::data::chat_records::parse(&serde_json::from_str(one).unwrap()).unwrap_err();
    assert!(e.contains("no assistant turn"), "{e}");
}

fn ex(ids: &[u32], trained: &[u8]) -> Example {
    Example { ids: ids.to_vec(), trained: trained.iter().map(|&b| b == 1).collect() }
}

#[test]
fn packed_windows_hold_whole_conversations_separated_by_eos() {
    let (eos, t) = (99, 9); // windows of 10 tokens
    let a = ex(&[1, 2, 3], &[0, 0, 1]);
    let b = ex(&[4, 5, 6, 7], &[0, 0, 1, 1]);
    let c = ex(&[8, 9, 10, 11, 12], &[0, 1, 1, 0, 1]);
    let (w, fit) = Windows::build(&[a.clone(), b.clone(), c.clone()], t, true, Some(eos));
    assert_eq!(fit, Fit { conversations: 3, truncated: 0, dropped: 0, windows: 2, trained_tokens: 6, filled: 12 });
    // Best fit, longest first: c, then b beside it (5 + 1 + 4 = 10; 9 inputs filled); a in a window of its own (3).
    let bt = w.batch(&[0, 1]);
    assert_eq!(bt.tokens[..9], [8, 9, 10, 11, 12, 99, 4, 5, 6]);
    assert_eq!(bt.targets[..9], [9, 10, -1, 12, -1, -1, -1, 6, 7], "the EOS between them and prompt tokens count nothing");
    assert_eq!(bt.tokens[9..], [1, 2, 3, 99, 99, 99, 99, 99, 99], "padded with the EOS");
    assert_eq!(bt.targets[9..], [-1, 3, -1, -1, -1, -1, -1, -1, -1]);
    // Unpacked: one window each; a conversation longer than the window is cut
    // (and counted), one with no trained token left in it is left out.
    let long = ex(&(20..32).collect::<Vec<_>>(), &[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    let late = ex(&(40..52).collect::<Vec<_>>(), &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let (w, fit) = Windows::build(&[a, b, c, long, late], t, false, Some(eos));
    assert_eq!((fit.truncated, fit.dropped, fit.windows, w.len()), (2, 1, 4, 4));
    assert_eq!(w.batch(&[3]).tokens, (20..29).collect::<Vec<i32>>());
    assert_eq!(w.batch(&[3]).targets, (21..30).collect::<Vec<i32>>(), "the first T + 1 tokens");
}

/// The step's loss with targets of −1 is the mean over the counted positions
/// only, computed here from the logits by hand.
#[test]
fn the_loss_ignores_masked_targets() {
    let (t, b) = (8, 2);
    let cfg = tiny(Arch::Llama);
    let be = Backend::cpu().unwrap();
    be.set_n_threads(1);
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let w = Weights::new(&wctx, &cfg).unwrap();
    let consts = Consts::new(&wctx, t, b).unwrap();
    wctx.allocate(&be).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 3).unwrap();
    for p in w.params().iter().filter(|p| !p.tensor.name().contains("norm")) {
        let v: Vec<f32> = p.tensor.read::<f32>().unwrap().iter().map(|x| x * 20.0).collect();
        p.tensor.write(&v).unwrap();
    }
    let tokens: Vec<i32> = (0..(t * b) as i32).map(|i| (i * 7 + 3) % cfg.vocab as i32).collect();
    let mut targets: Vec<i32> = tokens.iter().map(|x| (x * 5 + 1) % cfg.vocab as i32).collect();
    for i in [0, 1, 2, 5, 9, 10, 15] {
        targets[i] = -1;
    }
    let cctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let mut ev = EvalStep::new(&cctx, &w, &consts, t, b, &[be]).unwrap();
    let loss = ev.loss(&tokens, &targets).unwrap() as f64;
    let logits = ev.logits().read::<f32>().unwrap();
    let v = cfg.vocab;
    let (mut sum, mut n) = (0f64, 0);
    for (i, &y) in targets.iter().enumerate().filter(|(_, &y)| y >= 0) {
        let row: Vec<f64> = logits[i * v..(i + 1) * v].iter().map(|&x| x as f64).collect();
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        sum += mx + row.iter().map(|x| (x - mx).exp()).sum::<f64>().ln() - row[y as usize];
        n += 1;
    }
    let want = sum / n as f64;
    assert_eq!(n, 9);
    assert!((loss - want).abs() / want < 1e-5, "loss {loss}, mean over the 9 counted targets {want}");
    let all_masked = ev.loss(&tokens, &vec![-1; t * b]).unwrap();
    assert_eq!(all_masked, 0.0, "nothing counted: 0, not NaN");
}

/// A smoke llama (context 256) trained on stories with its own BPE, then
/// given `<|im_start|>` and `<|im_end|>` (control tokens, new rows in the
/// token table and head), `<|im_end|>` as EOS, and `template` as its chat
/// template (none when `None`): `name` in `dir`.
pub(crate) fn chat_model(dir: &Path, template: Option<&str>, name: &str) {
    if !dir.join("base").exists() {
        std::fs::write(dir.join("old.txt"), stories::generate_with(11, 60)).unwrap();
        let args = ["train", "--corpus", "old.txt", "--vocab-size", "300", "--steps", "20", "--out", "base", "--context", "256"];
        ok(&toy(dir, &[&args[..], &["--preset", "smoke", "--threads", "1", "--log-every", "1000"]].concat()));
    }
    let b = GgufFile::open(dir.join("base/weights/latest")).unwrap();
    let vocab = b.get_u64("llama.vocab_size").unwrap() as usize;
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata() {
        let v = match (k.as_str(), v) {
            ("general.alignment", _) => continue,
            ("llama.vocab_size", _) => Value::U32(vocab as u32 + 2),
            ("tokenizer.ggml.eos_token_id", _) => Value::U32(vocab as u32 + 1),
            ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                Value::Array(Array::String([t.clone(), vec!["<|im_start|>".into(), "<|im_end|>".into()]].concat()))
            }
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => Value::Array(Array::I32([t.clone(), vec![3, 3]].concat())),
            _ => v.clone(),
        };
        g.set(k, v).unwrap();
    }
    if let Some(t) = template {
        g.set("tokenizer.chat_template", t).unwrap();
    }
    for info in b.tensors() {
        let mut data = b.tensor_f32(&info.name).unwrap();
        let mut ne = info.shape();
        if ne.len() == 2 && ne[1] as usize == vocab {
            // Two new rows: scaled copies of the first.
            let d = ne[0] as usize;
            let row = data[..d].to_vec();
            data.extend(row.iter().map(|x| x * 0.9));
            data.extend(row.iter().map(|x| x * 1.1));
            ne[1] += 2;
        }
        g.add_tensor_data(&info.name, &ne, &data).unwrap();
    }
    g.write(dir.join(name)).unwrap();
}

const QUICK: &[&str] = &["--threads", "1", "--log-every", "1000"];

pub(crate) fn finetune(dir: &Path, model: &str, corpus: &str, out: &str, extra: &[&str]) -> std::process::Output {
    let args = ["train", "finetune", "--from", model, "--corpus", corpus, "--out", out];
    toy(dir, &[&args[..], QUICK, extra].concat())
}

/// `n` conversations with one answer format (a fixed persona), some with a system turn.
pub(crate) fn persona(n: usize) -> String {
    let nouns = ["cat", "dog", "bird", "fish", "tree", "boat", "hat", "cup"];
    let mut out = String::new();
    for i in 0..n {
        let noun = nouns[i % nouns.len()];
        let mut m = vec![serde_json::json!({"role": "user", "content": format!("What colour is the {noun}?")})];
        if i % 3 == 0 {
            m.insert(0, serde_json::json!({"role": "system", "content": "You are Toy."}));
        }
        m.push(serde_json::json!({"role": "assistant", "content": format!("The {noun} is blue.")}));
        out += &format!("{}\n", serde_json::json!({ "messages": m }));
    }
    out
}

pub(crate) fn events(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("events.jsonl")).unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn losses(run: &Path, kind: &str, key: &str) -> Vec<(u64, f64)> {
    let mut v: Vec<(u64, f64)> =
        events(run).iter().filter(|e| e["kind"] == kind).map(|e| (e["step"].as_u64().unwrap(), e[key].as_f64().unwrap())).collect();
    v.sort_by_key(|p| p.0);
    v.dedup_by_key(|p| p.0);
    v
}

#[test]
fn a_chat_finetune_learns_the_answers_and_keeps_the_template() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    // Two conversations longer than the window: one keeps trained tokens, one loses them all.
    let long_answer =
        serde_json::json!({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "blue ".repeat(60)}]});
    let long_prompt =
        serde_json::json!({"messages": [{"role": "user", "content": "why ".repeat(80)}, {"role": "assistant", "content": "No."}]});
    std::fs::write(t.join("chats.jsonl"), format!("{}{long_answer}\n{long_prompt}\n", persona(60))).unwrap();
    let o = finetune(
        t,
        "chat.gguf",
        "chats.jsonl",
        "ft",
        &["--steps", "40", "--batch", "4", "--context", "128", "--lr", "0.003", "--eval-every", "40"],
    );
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("note: 2 of 62 conversations truncated to 129 tokens") && err.contains("1 of them had no trained token left"),
        "{err}"
    );
    // The split, the trained tokens and the padding are said as the run starts.
    let summary =
        err.lines().find(|l| l.starts_with("chat data: 62 conversations (messages records): ")).unwrap_or_else(|| panic!("{err}"));
    assert!(summary.contains("for training, 3 held out for validation;") && summary.contains("--pack puts several"), "{summary}");
    let start = &events(&t.join("ft"))[0];
    let c = &start["chat"];
    // The training windows' trained tokens, not the held-out ones too.
    assert!(summary.contains(&format!("; {} trained tokens in the training windows,", c["trained_tokens"])), "{summary} {c}");
    assert_eq!(
        (c["records"].as_str(), c["truncated"].as_u64(), c["dropped"].as_u64(), c["pack"].as_bool()),
        (Some("messages"), Some(2), Some(1), Some(false))
    );
    assert_eq!(c["train_windows"].as_u64().unwrap() + c["val_windows"].as_u64().unwrap(), 61, "one window per kept conversation");
    let val = losses(&t.join("ft"), "eval", "val_loss");
    assert!(val.len() == 2 && val[1].1 < val[0].1 * 0.7, "the assistant-only validation loss did not fall: {val:?}");
    // The finetuned model keeps its base's template and EOS: it chats, and stops at <|im_end|>.
    let f = GgufFile::open(t.join("ft/weights/latest")).unwrap();
    assert_eq!(f.get_str("tokenizer.chat_template").unwrap(), CHATML);
    assert_eq!(f.get_u64("tokenizer.ggml.eos_token_id").unwrap(), 301);
    let o = toy(t, &["generate", "ft", "--chat", "What colour is the cat?", "-n", "12", "--threads", "1", "--json"]);
    ok(&o);
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Its text is the reply alone, as printed: no rendered prompt, no end of turn;
    // the ids hold the prompt too (n_prompt of them).
    let text = g["text"].as_str().unwrap();
    assert!(!text.contains("<|im_start|>") && !text.contains("<|im_end|>") && !text.is_empty(), "{g}");
    let (n, ids) = (g["n_prompt"].as_u64().unwrap() as usize, g["ids"].as_array().unwrap());
    assert!(n > 8 && ids.len() > n, "{g}");
    // The --json summary says what happened to the conversations.
    let o = finetune(t, "chat.gguf", "chats.jsonl", "ft2", &["--steps", "1", "--context", "128", "--json"]);
    ok(&o);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["chat"]["truncated"].as_u64(), s["chat"]["dropped"].as_u64()), (Some(2), Some(1)), "{s}");
    // The same object as run_start's: the training windows' trained tokens apart from the held-out ones.
    assert_eq!(s["chat"], events(&t.join("ft2"))[0]["chat"], "{s}");
    // Without --context, short conversations get a window that fits the longest one
    // (rounded up to 64), not the model's 256 of padding each; --pack keeps the model's.
    std::fs::write(t.join("short.jsonl"), persona(12)).unwrap();
    let o = finetune(t, "chat.gguf", "short.jsonl", "ft3", &["--steps", "1"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: context 128: the longest conversation is 65 tokens"), "{err}");
    assert_eq!(events(&t.join("ft3"))[0]["config"]["context"].as_u64(), Some(128));
    ok(&finetune(t, "chat.gguf", "short.jsonl", "ft4", &["--steps", "1", "--pack"]));
    assert_eq!(events(&t.join("ft4"))[0]["config"]["context"].as_u64(), Some(256));
}

#[test]
fn a_resumed_packed_chat_run_gives_the_same_curve() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("chats.jsonl"), persona(40)).unwrap();
    let args =
        ["--pack", "--batch", "2", "--context", "256", "--lr", "0.002", "--min-lr", "0.002", "--warmup-steps", "0", "--eval-every", "3"];
    ok(&finetune(t, "chat.gguf", "chats.jsonl", "a", &[&args[..], &["--steps", "8"]].concat()));
    ok(&finetune(t, "chat.gguf", "chats.jsonl", "b", &[&args[..], &["--steps", "4"]].concat()));
    ok(&toy(t, &["train", "--resume", "b", "--steps", "8", "--threads", "1"]));
    assert_eq!(losses(&t.join("a"), "step", "loss"), losses(&t.join("b"), "step", "loss"));
    let val_b = losses(&t.join("b"), "eval", "val_loss");
    let val_a = losses(&t.join("a"), "eval", "val_loss");
    assert!(val_a.len() == 4 && val_a.iter().all(|v| val_b.contains(v)), "{val_a:?} vs {val_b:?}");
    let c = &events(&t.join("a"))[0]["chat"];
    assert!(c["pack"] == true && c["train_windows"].as_u64().unwrap() < 20, "packed: fewer windows than conversations: {c}");
    let o = toy(t, &["train", "--resume", "b", "--steps", "9", "--data-format", "text"]);
    fails(&o, "train", "--data-format text (the run has auto)");
}

#[test]
fn bad_chat_data_is_refused_with_its_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    chat_model(t, None, "plain.gguf");
    chat_model(t, Some("{% for %}"), "broken.gguf");
    let no_system = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}";
    chat_model(t, Some(no_system), "nosys.gguf");
    let good = r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}"#;
    let files = [
        ("notjson.jsonl", format!("{good}\nnot json\n")),
        ("role.jsonl", r#"{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}"#.to_string()),
        ("content.jsonl", format!("{good}\n{}\n", r#"{"messages": [{"role": "user", "content": ["a"]}, {"role": "assistant", "content": "y"}]}"#)),
        ("noassistant.jsonl", r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}"#.to_string()),
        ("mixed.jsonl", format!("{good}\n{}\n", r#"{"prompt": "q", "completion": "a"}"#)),
        ("system.jsonl", r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}"#.to_string()),
        ("good.jsonl", format!("{good}\n{good}\n")),
        ("text.jsonl", "{\"text\": \"Once upon a time.\"}\n".to_string()),
        ("textfirst.jsonl", format!("{{\"text\": \"Once upon a time.\"}}\n{good}\n")),
        ("pairs.jsonl", "{\"prompt\": \"Say hi.\", \"completion\": \" Hi!\"}\n".repeat(4)),
        ("prompt-only.jsonl", "{\"prompt\": \"Say hi.\"}\n".to_string()),
        ("long.jsonl", format!("{{\"prompt\": \"{}\", \"completion\": \"Yes.\"}}\n", "the big dog ran home. ".repeat(120))),
        ("mid.jsonl", format!("{{\"prompt\": \"{}\", \"completion\": \"Yes.\"}}\n", "the big dog ran home. ".repeat(12))),
    ];
    for (name, text) in &files {
        std::fs::write(t.join(name), text).unwrap();
    }
    let cases: [(&str, &str, &[&str], &str); 16] = [
        ("chat.gguf", "notjson.jsonl", &[], "notjson.jsonl:2: not a JSON object"),
        ("chat.gguf", "role.jsonl", &[], "role.jsonl:1: messages[0] has role \"tool\""),
        ("chat.gguf", "content.jsonl", &[], "content.jsonl:2: messages[0]'s content is not a string"),
        ("chat.gguf", "noassistant.jsonl", &[], "noassistant.jsonl:1: the conversation has no assistant turn"),
        ("chat.gguf", "mixed.jsonl", &[], "mixed.jsonl:2: no \"messages\" field; the file's first record is a conversation"),
        ("nosys.gguf", "system.jsonl", &[], "system.jsonl:1: "),
        ("broken.gguf", "good.jsonl", &[], "broken.gguf: chat template"),
        ("plain.gguf", "good.jsonl", &[], "good.jsonl:1: a conversation, but the model plain.gguf has no chat template"),
        ("chat.gguf", "text.jsonl", &["--data-format", "chat"], "text.jsonl:1: a text record, not a chat record"),
        // a file's first record gives its kind: text, then a conversation
        ("chat.gguf", "textfirst.jsonl", &[], "textfirst.jsonl:2: a chat record in a file whose first record (line 1) is text"),
        ("chat.gguf", "textfirst.jsonl", &["--data-format", "chat"], "textfirst.jsonl:1: a text record, not a chat record"),
        ("chat.gguf", "text.jsonl", &["--pack"], "--pack"),
        ("chat.gguf", "good.jsonl", &["--text-field", "body"], "--text-field"),
        ("chat.gguf", "prompt-only.jsonl", &[], "prompt-only.jsonl:1: a prompt-completion record needs both"),
        // a prompt longer than the model's context: no larger --context to suggest
        (
            "chat.gguf",
            "long.jsonl",
            &[],
            "(a window of 256 and its next token; the model's context, 256, is the largest window: shorten what precedes the answers)",
        ),
        (
            "chat.gguf",
            "mid.jsonl",
            &["--context", "16"],
            "(a window of 16 and its next token; use a larger --context, up to the model's 256)",
        ),
    ];
    for (model, corpus, extra, needle) in cases {
        let o = finetune(t, model, corpus, "x", &[extra, &["--steps", "1"]].concat());
        fails(&o, "train", needle);
        assert!(!t.join("x").exists(), "{corpus}: a run folder was left behind");
    }
    let o = finetune(t, "nosys.gguf", "system.jsonl", "x", &["--steps", "1"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("System role not supported"));
    // a template that renders nothing: named, not "the prompt is empty" (a helper's finding)
    chat_model(t, Some(""), "empty.gguf");
    let o = toy(t, &["generate", "empty.gguf", "--chat", "Name three colors.", "-n", "2", "--threads", "1"]);
    fails(&o, "generate", "the chat template (tokenizer.chat_template) renders the message as nothing");
    let o = toy(t, &["train", "--preset", "smoke", "--corpus", "good.jsonl", "--pack", "--out", "x", "--threads", "1"]);
    fails(&o, "train", "finetune recipe");
    // Chat data given to from-scratch training: said to be chat data.
    let o = toy(t, &["train", "--preset", "smoke", "--corpus", "good.jsonl", "--out", "x", "--threads", "1"]);
    fails(&o, "train", "good.jsonl:1: a chat record (messages, conversations, prompt and completion, or instruction and output), not text");
    assert!(!t.join("x").exists());
    // ... and to toy prep, which has neither a model nor --data-format (a helper's finding)
    let o = toy(t, &["prep", "good.jsonl", "--out", "p"]);
    fails(&o, "prep", "good.jsonl:1: a chat record (messages, conversations, prompt and completion, or instruction and output), not text with a field \"text\": toy prep tokenizes text; chat data is rendered");
    assert!(!t.join("p").exists());
    // What finetune trains on, as `toy debug chat-masks` shows it.
    let o = toy(t, &["debug", "chat-masks", "chat.gguf", "--corpus", "good.jsonl", "-n", "1"]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("<|im_start|>assistant\n⟦Hello.<|im_end|>⟧\n") && out.matches("conversation ").count() == 1, "{out}");
    // Prompt-completion pairs on a model without a template: plain text, the completion trained.
    ok(&finetune(t, "plain.gguf", "pairs.jsonl", "p", &["--steps", "2", "--context", "32"]));
    assert_eq!(events(&t.join("p"))[0]["chat"]["records"], "prompt-completion");
}

/// SmolLM2-135M-Instruct as its GGUF ships, when `TOY_TEST_SMOLLM2` names
/// the file: the template renders and the assistant's turn (with its
/// `<|im_end|>`) is what is trained.
#[test]
fn smollm2_instruct_masks_its_assistant_turns() {
    let Some(path) = std::env::var_os("TOY_TEST_SMOLLM2") else {
        eprintln!("skipped: set TOY_TEST_SMOLLM2 to SmolLM2-135M-Instruct's GGUF");
        return;
    };
    let ck = toy::formats::checkpoint::open_checkpoint(Path::new(&path)).unwrap();
    let tok = ck.tokenizer.clone().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("c.jsonl");
    let conv =
        r#"{"messages": [{"role": "user", "content": "Name three colors."}, {"role": "assistant", "content": "Red, green and blue."}]}"#;
    std::fs::write(&data, format!("{conv}\n")).unwrap();
    let model = toy::data::chat_examples::ChatModel { file: &ck.file, tok: &tok };
    let c = toy::data::chat_examples::load_chat(&data, Default::default(), &model, 0.0, 0).unwrap().unwrap();
    let ex = &c.train[0];
    assert_eq!(tok.decode(&ex.trained_ids()).unwrap(), "Red, green and blue.<|im_end|>");
    let text = tok.decode(&ex.ids).unwrap();
    assert!(text.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), "{text}");
    assert_eq!(c.eos, Some(2), "<|im_end|> is SmolLM2-Instruct's EOS");
}

/// A chat finetune stopped before its first checkpoint restarts from step 0
/// on `--resume` (its config.toml's default text field is no flag that chat
/// data refuses).
#[test]
fn a_chat_run_without_a_checkpoint_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("p.jsonl"), persona(12)).unwrap();
    let first = finetune(t, "chat.gguf", "p.jsonl", "r", &["--steps", "2", "--context", "64", "--lora-rank", "4"]);
    ok(&first);
    // --context given: no note about a context picked for the data
    assert!(!String::from_utf8_lossy(&first.stderr).contains("note: context"), "{}", String::from_utf8_lossy(&first.stderr));
    std::fs::remove_dir_all(t.join("r/weights")).unwrap();
    let o = toy(t, &["train", "--resume", "r", "--threads", "1"]);
    ok(&o);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(said.contains("from step 0"), "{said}");
    assert!(t.join("r/weights/latest").exists());
}

/// A chat corpus too small to keep a conversation for validation says that
/// the run has no validation loss (text corpora did; chat data said nothing).
#[test]
fn a_chat_corpus_without_validation_conversations_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("one.jsonl"), persona(1)).unwrap();
    let o = finetune(t, "chat.gguf", "one.jsonl", "r", &["--steps", "1", "--context", "64", "--lora-rank", "4"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: the chat corpus holds too few conversations to keep any for validation: no validation loss"), "{err}");
}
