//! Chat records as training examples: token ids and which of them the loss
//! predicts (TRL's `assistant_only_loss` and `completion_only_loss`).
//!
//! **How the assistant's tokens are found.** A conversation is rendered with
//! the model's chat template three ways per assistant turn `i`: the whole
//! conversation; the messages before `i` with `add_generation_prompt` (the
//! prompt a chat model answers: it ends where the assistant starts writing);
//! and the messages through `i`. For a template that renders turn by turn
//! (ChatML as SmolLM2 and Qwen use it, Llama 3, Gemma, Phi-3) the second is a
//! prefix of the third and the third of the whole, so the assistant's span of
//! the text is exactly the third minus the second: its content and the
//! template's end of turn. A template that renders earlier turns differently
//! once later ones follow is refused (no span can be trusted then). An
//! assistant message that opens the conversation answers nothing: it is
//! context, not trained (a template such as SmolLM2's adds its default system
//! turn only once there is a message, so it has no prompt of its own).
//!
//! The text is then tokenized in pieces cut at those span boundaries and the
//! ids concatenated, so every token lies wholly inside or outside a span —
//! as at inference, where the prompt up to the generation prompt is
//! tokenized alone and the model writes the answer's tokens after it. (At
//! the boundaries of the templates above, the text starts or ends a
//! pre-tokenizer piece anyway, so the ids equal those of the whole text.)
//! Within an assistant span, the tokens up to and including its last
//! end-of-generation token (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, the
//! model's EOS; see [`Tokenizer::end_of_generation`]) are trained — the
//! answer and the token that stops it — and the template's text after it
//! (ChatML's `\n`), which the model never writes, is not.
//!
//! A prompt-completion pair of strings without a chat template is plain text:
//! the prompt's ids, then the completion's and the model's EOS (trained); an
//! Alpaca record too, its prompt Alpaca's own (`### Instruction:` ...).

use super::chat::{ChatTemplate, Message};
use super::chat_records::{alpaca_prompt, read_chat, DataFormat, Located, Record, RecordKind};
use super::text::encode_with_special;
use super::tokenizer::Tokenizer;
use crate::error::{input, Result};
use ggml_rs::gguf::GgufFile;
use std::path::Path;

/// A tokenized example: `ids`, and for each whether the loss predicts it
/// (`trained[0]` is never used: nothing precedes the first token).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Example {
    /// Token ids, in order.
    pub ids: Vec<u32>,
    /// One per id: the loss predicts it (an assistant token or end of turn).
    pub trained: Vec<bool>,
}

impl Example {
    /// Append `ids`, all trained or not.
    fn push(&mut self, ids: &[u32], trained: bool) {
        self.ids.extend_from_slice(ids);
        self.trained.extend(std::iter::repeat_n(trained, ids.len()));
    }

    /// The trained ids (for tests and messages).
    pub fn trained_ids(&self) -> Vec<u32> {
        self.ids.iter().zip(&self.trained).filter(|(_, &t)| t).map(|(&i, _)| i).collect()
    }
}

/// A model's way of turning chat records into examples.
pub struct Encoder<'a> {
    /// The model's tokenizer (its control tokens are parsed in rendered text).
    pub tok: &'a Tokenizer,
    /// The model's chat template, if it has one.
    pub template: Option<&'a ChatTemplate>,
    /// Ids that end a turn (a trained span ends with its last one).
    pub eog: Vec<u32>,
    /// The model's end-of-sequence id: ends a plain completion.
    pub eos: Option<u32>,
}

