//! Conversations and a model's chat template: the Jinja text of a GGUF's
//! `tokenizer.chat_template` (the `chat_template` of Hugging Face's
//! `tokenizer_config.json`), rendered with minijinja as `transformers`'
//! `apply_chat_template` renders it.

use crate::data::tokenizer::Tokenizer;
use crate::error::{input, Result};
use ggml_rs::gguf::GgufFile;
use serde::{Deserialize, Serialize};

/// One turn of a conversation, OpenAI's and TRL's `{"role", "content"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The turn's text.
    pub content: String,
}

impl Message {
    /// A turn of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into() }
    }
}

/// A model's chat template with the special tokens it may name
/// (`bos_token`, `eos_token`).
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    /// minijinja with the template parsed once, as [`TEMPLATE`].
    env: minijinja::Environment<'static>,
    bos: String,
    eos: String,
    origin: String,
}

impl ChatTemplate {
    /// A template from its Jinja `source`; `bos` and `eos` are the texts of
    /// the model's begin and end tokens (empty when it has none). `origin`
    /// names the file in messages.
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) when the template does not parse.
    pub fn new(source: &str, bos: &str, eos: &str, origin: &str) -> Result<ChatTemplate> {
        let mut t = ChatTemplate { env: environment(), bos: bos.into(), eos: eos.into(), origin: origin.into() };
        let parsed = t.env.add_template_owned(TEMPLATE, without_generation_tags(source));
        parsed.map_err(|e| t.error(e))?;
        Ok(t)
    }

    /// The template of the GGUF `f` (`tokenizer.chat_template`), its special
    /// tokens read from `tok` and the file's `tokenizer.ggml.{bos,eos}_token_id`;
    /// `None` when the file has no template.
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) naming the file when the
    /// key is not a string or the template does not parse.
    pub fn from_gguf(f: &GgufFile, tok: &Tokenizer) -> Result<Option<ChatTemplate>> {
        let origin = f.path().display().to_string();
        let Some(v) = f.get("tokenizer.chat_template") else {
            return Ok(None);
        };
        let source = v.as_str().ok_or_else(|| input(format!("{origin}: tokenizer.chat_template is not a string")))?;
        let text = |key: &str| {
            f.get_u64(&format!("tokenizer.ggml.{key}_token_id")).ok().and_then(|id| tok.token_text(id as u32)).unwrap_or_default()
        };
        ChatTemplate::new(source, &text("bos"), &text("eos"), &origin).map(Some)
    }

    /// The text of `messages`, with the opening of an assistant turn after
    /// them when `add_generation_prompt` (the prompt a chat model answers).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) when rendering fails, e.g.
    /// the template's own `raise_exception` for a conversation it refuses.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let t = self.env.get_template(TEMPLATE).map_err(|e| self.error(e))?;
        t.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(|e| self.error(e))
    }

    fn error(&self, e: minijinja::Error) -> crate::error::Error {
        let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
        input(format!("{}: chat template: {}{detail}", self.origin, e.kind()))
    }
}

/// The name the template is kept under in its environment.
const TEMPLATE: &str = "chat_template";

/// `source` with Hugging Face's `{% generation %}` … `{% endgeneration %}`
/// (transformers' extension that marks the assistant's tokens for
/// `return_assistant_tokens_mask`, and renders its body as it is) as
/// `{% if true %}` … `{% endif %}`, which minijinja knows, keeping each tag's
/// whitespace control (`{%-`, `-%}`). toy finds the assistant's tokens itself.
fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(i) = rest.find("{%") {
        let Some(j) = rest[i + 2..].find("%}") else { break };
        let inner = &rest[i + 2..i + 2 + j];
        out.push_str(&rest[..i + 2]);
        match inner.trim_start_matches(['-', '+']).trim_end_matches(['-', '+']).trim() {
            "generation" => out.push_str(&inner.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&inner.replacen("endgeneration", "endif", 1)),
            _ => out.push_str(inner),
        }
        out.push_str("%}");
        rest = &rest[i + 2 + j + 2..];
    }
    out.push_str(rest);
    out
}

