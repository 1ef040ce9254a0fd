//! `toy generate`: sample text from a checkpoint.

use crate::cli::GenerateArgs;
use crate::data::text::encode_with_special;
use crate::data::Tokenizer;
use crate::error::{input, Result};
use crate::formats::checkpoint::open_checkpoint;
use crate::model::attention::Attention;
use crate::sample::{sample, Sampling};
use crate::train::backends_for;
use crate::train::decoder::Decoder;
use crate::train::step::{with_loaded, LoadFor};
use rand::SeedableRng;

/// Refuse to sample from logits that are not all finite (the model, or its
/// adapter, overflows): a token picked from them would be arbitrary.
fn finite_logits(logits: &[f32], position: usize, adapter: bool) -> Result<()> {
    match logits.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(crate::error::runtime(format!(
            "the logits at position {position} are not finite (token {i}: {}): the model{} overflows",
            logits[i],
            if adapter { " with its adapter" } else { "" }
        ))),
        None => Ok(()),
    }
}

/// What `toy generate` produced.
pub struct Generated {
    /// The prompt's ids, then the generated ones.
    pub ids: Vec<u32>,
    /// Their text, or with `--chat` the reply alone (no template, no end of turn).
    pub text: Option<String>,
    pub n_prompt: usize,
}

/// The prompt of `--chat`: the checkpoint's chat template over the
/// `--system` and user messages, opening the assistant's turn.
fn chat_prompt(
    ck: &crate::formats::checkpoint::Checkpoint,
    tok: &crate::data::tokenizer::Tokenizer,
    args: &GenerateArgs,
) -> Result<String> {
    use crate::data::chat::{ChatTemplate, Message};
    let template = ChatTemplate::from_gguf(&ck.file, tok)?
        .ok_or_else(|| input(format!("{} has no chat template (tokenizer.chat_template); use --prompt", ck.file.path().display())))?;
    let user = args.chat.as_deref().unwrap_or_default();
    if user.trim().is_empty() {
        return Err(input("--chat: the message is empty"));
    }
    let mut messages: Vec<Message> = args.system.iter().map(|s| Message::new("system", s)).collect();
    messages.push(Message::new("user", user));
    template.render(&messages, true)
}

