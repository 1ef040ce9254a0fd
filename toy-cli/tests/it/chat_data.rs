//! Chat data beyond `toy train finetune`'s own: ShareGPT records.

use crate::chat::{chat_model, events, finetune, persona, CHATML};
use crate::common::process::{fails, ok, toy};

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
    }
    assert!(!t.join("x").exists());
    // From-scratch training is told it is chat data.
    let o = toy(t, &["train", "--preset", "smoke", "--corpus", "share.jsonl", "--out", "x", "--threads", "1"]);
    fails(&o, "train", "share.jsonl:1: a chat record (messages, conversations, or prompt and completion), not text");
}