/// Instructions one rendering may run: a template is a file's content, and a
/// hostile one (`range(10**5)` inside another) must end in an error, not hang.
/// Real templates take a few thousand per turn.
const FUEL: u64 = 20_000_000;

/// minijinja with what Hugging Face templates use beyond Jinja's core:
/// Python's string methods (`.strip()`, `.startswith()`) and `raise_exception`,
/// and a [`FUEL`] budget.
fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    // Today's local date and time in a strftime format, as Hugging Face's and
    // llama.cpp's template engines give it (Llama 3.1's template dates its
    // system turn with strftime_now("%d %b %Y")).
    env.add_function("strftime_now", |format: String| -> std::result::Result<String, minijinja::Error> {
        let items: Vec<chrono::format::Item> = chrono::format::StrftimeItems::new(&format).collect();
        if items.iter().any(|i| matches!(i, chrono::format::Item::Error)) {
            let msg = format!("strftime_now: {format:?} is not a strftime format");
            return Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg));
        }
        Ok(chrono::Local::now().format_with_items(items.into_iter()).to_string())
    });
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strftime_now gives today's date in the format asked (Llama 3.1's
    /// templates call it); a format chrono cannot read is an error, not a panic.
    #[test]
    fn strftime_now_formats_today() {
        let env = environment();
        let year = env.render_str("{{ strftime_now('%Y') }}", ()).unwrap();
        assert_eq!(year, chrono::Local::now().format("%Y").to_string());
        assert!(env.render_str("{{ strftime_now('%Q %') }}", ()).is_err());
    }

    /// SmolLM2-135M-Instruct's template, as its GGUF carries it.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_smollm2_as_transformers_does() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>", "m.gguf").unwrap();
        let got = t.render(&[Message::new("user", "What is 2+2?")], true).unwrap();
        assert_eq!(
            got,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = [Message::new("system", "Be brief."), Message::new("user", "Hi"), Message::new("assistant", "Hello.")];
        assert_eq!(
            t.render(&with_system, false).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
        );
    }

    /// A template with transformers' `{% generation %}` blocks renders as
    /// the same template without them, whitespace control included.
    #[test]
    fn generation_blocks_render_their_body() {
        let marked = "{% for m in messages %}{% if m.role == 'assistant' %}{%- generation -%}  {{ m.content }}  {%- endgeneration %}\n\
                      {% else %}[{{ m.content }}]{% endif %}{% endfor %}";
        let plain = "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}\n\
                     {% else %}[{{ m.content }}]{% endif %}{% endfor %}";
        let msgs = [Message::new("user", "Hi"), Message::new("assistant", "Hello.")];
        let got = ChatTemplate::new(marked, "", "", "m.gguf").unwrap().render(&msgs, false).unwrap();
        assert_eq!(got, ChatTemplate::new(plain, "", "", "m.gguf").unwrap().render(&msgs, false).unwrap());
        assert_eq!(got, "[Hi]Hello.\n");
        // A word that merely contains it, and other tags, are left as they are.
        assert_eq!(without_generation_tags("{% set generation_x = 1 %}{{ generation_x }}"), "{% set generation_x = 1 %}{{ generation_x }}");
    }

    #[test]
    fn python_methods_tokens_and_exceptions() {
        let src = "{{ bos_token }}{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
                   {{ raise_exception('roles must be user or assistant') }}{% endif %}{{ m.content.strip() }}{{ eos_token }}{% endfor %}";
        let t = ChatTemplate::new(src, "<s>", "</s>", "m.gguf").unwrap();
        assert_eq!(t.render(&[Message::new("user", "  hi  ")], false).unwrap(), "<s>hi</s>");
        let e = t.render(&[Message::new("tool", "x")], false).unwrap_err().to_string();
        assert!(e.contains("m.gguf: chat template") && e.contains("roles must be user or assistant"), "{e}");
        let looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x";
        let e = ChatTemplate::new(looping, "", "", "loop.gguf").unwrap().render(&[], false).unwrap_err().to_string();
        assert!(e.contains("loop.gguf: chat template"), "{e}");
        let e = ChatTemplate::new("{% for %}", "", "", "bad.gguf").unwrap_err().to_string();
        assert!(e.contains("bad.gguf: chat template") && e.contains("syntax"), "{e}");
    }
}
