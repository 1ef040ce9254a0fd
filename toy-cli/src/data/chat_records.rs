//! Chat records of a JSON Lines corpus, in the forms TRL, axolotl and
//! OpenAI's fine-tuning write:
//!
//! - conversational: `{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}`;
//! - ShareGPT (axolotl's `sharegpt`, FastChat's): `{"conversations": [{"from":
//!   "system"|"human"|"gpt", "value": "..."}, ...]}`, read as conversational
//!   records with `human` as `user` and `gpt` as `assistant` ([`SHAREGPT_ROLES`]);
//! - prompt-completion: `{"prompt": "...", "completion": "..."}`, each a
//!   string or (TRL's conversational prompt-completion) a list of messages.
//!
//! `--data-format auto` decides per file from its first record: a `messages`
//! field makes it conversations, a `conversations` field ShareGPT
//! conversations, `prompt` and `completion` fields make it pairs, anything
//! else text (read with `--text-field` by `super::sources`).
//! Every later record of the file must be of the same kind. `chat` insists on
//! chat records, `text` reads every record as text.

use super::chat::Message;
use super::sources::{decoded, discover, gzip_hint, Format, Source};
use crate::error::{input, Result};
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// How the records of a JSON Lines corpus are read (`--data-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DataFormat {
    /// Per file, from its first record: "messages" or "conversations" (ShareGPT)
    /// are conversations, "prompt" and "completion" a pair, "instruction" and
    /// "output" (Alpaca) an instruction, anything else text.
    #[default]
    Auto,
    /// Every record is a document (its `--text-field`).
    Text,
    /// Every record is a conversation, a prompt-completion pair or an Alpaca instruction.
    Chat,
}

impl DataFormat {
    /// The name on the command line and in config.toml.
    pub fn name(self) -> &'static str {
        match self {
            DataFormat::Auto => "auto",
            DataFormat::Text => "text",
            DataFormat::Chat => "chat",
        }
    }
}

/// What the records of one file hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Documents (`--text-field`).
    Text,
    /// `{"messages": [...]}`.
    Messages,
    /// ShareGPT's `{"conversations": [{"from", "value"}, ...]}`.
    ShareGpt,
    /// `{"prompt": ..., "completion": ...}`.
    PromptCompletion,
    /// Stanford Alpaca's `{"instruction", "input", "output"}` (`input` may be
    /// empty or absent), the records of axolotl's `alpaca` type. axolotl always
    /// writes Alpaca's prompt; toy writes it only for a model without a chat
    /// template, and renders a user turn with the template otherwise.
    Alpaca,
}

impl RecordKind {
    /// The kind of a record from its fields (`Text` when it has neither form's).
    pub fn of(record: &Value) -> RecordKind {
        if record.get("messages").is_some() {
            RecordKind::Messages
        } else if record.get("conversations").is_some() {
            RecordKind::ShareGpt
        } else if record.get("prompt").is_some() && record.get("completion").is_some() {
            RecordKind::PromptCompletion
        } else if record.get("instruction").is_some() && record.get("output").is_some() {
            RecordKind::Alpaca
        } else {
            RecordKind::Text
        }
    }

    /// How messages name the kind.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Text => "text records",
            RecordKind::Messages => "conversations (messages)",
            RecordKind::ShareGpt => "ShareGPT conversations (conversations)",
            RecordKind::PromptCompletion => "prompt-completion pairs",
            RecordKind::Alpaca => "Alpaca records (instruction, input, output)",
        }
    }
}

/// One chat record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A conversation whose assistant turns from message `first_trained` on
    /// are trained (0 for a `messages` record; the prompt's length for a
    /// prompt-completion record given as lists of messages).
    Chat { messages: Vec<Message>, first_trained: usize },
    /// A prompt and a completion given as strings: a user turn and an
    /// assistant turn under a chat template, plain text otherwise.
    Pair { prompt: String, completion: String },
    /// An Alpaca record: under a chat template a user turn (the instruction,
    /// then a blank line and the input when there is one) and an assistant
    /// turn (the output); otherwise Alpaca's own prompt ([`alpaca_prompt`])
    /// and the output, as plain text.
    Alpaca { instruction: String, input: String, output: String },
}

/// Stanford Alpaca's prompt (its `PROMPT_DICT`, which axolotl's `alpaca`
/// type writes too): the preamble, `### Instruction:`, `### Input:` when
/// there is an input, and `### Response:`, after which the output follows.
pub fn alpaca_prompt(instruction: &str, input: &str) -> String {
    if input.is_empty() {
        format!(
            "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n\
             ### Instruction:\n{instruction}\n\n### Response:\n"
        )
    } else {
        format!(
            "Below is an instruction that describes a task, paired with an input that provides further context. \
             Write a response that appropriately completes the request.\n\n\
             ### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
        )
    }
}