/// Generate `args.n` tokens after the prompt.
pub fn run(args: &GenerateArgs) -> Result<Generated> {
    if args.system.is_some() && args.chat.is_none() {
        return Err(input("--system goes with --chat (a system message before the user's, through the chat template)"));
    }
    let ck = open_checkpoint(&crate::files::resolve_model(&args.model)?)?;
    let ck = match &args.lora {
        Some(l) => ck.with_lora(l)?,
        None => ck,
    };
    let prompt: Vec<u32> = match (&args.prompt_ids, &ck.tokenizer) {
        (None, Some(tok)) if args.chat.is_some() => encode_with_special(tok, &chat_prompt(&ck, tok, args)?)?,
        (Some(ids), _) => {
            // Ids apart by commas or spaces; an empty place between commas is a mistake, not nothing.
            if ids.contains(',') && ids.split(',').any(|s| s.trim().is_empty()) {
                return Err(input(format!("--prompt-ids {ids:?}: an empty place between commas")));
            }
            ids.split(|c: char| c.is_whitespace() || c == ',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u32>().map_err(|_| input(format!("--prompt-ids: {s:?} is not a token id"))))
                .collect::<Result<_>>()?
        }
        // In pieces: a prompt may be longer than the context, and megabytes tokenized whole took ~100 bytes a byte.
        (None, Some(tok)) => encode_with_special(tok, &args.prompt)?,
        (None, None) => return Err(input("the checkpoint has no tokenizer; give --prompt-ids")),
    };
    if prompt.is_empty() {
        return Err(input(match args.chat {
            Some(_) => "the chat template (tokenizer.chat_template) renders the message as nothing",
            None => "the prompt is empty",
        }));
    }
    // The model's BOS first where its GGUF asks for one (tokenizer.ggml.add_bos_token,
    // Llama 3's files) and the prompt (a chat template's bos_token) lacks it, as
    // llama.cpp's tokenizer adds it to a prompt; not before --prompt-ids.
    let bos = ck.tokenizer.as_ref().and_then(Tokenizer::bos_first).filter(|&b| args.prompt_ids.is_none() && prompt.first() != Some(&b));
    let bos_added = usize::from(bos.is_some());
    let prompt: Vec<u32> = bos.into_iter().chain(prompt).collect();
    if prompt.len() > ck.config.context {
        crate::note!(
            "note: the prompt has {} tokens; the model's context is {}: the first token sees the last {}, and as the window is full it restarts from its last {} (each later token sees {} to {}); the prompt's start, a chat template's system turn too, is cut",
            prompt.len(),
            ck.config.context,
            ck.config.context,
            (ck.config.context / 2).max(1),
            (ck.config.context / 2).max(1),
            ck.config.context
        );
    }
    if let Some(&bad) = prompt.iter().find(|&&i| i as usize >= ck.config.vocab) {
        return Err(input(format!("prompt id {bad} is outside the vocabulary of {}", ck.config.vocab)));
    }
    let sampling = if args.greedy {
        Sampling { temperature: 0.0, top_k: 0, top_p: 1.0 }
    } else {
        Sampling { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p }
    };
    if !(sampling.temperature >= 0.0 && sampling.temperature.is_finite()) {
        return Err(input(format!("--temperature {} must be finite and ≥ 0 (0: greedy)", sampling.temperature)));
    }
    if !(sampling.top_p > 0.0 && sampling.top_p <= 1.0) {
        return Err(input(format!("--top-p {} must be in (0, 1]", sampling.top_p)));
    }
    let t = ck.config.context.min(prompt.len().saturating_add(args.n)).max(1);
    let backends = backends_for(&args.on.device, args.on.threads, args.on.matmul_precision.ggml())?;
    let stream = !args.json && ck.tokenizer.is_some();
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let stop = if args.ignore_eot { Vec::new() } else { ck.tokenizer.as_ref().map(|t| t.end_of_generation(&ck.file)).unwrap_or_default() };
    let how = Decode { sampling: &sampling, stop: &stop, stream, chat: args.chat.is_some(), n: args.n };
    crate::output::release_notes(); // the checks are over: decoding starts
    let ids = with_loaded(&ck, &backends[0], (t, 1), Attention::default_for(&args.on.device), LoadFor::Decode, |w, consts| {
        let c = &ck.config;
        let mut cache = Decoder::new(c.n_layers, c.d_head() * c.n_kv_heads, t);
        let mut next = |ids: &[u32]| cache.next_logits(w, consts, &backends, ids);
        decode(&ck, &mut next, prompt.clone(), &how, &mut rng)
    })?;
    // The text, as printed: a chat's reply alone, without the rendered
    // prompt; otherwise the prompt and what follows; never the end token
    // (`ids` keeps it).
    let mut shown = if args.chat.is_some() { &ids[prompt.len()..] } else { &ids[bos_added..] };
    if let Some((_, kept)) = shown.split_last().filter(|(end, _)| ids.len() > prompt.len() && stop.contains(end)) {
        shown = kept;
    }
    let text = ck.tokenizer.as_ref().map(|t| t.decode(shown)).transpose()?;
    Ok(Generated { ids, text, n_prompt: prompt.len() })
}

/// How [`decode`] goes on: sampling, end-of-generation ids, printing.
struct Decode<'a> {
    sampling: &'a Sampling,
    stop: &'a [u32],
    /// Print as tokens come (text, not --json).
    stream: bool,
    /// A chat: print the reply alone; else the prompt too. The end token
    /// is never printed (llama.cpp prints no end-of-generation token).
    chat: bool,
    /// Tokens to generate at most.
    n: usize,
}

/// Continue `ids` token by token, `next` giving the logits that follow a
/// sequence (a [`Decoder`] over the model's window), up to `how.n` tokens or
/// an end-of-generation id; returns every id.
fn decode(
    ck: &crate::formats::checkpoint::Checkpoint,
    next: &mut dyn FnMut(&[u32]) -> Result<Vec<f32>>,
    mut ids: Vec<u32>,
    how: &Decode<'_>,
    rng: &mut rand::rngs::StdRng,
) -> Result<Vec<u32>> {
    // Nothing is printed before the first logits are known to be finite: the
    // prompt goes out with the first token.
    let mut printed = if how.chat { ids.len() } else { 0 };
    let say = |ids: &[u32]| ck.tokenizer.as_ref().map_or(Ok(String::new()), |tok| tok.decode(ids));
    for _ in 0..how.n {
        let logits = next(&ids)?;
        finite_logits(&logits, ids.len(), ck.adapter.is_some())?;
        let next = sample(&logits, how.sampling, rng) as u32;
        ids.push(next);
        let end = how.stop.contains(&next);
        if end {
            if how.stream {
                crate::say!("{}", say(&ids[printed..ids.len() - 1])?)?;
            }
            return Ok(ids);
        }
        if how.stream {
            // Print whole characters only: decode the tail since the last print.
            let piece = say(&ids[printed..])?;
            if !piece.ends_with('\u{FFFD}') {
                crate::output::write(format_args!("{piece}"))?;
                printed = ids.len();
            }
        }
    }
    if how.stream {
        crate::say!("{}", say(&ids[printed..])?)?;
    }
    Ok(ids)
}