impl Encoder<'_> {
    /// The example of `record`.
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) when the template fails
    /// on the conversation or renders it in a way whose assistant spans
    /// cannot be found (see the module documentation), or a conversation
    /// needs a template and there is none.
    pub fn encode(&self, record: &Record) -> Result<Example> {
        let mut ex = self.encode_record(record)?;
        // The model's BOS first where its GGUF asks for one and the template did
        // not write it, as `toy generate --chat` and llama.cpp put it.
        if let Some(b) = self.tok.bos_first().filter(|&b| ex.ids.first() != Some(&b)) {
            ex.ids.insert(0, b);
            ex.trained.insert(0, false);
        }
        Ok(ex)
    }

    fn encode_record(&self, record: &Record) -> Result<Example> {
        match (record, self.template) {
            (Record::Chat { messages, first_trained }, _) => self.conversation(messages, *first_trained),
            (Record::Pair { prompt, completion }, Some(_)) => {
                self.conversation(&[Message::new("user", prompt), Message::new("assistant", completion)], 1)
            }
            (Record::Pair { prompt, completion }, None) => self.plain(prompt, completion),
            (Record::Alpaca { instruction, input, output }, Some(_)) => {
                let user = if input.is_empty() { instruction.clone() } else { format!("{instruction}\n\n{input}") };
                self.conversation(&[Message::new("user", &user), Message::new("assistant", output)], 1)
            }
            (Record::Alpaca { instruction, input, output }, None) => self.plain(&alpaca_prompt(instruction, input), output),
        }
    }

    /// A prompt and its completion as plain text: the prompt's ids (not
    /// trained), then the completion's and the model's EOS (trained).
    fn plain(&self, prompt: &str, completion: &str) -> Result<Example> {
        let mut ex = Example::default();
        ex.push(&self.tok.encode_document(prompt)?, false);
        ex.push(&self.tok.encode_document(completion)?, true);
        ex.push(&self.eos.into_iter().collect::<Vec<_>>(), true);
        Ok(ex)
    }

    /// `messages` rendered by the template, the assistant turns from
    /// `first_trained` on trained (see the module documentation). Spans are
    /// tokenized in pieces: a long message takes the memory of one piece.
    fn conversation(&self, messages: &[Message], first_trained: usize) -> Result<Example> {
        let t = self.template.ok_or_else(|| input("the model has no chat template (tokenizer.chat_template) to render conversations"))?;
        let full = t.render(messages, false)?;
        let mut ex = Example::default();
        let mut cursor = 0;
        for i in (first_trained.max(1)..messages.len()).filter(|&i| messages[i].role == "assistant") {
            let before = t.render(&messages[..i], true)?;
            let through = t.render(&messages[..=i], false)?;
            let said = messages[i].content.trim();
            if !said.is_empty() && !full.contains(said) {
                return Err(input(format!(
                    "the chat template does not render assistant message {i}: its text is not in the rendered conversation"
                )));
            }
            if before.len() < cursor || !through.starts_with(&before) || !full.starts_with(&through) {
                return Err(input(format!(
                    "the chat template does not render this conversation turn by turn (message {i} and those before it change once later messages follow), so its assistant tokens cannot be told apart"
                )));
            }
            if through.len() == before.len() {
                return Err(input(format!("the chat template renders assistant message {i} as nothing")));
            }
            ex.push(&encode_with_special(self.tok, &full[cursor..before.len()])?, false);
            self.push_turn(&mut ex, &full[before.len()..through.len()])?;
            cursor = through.len();
        }
        ex.push(&encode_with_special(self.tok, &full[cursor..])?, false);
        Ok(ex)
    }

    /// Append an assistant span of text: trained through its last end-of-turn id.
    fn push_turn(&self, ex: &mut Example, text: &str) -> Result<()> {
        let ids = encode_with_special(self.tok, text)?;
        let end = ids.iter().rposition(|id| self.eog.contains(id)).map_or(ids.len(), |p| p + 1);
        ex.push(&ids[..end], true);
        ex.push(&ids[end..], false);
        Ok(())
    }
}

/// The examples of a chat corpus, split for training and validation.
#[derive(Clone, Debug, Default)]
pub struct ChatCorpus {
    /// The records' kinds: each file's (its first record's), each kind once,
    /// in the order of the files.
    pub kinds: Vec<RecordKind>,
    /// The conversations trained on, in file order.
    pub train: Vec<Example>,
    /// The held-out conversations (the validation loss).
    pub val: Vec<Example>,
    /// The model's end-of-sequence id: between packed conversations, and padding.
    pub eos: Option<u32>,
}

/// The model a chat corpus is read for: its file (template, special ids) and tokenizer.
pub struct ChatModel<'a> {
    /// Its GGUF: `tokenizer.chat_template` and the special-token ids.
    pub file: &'a GgufFile,
    /// Its tokenizer.
    pub tok: &'a Tokenizer,
}

impl ChatModel<'_> {
    /// `tokenizer.ggml.eos_token_id`, else the tokenizer's end of text.
    pub fn eos(&self) -> Option<u32> {
        let id = self.file.get_u64("tokenizer.ggml.eos_token_id").ok().and_then(|i| u32::try_from(i).ok());
        id.filter(|&i| (i as usize) < self.tok.vocab_size()).or_else(|| self.tok.eot())
    }
}

/// The chat corpus at `path` tokenized for `model`, `val_fraction` of its
/// conversations held out (chosen as documents are, from `seed`); `None` when
/// `path` holds text (see [`DataFormat`]).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input): what [`read_chat`] refuses;
/// conversations for a model without a chat template, or whose template does
/// not parse (naming the model); a record the template fails on (naming
/// `file:line`).
pub fn load_chat(path: &Path, format: DataFormat, model: &ChatModel<'_>, val_fraction: f64, seed: u64) -> Result<Option<ChatCorpus>> {
    let Some((kinds, records)) = read_chat(path, format)? else { return Ok(None) };
    let origin = model.file.path().display().to_string();
    let template = ChatTemplate::from_gguf(model.file, model.tok)?;
    if template.is_none() {
        if let Some(r) = records.iter().find(|r| matches!(r.record, Record::Chat { .. })) {
            return Err(input(format!(
                "{}: a conversation, but the model {origin} has no chat template (tokenizer.chat_template) to render it; give a model with one, or text",
                r.at
            )));
        }
    }
    let enc = Encoder { tok: model.tok, template: template.as_ref(), eog: model.tok.end_of_generation(model.file), eos: model.eos() };
    let examples = records
        .iter()
        .map(|Located { at, record }| enc.encode(record).map_err(|e| input(format!("{at}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let held = super::text::held_out(examples.len(), val_fraction, seed);
    let mut c = ChatCorpus { kinds, eos: enc.eos, ..Default::default() };
    for (ex, val) in examples.into_iter().zip(held) {
        if val { &mut c.val } else { &mut c.train }.push(ex);
    }
    Ok(Some(c))
}