/// A record and where it is (`file:line`, for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// `file:line`.
    pub at: String,
    pub record: Record,
}

/// The chat records of the corpus at `path` (a JSON Lines file, a folder of
/// them, `.gz` of them) in file and line order, with the kind of the first
/// file; `None` when it holds text (see [`DataFormat`]).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `file:line` for a line
/// that is not a JSON object, a record of another kind than its file's, or a
/// malformed chat record ([`parse`]); naming the files when some hold chat
/// records and others text, or when `format` is `Chat` and a file holds text.
pub fn read_chat(path: &Path, format: DataFormat) -> Result<Option<(Vec<RecordKind>, Vec<Located>)>> {
    if format == DataFormat::Text || super::prepared::is_prepared(path) {
        return Ok(None);
    }
    let sources = discover(&[path.to_path_buf()])?;
    // Each file's kind (its first record's) and that record's line.
    let mut firsts = Vec::with_capacity(sources.len());
    for s in &sources {
        firsts.push(if s.format == Format::JsonLines { first_kind(s)? } else { (RecordKind::Text, None) });
    }
    let chat = |(k, _): &(RecordKind, Option<usize>)| *k != RecordKind::Text;
    const CHAT_RECORD: &str =
        "a JSON Lines record with \"messages\", \"conversations\", \"prompt\" and \"completion\", or \"instruction\" and \"output\"";
    match (firsts.iter().position(chat), firsts.iter().position(|f| !chat(f))) {
        // A file's first record gives its kind: name it where it is text.
        (None, _) if format == DataFormat::Chat => Err(input(match firsts[0].1 {
            Some(n) => format!(
                "{}:{n}: a text record, not a chat record ({CHAT_RECORD}); a file's first record gives its kind",
                sources[0].path.display()
            ),
            None => format!("{} holds no chat records ({CHAT_RECORD})", sources[0].path.display()),
        })),
        (None, _) => Ok(None),
        (Some(c), Some(t)) => Err(input(format!(
            "{} holds {} but {} holds text; a corpus is chat data or text, not both",
            sources[c].path.display(),
            firsts[c].0.name(),
            sources[t].path.display()
        ))),
        (Some(_), None) => {
            let mut out = Vec::new();
            for (s, &(kind, _)) in sources.iter().zip(&firsts) {
                read_file(s, kind, &mut out)?;
            }
            // each kind once, in the order of the files
            let mut kinds: Vec<RecordKind> = Vec::new();
            for &(k, _) in &firsts {
                if !kinds.contains(&k) {
                    kinds.push(k);
                }
            }
            Ok(Some((kinds, out)))
        }
    }
}

/// The lines of `s` with their 1-based numbers (a byte order mark dropped),
/// empty lines skipped, calling `f` on each until it says stop.
fn for_lines(s: &Source, mut f: impl FnMut(usize, &str) -> Result<bool>) -> Result<()> {
    let file = std::fs::File::open(&s.path).map_err(|e| input(format!("cannot read {}: {e}", s.path.display())))?;
    let r = decoded(file, s.gzip);
    for (i, line) in r.split(b'\n').enumerate() {
        let at = || format!("{}:{}", s.path.display(), i + 1);
        let bytes = line.map_err(|e| input(format!("cannot read {}: {e}{}", at(), gzip_hint(s.gzip))))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| input(format!("{}: not UTF-8 text (invalid byte at column {})", at(), e.utf8_error().valid_up_to() + 1)))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        if text.trim().is_empty() {
            continue;
        }
        if !f(i + 1, text)? {
            break;
        }
    }
    Ok(())
}

/// A line as a JSON object.
fn object(at: &str, line: &str) -> Result<Value> {
    let v: Value = super::sources::json_record(at, line)?;
    if !v.is_object() {
        return Err(input(format!("{at}: not a JSON object")));
    }
    Ok(v)
}

/// The kind of the first record of the JSON Lines file `s` (text when it has
/// none) and its line (`None`: no record).
fn first_kind(s: &Source) -> Result<(RecordKind, Option<usize>)> {
    let mut kind = RecordKind::Text;
    let mut first = None;
    for_lines(s, |n, line| {
        let at = format!("{}:{n}", s.path.display());
        let v = object(&at, line)?;
        kind = RecordKind::of(&v);
        first = Some(n);
        // Half a prompt-completion pair or Alpaca record is a mistake, not a text record.
        let half = v.get("prompt").is_some() != v.get("completion").is_some();
        if kind == RecordKind::Text && half && v.get("text").is_none() {
            return Err(input(format!("{at}: a prompt-completion record needs both \"prompt\" and \"completion\"")));
        }
        if kind == RecordKind::Text && v.get("instruction").is_some() && v.get("text").is_none() {
            return Err(input(format!("{at}: an Alpaca record needs \"instruction\" and \"output\" (and may have \"input\")")));
        }
        Ok(false)
    })?;
    Ok((kind, first))
}

