//! Chat data beyond `toy train finetune`'s own: ShareGPT records, `toy eval`
//! scoring the assistant's tokens only, and `--record-batches` recording
//! chat windows with their masked targets.

use crate::chat::{chat_model, events, finetune, persona, CHATML};
use crate::common::process::{fails, ok, toy};
use std::path::Path;

/// [`persona`]'s conversations as ShareGPT records (`from`, `value`).
fn sharegpt(n: usize) -> String {
    let from = |role: &str| {
        match role {
            "user" => "human",
            "assistant" => "gpt",
            r => r,
        }
        .to_string()
    };
    let mut out = String::new();
    for line in persona(n).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let turns: Vec<serde_json::Value> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| serde_json::json!({"from": from(m["role"].as_str().unwrap()), "value": m["content"]}))
            .collect();
        out += &format!("{}\n", serde_json::json!({ "conversations": turns }));
    }
    out
}

#[test]
fn sharegpt_records_are_conversations() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("share.jsonl"), sharegpt(12)).unwrap();
    // Rendered as the same conversation in messages form is: human → user, gpt → assistant.
    let o = toy(t, &["debug", "chat-masks", "chat.gguf", "--corpus", "share.jsonl", "-n", "1"]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let want = "<|im_start|>system\nYou are Toy.<|im_end|>\n<|im_start|>user\nWhat colour is the cat?<|im_end|>\n<|im_start|>assistant\n⟦The cat is blue.<|im_end|>⟧\n";
    assert!(out.contains(want), "{out}");
    ok(&finetune(t, "chat.gguf", "share.jsonl", "ft", &["--steps", "2", "--context", "64"]));
    assert_eq!(events(&t.join("ft"))[0]["chat"]["records"], "sharegpt");
    ok(&finetune(t, "chat.gguf", "share.jsonl", "ft2", &["--steps", "1", "--context", "64", "--data-format", "chat"]));
    // Bad records: named by file:line, with what is wrong.
    let good = r#"{"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]}"#;
    let files = [
        ("from.jsonl", format!("{good}\n{}\n", r#"{"conversations": [{"from": "human", "value": "Hi"}, {"from": "bot", "value": "x"}]}"#)),
        ("value.jsonl", r#"{"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "x"}]}"#.to_string()),
        ("nogpt.jsonl", r#"{"conversations": [{"from": "human", "value": "Hi"}]}"#.to_string()),
        (
            "mixed.jsonl",
            format!("{good}\n{}\n", r#"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}"#),
        ),
        ("notlist.jsonl", r#"{"conversations": "Hi"}"#.to_string()),
    ];
    for (name, text) in &files {
        std::fs::write(t.join(name), text).unwrap();
    }
    let cases = [
        ("from.jsonl", "from.jsonl:2: conversations[1] is from \"bot\"; ShareGPT turns are from system, human or gpt"),
        ("value.jsonl", "value.jsonl:1: conversations[0]'s value is not a string (it is a number)"),
        ("nogpt.jsonl", "nogpt.jsonl:1: the conversation has no assistant turn"),
        ("mixed.jsonl", "mixed.jsonl:2: no \"conversations\" field; the file's first record is a ShareGPT conversation"),
        ("notlist.jsonl", "notlist.jsonl:1: conversations is not a list"),
    ];
    for (corpus, needle) in cases {
        fails(&finetune(t, "chat.gguf", corpus, "x", &["--steps", "1"]), "train", needle);
        fails(&toy(t, &["eval", "chat.gguf", "--corpus", corpus, "--threads", "1"]), "eval", needle);
    }
    assert!(!t.join("x").exists());
    // From-scratch training is told it is chat data.
    let o = toy(t, &["train", "--preset", "smoke", "--corpus", "share.jsonl", "--out", "x", "--threads", "1"]);
    fails(
        &o,
        "train",
        "share.jsonl:1: a chat record (messages, conversations, prompt and completion, or instruction and output), not text",
    );
}

/// `toy eval --json` in `dir`.
fn eval_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let o = toy(dir, &[&["eval", "--json", "--threads", "1"][..], args].concat());
    ok(&o);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Conversations whose answers differ much in length, so that a mean of
/// per-batch means would differ from the mean over tokens.
fn uneven(n: usize) -> String {
    (0..n)
        .map(|i| {
            let answer = if i % 2 == 0 { "Yes.".to_string() } else { format!("The answer is {}.", "very ".repeat(6 + i)) };
            let m = [("user", format!("Question {i}?")), ("assistant", answer)];
            let m: Vec<_> = m.iter().map(|(r, c)| serde_json::json!({"role": r, "content": c})).collect();
            format!("{}\n", serde_json::json!({ "messages": m }))
        })
        .collect()
}

#[test]
fn eval_scores_chat_data_on_the_assistant_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("uneven.jsonl"), uneven(7)).unwrap();
    // The tokens scored are exactly those finetune trains.
    let ck = toy::formats::checkpoint::open_checkpoint(&t.join("chat.gguf")).unwrap();
    let tok = ck.tokenizer.clone().unwrap();
    let model = toy::data::chat_examples::ChatModel { file: &ck.file, tok: &tok };
    let c = toy::data::chat_examples::load_chat(&t.join("uneven.jsonl"), Default::default(), &model, 0.0, 0).unwrap().unwrap();
    let trained = |n: usize| c.train[..n].iter().map(|e| e.trained.iter().skip(1).filter(|&&b| b).count()).sum::<usize>();
    let longest = c.train.iter().map(|e| e.ids.len()).max().unwrap();
    let e = eval_json(t, &["chat.gguf", "--corpus", "uneven.jsonl", "--batch", "1"]);
    assert_eq!((e["tokens"].as_u64(), e["context"].as_u64()), (Some(trained(7) as u64), Some(longest as u64 - 1)), "{e}");
    assert_eq!((e["chat"]["conversations"].as_u64(), e["chat"]["truncated"].as_u64()), (Some(7), Some(0)), "{e}");
    // The mean is over tokens, not over batches: the batch does not change it.
    let e4 = eval_json(t, &["chat.gguf", "--corpus", "uneven.jsonl", "--batch", "4"]);
    let (l1, l4) = (e["loss"].as_f64().unwrap(), e4["loss"].as_f64().unwrap());
    assert!((l1 - l4).abs() < 1e-4 * l1, "--batch 1: {l1}, --batch 4: {l4}");
    let e3 = eval_json(t, &["chat.gguf", "--corpus", "uneven.jsonl", "--max-windows", "3"]);
    assert_eq!(e3["tokens"].as_u64(), Some(trained(3) as u64));
    // Cut conversations are said to be cut; the human line names what was scored.
    let o = toy(t, &["eval", "chat.gguf", "--corpus", "uneven.jsonl", "--context", "40", "--threads", "1"]);
    ok(&o);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(err.contains("conversations truncated to 41 tokens"), "{err}");
    assert!(out.contains("assistant tokens scored in 7 conversations (windows of 40)"), "{out}");
    // A finetuned model's assistant loss falls on its data; the base's stays.
    std::fs::write(t.join("chats.jsonl"), persona(40)).unwrap();
    let args = ["--steps", "30", "--batch", "4", "--context", "64", "--lr", "0.003", "--eval-every", "1000"];
    ok(&finetune(t, "chat.gguf", "chats.jsonl", "ft", &args));
    let base = eval_json(t, &["chat.gguf", "--corpus", "chats.jsonl"])["loss"].as_f64().unwrap();
    let tuned = eval_json(t, &["ft", "--corpus", "chats.jsonl"])["loss"].as_f64().unwrap();
    assert!(tuned < base * 0.7, "assistant loss: base {base}, finetuned {tuned}");
}

#[test]
fn eval_refuses_bad_chat_input_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    chat_model(t, None, "plain.gguf");
    std::fs::write(t.join("chats.jsonl"), persona(4)).unwrap();
    std::fs::write(t.join("bad.jsonl"), format!("{}not json\n", persona(1))).unwrap();
    std::fs::write(t.join("story.txt"), "Once upon a time there was a cat.\n").unwrap();
    let long = serde_json::json!({"messages": [{"role": "user", "content": "why ".repeat(20)}, {"role": "assistant", "content": "No."}]});
    std::fs::write(t.join("long.jsonl"), format!("{long}\n")).unwrap();
    let cases: [(&str, &str, &[&str], &str); 6] = [
        ("chat.gguf", "bad.jsonl", &[], "bad.jsonl:2: not a JSON object"),
        ("chat.gguf", "story.txt", &["--data-format", "chat"], "story.txt holds no chat records"),
        ("chat.gguf", "chats.jsonl", &["--text-field", "body"], "--text-field applies to text records"),
        ("plain.gguf", "chats.jsonl", &[], "chats.jsonl:1: a conversation, but the model plain.gguf has no chat template"),
        ("chat.gguf", "long.jsonl", &["--context", "8"], "no conversation has an assistant token within its first 9 tokens"),
        ("chat.gguf", "chats.jsonl", &["--data-format", "text"], "chats.jsonl:1: a chat record"),
    ];
    for (model, corpus, extra, needle) in cases {
        let o = toy(t, &[&["eval", model, "--corpus", corpus, "--threads", "1"][..], extra].concat());
        fails(&o, "eval", needle);
    }
}

/// The i32 values of a file.
fn i32s(path: &Path) -> Vec<i32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn record_batches_hold_chat_windows_and_their_masks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("chats.jsonl"), persona(20)).unwrap();
    let args = ["--batch", "2", "--context", "48", "--record-batches", "--save-initial", "--eval-every", "1000"];
    ok(&finetune(t, "chat.gguf", "chats.jsonl", "a", &[&args[..], &["--steps", "3"]].concat()));
    let layout: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(t.join("a/batches.json")).unwrap()).unwrap();
    assert_eq!(layout, serde_json::json!({"format": "toy/chat-batches-v1", "dtype": "i32", "window": 49, "batch": 2}));
    let v = i32s(&t.join("a/batches.bin"));
    assert_eq!(v.len(), 3 * 2 * 2 * 48, "3 steps of 2 windows of 48 inputs and 48 targets");
    for w in v.chunks_exact(96) {
        let (inputs, targets) = w.split_at(48);
        assert!(targets.contains(&-1) && targets.iter().any(|&y| y >= 0), "prompt tokens masked, the answer's not: {targets:?}");
        for j in 0..47 {
            assert!(targets[j] == -1 || targets[j] == inputs[j + 1], "a counted target is the next input");
        }
    }
    // The recorded batch gives the step's logged loss (the loss before step 1's update).
    let o = toy(t, &["debug", "dump-logits", "a/weights/step_0.gguf", "--batches", "a/batches.bin", "--step", "1", "--out", "l.gguf"]);
    ok(&o);
    let dumped = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["loss"].as_f64().unwrap();
    let step1 = events(&t.join("a")).iter().find(|e| e["kind"] == "step" && e["step"] == 1).unwrap()["loss"].as_f64().unwrap();
    assert!((dumped - step1).abs() < 1e-4 * step1, "dumped {dumped}, logged {step1}");
    // A resumed run's recording goes on where it stopped: the same bytes.
    ok(&finetune(t, "chat.gguf", "chats.jsonl", "b", &[&args[..], &["--steps", "2"]].concat()));
    ok(&toy(t, &["train", "--resume", "b", "--steps", "3", "--threads", "1"]));
    assert_eq!(i32s(&t.join("b/batches.bin")), v);
}