/// Append the records of `s`, all of `kind`, to `out`.
fn read_file(s: &Source, kind: RecordKind, out: &mut Vec<Located>) -> Result<()> {
    for_lines(s, |n, line| {
        let at = format!("{}:{n}", s.path.display());
        let v = object(&at, line)?;
        let found = RecordKind::of(&v);
        if found != kind {
            let (want, first) = match kind {
                RecordKind::Messages => ("\"messages\" field", "a conversation"),
                RecordKind::ShareGpt => ("\"conversations\" field", "a ShareGPT conversation"),
                RecordKind::Alpaca => ("\"instruction\" and \"output\" fields", "an Alpaca record"),
                _ => ("\"prompt\" and \"completion\" fields", "a prompt-completion pair"),
            };
            return Err(input(format!("{at}: no {want}; the file's first record is {first}, and a file holds one kind of record")));
        }
        out.push(Located { record: parse(&v).map_err(|m| input(format!("{at}: {m}")))?, at });
        Ok(true)
    })
}

/// The roles toy trains on.
pub const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// The chat record in `v` (a JSON object of a chat kind).
///
/// # Errors
/// A message without the `file:line`: a field of the wrong type, a message
/// that is not `{"role", "content"}` with a string content, a role other
/// than [`ROLES`], no assistant turn to train on.
pub fn parse(v: &Value) -> Result<Record, String> {
    let record = match RecordKind::of(v) {
        RecordKind::Messages => Record::Chat { messages: messages(&v["messages"], "messages")?, first_trained: 0 },
        RecordKind::ShareGpt => Record::Chat { messages: sharegpt(&v["conversations"])?, first_trained: 0 },
        RecordKind::PromptCompletion => match (&v["prompt"], &v["completion"]) {
            (Value::String(p), Value::String(c)) => Record::Pair { prompt: p.clone(), completion: c.clone() },
            (p, c) => {
                let mut prompt =
                    if p.is_string() { vec![Message::new("user", p.as_str().unwrap_or_default())] } else { messages(p, "prompt")? };
                let n = prompt.len();
                prompt.extend(if c.is_string() {
                    vec![Message::new("assistant", c.as_str().unwrap_or_default())]
                } else {
                    messages(c, "completion")?
                });
                Record::Chat { messages: prompt, first_trained: n }
            }
        },
        RecordKind::Alpaca => {
            let field = |name: &str| match &v[name] {
                Value::String(t) => Ok(t.clone()),
                Value::Null if name == "input" => Ok(String::new()),
                other => Err(format!("{name} is not a string (it is {})", json_type(other))),
            };
            Record::Alpaca { instruction: field("instruction")?, input: field("input")?, output: field("output")? }
        }
        RecordKind::Text => return Err("not a chat record".into()),
    };
    if let Record::Chat { messages, first_trained } = &record {
        // an assistant message that opens the conversation is context (data::chat_examples)
        if !messages.iter().skip((*first_trained).max(1)).any(|m| m.role == "assistant") {
            let place = if *first_trained == 0 { "the conversation" } else { "the completion" };
            let opening = if *first_trained == 0 && messages.first().is_some_and(|m| m.role == "assistant") {
                " (an assistant turn that opens a conversation is context: nothing precedes it)"
            } else {
                ""
            };
            return Err(format!("{place} has no assistant turn (the tokens that are trained on and scored){opening}"));
        }
    }
    Ok(record)
}

/// The messages of the list `v` (the record's field `field`).
fn messages(v: &Value, field: &str) -> Result<Vec<Message>, String> {
    let list = v.as_array().ok_or_else(|| match field {
        "prompt" | "completion" => format!("{field} is not a string or a list of messages (it is {})", json_type(v)),
        _ => format!("{field} is not a list of messages (it is {})", json_type(v)),
    })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let which = format!("{field}[{i}]");
        let role = m.get("role").ok_or_else(|| format!("{which} has no \"role\""))?;
        let role = role.as_str().ok_or_else(|| format!("{which}'s role is not a string"))?;
        if !ROLES.contains(&role) {
            return Err(format!("{which} has role {role:?}; toy trains on system, user and assistant turns"));
        }
        let content = m.get("content").ok_or_else(|| format!("{which} has no \"content\""))?;
        let content = content.as_str().ok_or_else(|| format!("{which}'s content is not a string (it is {})", json_type(content)))?;
        out.push(Message::new(role, content));
    }
    Ok(out)
}

/// ShareGPT's speakers (`from`) and the roles they are read as: axolotl's
/// default mapping (`human`/`user` → user, `gpt`/`assistant` → assistant).
pub const SHAREGPT_ROLES: [(&str, &str); 5] =
    [("system", "system"), ("human", "user"), ("user", "user"), ("gpt", "assistant"), ("assistant", "assistant")];

/// The messages of a ShareGPT `conversations` list.
fn sharegpt(v: &Value) -> Result<Vec<Message>, String> {
    let list = v.as_array().ok_or_else(|| "conversations is not a list of turns".to_string())?;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let which = format!("conversations[{i}]");
        let from = m.get("from").ok_or_else(|| format!("{which} has no \"from\""))?;
        let from = from.as_str().ok_or_else(|| format!("{which}'s from is not a string (it is {})", json_type(from)))?;
        let Some(&(_, role)) = SHAREGPT_ROLES.iter().find(|(f, _)| *f == from) else {
            return Err(format!("{which} is from {from:?}; ShareGPT turns are from system, human or gpt"));
        };
        let value = m.get("value").ok_or_else(|| format!("{which} has no \"value\""))?;
        let value = value.as_str().ok_or_else(|| format!("{which}'s value is not a string (it is {})", json_type(value)))?;
        out.push(Message::new(role, value));
    }
    Ok(out)
}

/// The JSON type of `v`, as messages name it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_of_both_forms() {
        let m = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "id": 3});
        assert_eq!(
            parse(&m).unwrap(),
            Record::Chat { messages: vec![Message::new("user", "hi"), Message::new("assistant", "hello")], first_trained: 0 }
        );
        let p = json!({"prompt": "2+2=", "completion": "4"});
        assert_eq!(parse(&p).unwrap(), Record::Pair { prompt: "2+2=".into(), completion: "4".into() });
        let lists = json!({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "completion": "a"});
        match parse(&lists).unwrap() {
            Record::Chat { messages, first_trained } => assert_eq!((messages.len(), first_trained), (3, 2)),
            r => panic!("{r:?}"),
        }
        let share =
            json!({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]});
        let want = [Message::new("system", "s"), Message::new("user", "q"), Message::new("assistant", "a")];
        assert_eq!(parse(&share).unwrap(), Record::Chat { messages: want.to_vec(), first_trained: 0 });
        let alpaca = |v: Value| parse(&v).unwrap();
        let want = |input: &str| Record::Alpaca { instruction: "Add.".into(), input: input.into(), output: "4".into() };
        assert_eq!(alpaca(json!({"instruction": "Add.", "input": "2+2", "output": "4"})), want("2+2"));
        assert_eq!(alpaca(json!({"instruction": "Add.", "output": "4"})), want(""));
        assert_eq!(alpaca(json!({"instruction": "Add.", "input": null, "output": "4"})), want(""));
        assert_eq!(parse(&json!({"instruction": 1, "output": "4"})).unwrap_err(), "instruction is not a string (it is a number)");
        assert!(alpaca_prompt("Add.", "").ends_with("### Instruction:\nAdd.\n\n### Response:\n"));
        assert!(alpaca_prompt("Add.", "2+2").ends_with("### Instruction:\nAdd.\n\n### Input:\n2+2\n\n### Response:\n"));
    }

    #[test]
    fn malformed_records_say_what_is_wrong() {
        let err = |v: Value| parse(&v).unwrap_err();
        assert!(err(json!({"messages": [{"role": "tool", "content": "x"}]})).contains("role \"tool\""));
        assert!(err(json!({"messages": [{"role": "user", "content": 5}]})).contains("content is not a string (it is a number)"));
        assert!(err(json!({"messages": [{"role": "user", "content": "q"}]})).contains("no assistant turn"));
        assert!(err(json!({"messages": "hi"})).contains("not a list"));
        assert!(err(json!({"prompt": "q", "completion": [{"role": "user", "content": "x"}]})).contains("completion has no assistant"));
        assert!(err(json!({"conversations": [{"from": "bot", "value": "x"}]})).contains("conversations[0] is from \"bot\""));
        assert!(err(json!({"conversations": [{"from": "gpt", "value": 1}]})).contains("value is not a string (it is a number)"));
        assert!(err(json!({"conversations": [{"from": "human", "value": "q"}]})).contains("no assistant turn"));
        // An assistant turn alone is context, and the message says so.
        assert!(err(json!({"messages": [{"role": "assistant", "content": "ok"}]})).contains("opens a conversation is context"));
        assert!(err(json!({"prompt": "q", "completion": 5})).contains("completion is not a string or a list of messages (it is a number)"));
        assert!(err(json!({"prompt": 5, "completion": "a"})).contains("prompt is not a string or a list of messages"));
    }
}
