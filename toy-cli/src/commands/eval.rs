//! `toy eval`: loss and perplexity of a checkpoint on a corpus: text, token
//! ids, or chat data (JSON Lines conversations and prompt-completion pairs),
//! which is scored on the tokens `toy train finetune` trains — the
//! assistant's — and on no other.

use crate::cli::{EvalArgs, Split};
use crate::data::chat_examples::{load_chat, ChatCorpus, ChatModel};
use crate::data::chat_records::{read_chat, DataFormat};
use crate::data::prepared::is_prepared;
use crate::data::Tokenizer;
use crate::data::{load_corpus_with, CorpusOptions, TextOptions};
use crate::error::{input, runtime, Result};
use crate::files::resolve_model;
use crate::formats::checkpoint::{open_checkpoint, Checkpoint};
use crate::model::attention::Attention;
use crate::train::backends_for;
use crate::train::batches::{batch_at, eval_starts};
use crate::train::chat_windows::{trains_within, ChatRun, Fit};
use crate::train::step::{capacity, with_loaded, EvalStep, LoadFor};
use ggml_rs::Context;

/// Loss and perplexity.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalResult {
    /// Mean cross-entropy per token (nats).
    pub loss: f64,
    pub perplexity: f64,
    /// Predicted tokens.
    pub tokens: usize,
    /// Tokens per window (`--context`, or the longest the text fills).
    pub context: usize,
    /// UTF-8 bytes of text the scored tokens stand for (each window's
    /// targets), when the corpus is text or a prepared folder.
    pub bytes: Option<usize>,
    /// Bits per byte (loss in bits over those bytes), when known.
    pub bits_per_byte: Option<f64>,
    /// Chat data: what fitting its conversations into windows did; `tokens`
    /// then counts the assistant tokens scored.
    pub chat: Option<Fit>,
}

fn no_tokenizer(path: &std::path::Path, why: &str) -> crate::error::Error {
    input(format!(
        "the model carries no tokenizer (tokenizer.ggml.*) and {} {why}; give token ids of its vocabulary (.bin, .txt of ids) or a corpus prepared with the tokenizer it was trained with",
        path.display()
    ))
}

/// The ids of the whole corpus of `args` for the model `ck` (a prepared
/// folder's splits one after the other, or the one `--split` names), and
/// when the corpus is text the bytes each id stands for
/// ([`Tokenizer::byte_lengths`](crate::data::tokenizer::Tokenizer::byte_lengths)).
fn corpus_ids(ck: &Checkpoint, args: &EvalArgs) -> Result<(crate::data::Tokens, Option<Vec<u32>>)> {
    let path = &args.corpus;
    if !path.exists() {
        return Err(input(format!("corpus {} does not exist", path.display())));
    }
    // Text is read as training reads it (documents, end-of-text tokens), with the
    // checkpoint's tokenizer; id files and prepared folders as they are.
    // A model without its tokenizer takes token ids only: text tokenized any other
    // way (a BPE trained on it) means other tokens to the model. The byte tokenizer
    // stands in so that text is recognized without training one, then refused.
    let tokenizer = ck.tokenizer.clone().or(Some(Tokenizer::Bytes));
    crate::data::corpus::check_text_field(std::slice::from_ref(path), args.text_field.as_deref())?;
    let text_field = args.text_field.clone().unwrap_or_else(|| TextOptions::default().text_field);
    let text = TextOptions { tokenizer, text_field, ..Default::default() };
    let opts = CorpusOptions { val_fraction: held_out(args.split), vocab_size: Some(ck.config.vocab) };
    // A prepared folder's validation split alone: train.bin is not read. With
    // --max-windows over the whole text, only the documents its windows reach
    // are tokenized (the windows start at its first token).
    let prefix = match (args.split, args.max_windows) {
        (Split::All, Some(n)) => {
            let t = args.context.unwrap_or(ck.config.context);
            crate::data::corpus::load_text_prefix(path, &text, n.saturating_mul(t).saturating_add(1))?
        }
        _ => None,
    };
    let c = match (prefix, args.split) {
        (Some(c), _) => c,
        (None, Split::Val) if is_prepared(path) => crate::data::prep::read_prepared_val(path)?,
        (None, _) => load_corpus_with(path, &opts, &text)?,
    };
    // A split of a prepared folder given as its file (`p/val.bin`): bare ids, but the folder's
    // tokenizer's, checked against the model's as the folder's would be.
    let split_of = path.parent().filter(|d| c.tokenizer.is_none() && path.is_file() && is_prepared(d));
    let c = match split_of {
        Some(dir) => crate::data::Corpus { tokenizer: Some(Tokenizer::load(&dir.join("tokenizer.json"))?), source: path.clone(), ..c },
        None => c,
    };
    match (&ck.tokenizer, &c.tokenizer) {
        (Some(ours), _) => c.check_tokenizer(ours, crate::data::corpus::GIVE_RAW_TEXT)?,
        (None, Some(_)) if !is_prepared(path) && split_of.is_none() => return Err(no_tokenizer(path, "is text")),
        (None, Some(_)) if c.vocab_size != ck.config.vocab => {
            return Err(no_tokenizer(path, &format!("was prepared with {} ids, the model has {}", c.vocab_size, ck.config.vocab)))
        }
        (None, _) => {}
    }
    // Bits per byte: the bytes of text each id stands for (text, and a
    // prepared folder, come with their tokenizer; bare ids do not).
    let byte_lengths = c.tokenizer.as_ref().map(|t| t.byte_lengths());
    // The whole corpus (a prepared folder's splits one after the other), or the split asked for.
    let ids: crate::data::Tokens = match args.split {
        Split::All if c.val.is_empty() => c.train,
        Split::All => [c.train.to_vec()?, c.val.to_vec()?].concat().into(),
        Split::Train => c.train,
        Split::Val if c.val.is_empty() && is_prepared(path) => {
            return Err(input(format!("--split val: {} has no validation split", path.display())))
        }
        Split::Val if c.val.is_empty() => return Err(input(format!("--split val: {} is too short to hold any of it out", path.display()))),
        Split::Val => c.val,
    };
    for at in (0..ids.len()).step_by(1 << 20) {
        let window = ids.window(at, (1 << 20).min(ids.len() - at))?;
        if let Some((i, bad)) = window.iter().enumerate().find(|&(_, &x)| x as usize >= ck.config.vocab) {
            return Err(input(format!(
                "{}: id {bad} at position {} is outside the model's vocabulary of {}",
                path.display(),
                at + i,
                ck.config.vocab
            )));
        }
    }
    Ok((ids, byte_lengths))
}

/// A progress bar of `n` windows on a terminal's stderr, unless `show` is
/// false or stderr is not a terminal (scripts read one line of result).
fn progress(show: bool, n: usize) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    (show && n > 1 && std::io::stderr().is_terminal())
        .then(|| crate::output::progress_bar(n as u64, "eval {bar:30} {pos}/{len} windows [{elapsed_precise} < {eta_precise}]"))
}

/// The failure of a loss that is not finite on `place`.
fn overflow(ck: &Checkpoint, l: f32, place: &str) -> crate::error::Error {
    let adapter = if ck.adapter.is_some() { " with its adapter" } else { "" };
    runtime(format!("the loss is not finite ({l}) on {place}: the model{adapter} overflows on this corpus"))
}

/// `--batch`, `--context` and `--split` against the model `ck` and the corpus.
fn check_args(args: &EvalArgs, ck: &Checkpoint) -> Result<()> {
    match (args.batch, args.context) {
        (0, _) => return Err(input("--batch must be at least 1")),
        (_, Some(0)) => return Err(input("--context must be at least 1")),
        (_, Some(c)) if c > ck.config.context => {
            return Err(input(format!("--context {c} is longer than the model's context {}", ck.config.context)))
        }
        _ => {}
    }
    Ok(())
}

/// The fraction of a corpus that `--split` holds out: none for `all` (the
/// whole corpus is scored), else the training recipes' own
/// ([`CorpusOptions::default`], the same seed), so that `--split val` scores
/// the documents, lines or conversations a run held out of the same text. A
/// prepared folder keeps its own split.
fn held_out(split: Split) -> f64 {
    match split {
        Split::All => 0.0,
        Split::Train | Split::Val => CorpusOptions::default().val_fraction,
    }
}

/// Evaluate `args.model` on `args.corpus`.
///
/// A model without tokenizer keys is evaluated on token ids only (an id file,
/// or a prepared folder of the model's vocabulary size): its loss on text
/// tokenized any other way would mean nothing. Chat data is read as
/// finetune reads it (`--data-format`) and scored on the assistant's tokens
/// (`eval_chat`). A loss that is not finite is a failure
/// ([`Error::Runtime`](crate::error::Error::Runtime)), not a result.
pub fn run(args: &EvalArgs) -> Result<EvalResult> {
    crate::error::set_oom_advice("use a smaller --batch or --context");
    // --max-windows 0: every window, as `toy train --eval-windows 0`
    let args = &EvalArgs { max_windows: args.max_windows.filter(|&n| n > 0), ..args.clone() };
    let ck = open_checkpoint(&resolve_model(&args.model)?)?;
    let ck = match &args.lora {
        Some(l) => ck.with_lora(l)?,
        None => ck,
    };
    check_args(args, &ck)?;
    if let Some(chat) = chat_corpus(&ck, args)? {
        return eval_chat(&ck, args, &chat);
    }
    let path = &args.corpus;
    let (ids, byte_lengths) = corpus_ids(&ck, args)?;
    // Default: the longest window the text fills (one window plus its shifted
    // target), capped by the model's context.
    let t = args.context.unwrap_or_else(|| ck.config.context.min(ids.len().saturating_sub(1)).max(1));
    let starts = eval_starts(ids.len(), t, args.max_windows.unwrap_or(usize::MAX));
    if starts.is_empty() {
        let hint = if args.context.is_some_and(|c| c > 1) { " (try a smaller --context)" } else { "" };
        let n = if ids.len() == 1 { "token" } else { "tokens" };
        return Err(input(format!("{} has {} {n}, fewer than one window of {} and its next token{hint}", path.display(), ids.len(), t)));
    }
    let b = args.batch.clamp(1, starts.len());
    let backends = backends_for(&args.on.device, args.on.threads, args.on.matmul_precision.ggml())?;
    // The loss, and the bytes of text the scored targets stand for.
    let (loss, scored_bytes) =
        with_loaded(&ck, &backends[0], (t, b), Attention::default_for(&args.on.device), LoadFor::Inference, |w, consts| {
            let ctx = Context::new(capacity(ck.config.n_layers))?;
            let rctx = Context::new(capacity(ck.config.n_layers))?;
            let mut full = EvalStep::new(&ctx, w, consts, t, b, &backends)?;
            let rest = starts.len() % b;
            let mut tail = if rest > 0 { Some(EvalStep::new(&rctx, w, consts, t, rest, &backends)?) } else { None };
            let (mut sum, mut bytes) = (0f64, 0usize);
            crate::output::release_notes(); // the checks are over: scoring starts
            let pb = progress(!args.json, starts.len());
            for chunk in starts.chunks(b) {
                let bt = batch_at(&ids, chunk, t)?;
                if let Some(lens) = &byte_lengths {
                    bytes += bt.targets.iter().map(|&id| lens.get(id as usize).copied().unwrap_or(0) as usize).sum::<usize>();
                }
                let step = if chunk.len() == b { &mut full } else { tail.as_mut().expect("tail graph") };
                let l = step.loss(&bt.tokens, &bt.targets)?;
                if !l.is_finite() {
                    return Err(overflow(&ck, l, &format!("the window at token {}", chunk[0])));
                }
                sum += l as f64 * chunk.len() as f64;
                if let Some(pb) = &pb {
                    pb.inc(chunk.len() as u64);
                }
            }
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            Ok((sum / starts.len() as f64, bytes))
        })?;
    if !loss.exp().is_finite() {
        return Err(runtime(format!("the perplexity is not finite: exp of the loss {loss:.4} overflows")));
    }
    let tokens = starts.len() * t;
    let bytes = byte_lengths.is_some().then_some(scored_bytes);
    Ok(EvalResult {
        loss,
        perplexity: loss.exp(),
        tokens,
        context: t,
        bytes,
        bits_per_byte: bytes.map(|b| loss * tokens as f64 / std::f64::consts::LN_2 / b.max(1) as f64),
        chat: None,
    })
}

/// The chat data at `args.corpus` (`--data-format`) rendered and masked for
/// `ck` as finetune does it (all of it, none held out); `None` when the
/// corpus is text or token ids.
fn chat_corpus(ck: &Checkpoint, args: &EvalArgs) -> Result<Option<ChatCorpus>> {
    let path = &args.corpus;
    if !path.exists() {
        return Err(input(format!("corpus {} does not exist", path.display())));
    }
    let format = args.data_format.unwrap_or_default();
    let chat = match &ck.tokenizer {
        Some(tok) => load_chat(path, format, &ChatModel { file: &ck.file, tok }, held_out(args.split), TextOptions::default().seed)?,
        None if read_chat(path, format)?.is_some() => {
            return Err(input(format!(
                "{} holds chat records, but the model carries no tokenizer (tokenizer.ggml.*) to render them with",
                path.display()
            )))
        }
        None => None,
    };
    // eval_chat scores `train`: the split asked for.
    let chat = match (chat, args.split) {
        (Some(c), Split::Val) if c.val.is_empty() => {
            return Err(input(format!("--split val: {} has too few conversations to hold any out", path.display())))
        }
        (Some(c), Split::Val) => Some(ChatCorpus { train: c.val, val: Vec::new(), ..c }),
        (Some(c), _) => Some(ChatCorpus { val: Vec::new(), ..c }),
        (None, _) => None,
    };
    match &chat {
        Some(_) if args.text_field.is_some() => {
            Err(input(format!("--text-field applies to text records; {} holds chat records", path.display())))
        }
        None if format == DataFormat::Chat => {
            Err(input(format!("--data-format chat: {} is text; give --corpus with chat records (JSON Lines)", path.display())))
        }
        _ => Ok(chat),
    }
}

/// Evaluate `ck` on the conversations of `chat`, each in a window of its
/// own as finetune's unpacked windows (`train::chat_windows`): the mean loss
/// over their trained tokens (the assistant's and its end of turn), the
/// other targets masked. The default window is the longest conversation's,
/// at most the model's context; longer ones are cut, and said so on stderr.
/// `--batch` and `--context` are checked by [`run`].
fn eval_chat(ck: &Checkpoint, args: &EvalArgs, chat: &ChatCorpus) -> Result<EvalResult> {
    let path = &args.corpus;
    let ctx = ck.config.context;
    // The windows, by group: all of them at --context, or without it each
    // conversation among those of about its length (lengths up to the same
    // power of two, each group's window its longest's, at most the model's
    // context), so that one long conversation does not make every window long.
    let groups: Vec<(usize, ChatCorpus)> = match args.context {
        // (--max-windows N: the conversations up to the Nth that has a window, as a run's validation
        // takes its first windows; so every count describes what is scored)
        Some(t) => {
            let (mut left, mut n) = (args.max_windows.unwrap_or(usize::MAX), 0);
            while n < chat.train.len() && left > 0 {
                left -= usize::from(trains_within(&chat.train[n], t));
                n += 1;
            }
            vec![(t, ChatCorpus { train: chat.train[..n].to_vec(), ..chat.clone() })]
        }
        None => length_groups(chat, ctx, args.max_windows.unwrap_or(usize::MAX)),
    };
    let mut runs: Vec<(usize, ChatRun)> = groups.iter().map(|(t, c)| (*t, ChatRun::new(c, *t, false))).collect();
    let t_max = runs.iter().map(|r| r.0).max().unwrap_or(ctx);
    // What the windows did to the conversations: said, and counted, of every group.
    let fit = runs.iter().fold(Fit::default(), |f, (_, r)| f + r.fit);
    // One note of the whole file's counts: only windows at the model's context
    // (or --context) cut, so the longest window that cut is the one to name.
    let note = runs.iter().filter(|(_, r)| r.fit.truncated > 0).map(|(t, _)| *t).max().and_then(|t| fit.note(t));
    runs.retain(|(_, r)| !r.train.is_empty());
    if runs.is_empty() {
        let t = t_max;
        let hint = if t >= ctx {
            format!("the model's context, {ctx}, is the largest window: shorten what precedes the answers")
        } else {
            format!("try a larger --context, up to the model's {ctx}")
        };
        return Err(input(format!(
            "{}: no conversation has an assistant token within its first {} tokens (a window of {t} and its next token; {hint})",
            path.display(),
            t + 1
        )));
    }
    if let Some(note) = note {
        crate::note!("{note}");
    }
    let mut left = args.max_windows.unwrap_or(usize::MAX);
    let (mut sum, mut scored, mut windows) = (0f64, 0usize, 0usize);
    let backends = backends_for(&args.on.device, args.on.threads, args.on.matmul_precision.ggml())?;
    for (t, run) in &runs {
        let n = run.train.len().min(left);
        if n == 0 {
            break;
        }
        let b = args.batch.clamp(1, n);
        let (s, k) = score_windows(ck, args, &backends, *t, b, &run.train.batches(b, n))?;
        (sum, scored, windows, left) = (sum + s, scored + k, windows + n, left - n);
    }
    let loss = sum / scored.max(1) as f64;
    if !loss.exp().is_finite() {
        return Err(runtime(format!("the perplexity is not finite: exp of the loss {loss:.4} overflows")));
    }
    let t = runs.iter().map(|r| r.0).max().unwrap_or(t_max);
    let fit = Fit { windows, trained_tokens: scored, ..fit };
    Ok(EvalResult { loss, perplexity: loss.exp(), tokens: scored, context: t, bytes: None, bits_per_byte: None, chat: Some(fit) })
}

/// The first `max` conversations of `chat` grouped by length: those of
/// `L` tokens with `L - 1` up to the same power of two together, each group
/// with the window of its longest (`L - 1` inputs, at most `ctx`), shortest
/// groups first, file order within a group.
fn length_groups(chat: &ChatCorpus, ctx: usize, max: usize) -> Vec<(usize, ChatCorpus)> {
    let mut groups: std::collections::BTreeMap<usize, Vec<crate::data::chat_examples::Example>> = Default::default();
    for e in chat.train.iter().take(max) {
        let key = e.ids.len().saturating_sub(1).max(1).next_power_of_two().min(ctx);
        groups.entry(key).or_default().push(e.clone());
    }
    groups
        .into_values()
        .map(|train| {
            let t = train.iter().map(|e| e.ids.len().saturating_sub(1)).max().unwrap_or(1).clamp(1, ctx);
            (t, ChatCorpus { train, val: Vec::new(), ..chat.clone() })
        })
        .collect()
}

/// The summed loss (each batch's mean weighed by its counted targets) and the
/// count of counted targets of `batches`, windows of `t`, `b` a batch.
fn score_windows(
    ck: &Checkpoint,
    args: &EvalArgs,
    backends: &[ggml_rs::Backend],
    t: usize,
    b: usize,
    batches: &[crate::train::batches::Batch],
) -> Result<(f64, usize)> {
    let path = &args.corpus;
    let vocab = ck.config.vocab;
    if let Some(&id) = batches.iter().flat_map(|bt| bt.tokens.iter().chain(&bt.targets)).find(|&&x| x >= 0 && x as usize >= vocab) {
        return Err(input(format!("{}: the tokenizer gives id {id}, outside the model's vocabulary of {vocab}", path.display())));
    }
    with_loaded(ck, &backends[0], (t, b), Attention::default_for(&args.on.device), LoadFor::Inference, |w, consts| {
        let ctx = Context::new(capacity(ck.config.n_layers))?;
        let mut step = EvalStep::new(&ctx, w, consts, t, b, backends)?;
        let (mut sum, mut scored) = (0f64, 0usize);
        crate::output::release_notes(); // the checks are over: scoring starts
        let pb = progress(!args.json, batches.len());
        for (i, bt) in batches.iter().enumerate() {
            let l = step.loss(&bt.tokens, &bt.targets)?;
            if !l.is_finite() {
                return Err(overflow(ck, l, &format!("the batch of conversation windows {}..", i * b + 1)));
            }
            // The loss is the mean over the batch's counted targets: weigh it by their count.
            let k = bt.targets.iter().filter(|&&y| y >= 0).count();
            (sum, scored) = (sum + l as f64 * k as f64, scored + k);
            if let Some(pb) = &pb {
                pb.inc(1);
            }
        }
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        Ok((sum, scored))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::chat_examples::Example;

    fn corpus(lens: &[usize]) -> ChatCorpus {
        let ex = |n: usize| Example { ids: vec![1; n], trained: vec![true; n] };
        ChatCorpus { train: lens.iter().map(|&n| ex(n)).collect(), ..Default::default() }
    }

    /// Conversations are scored in windows of about their own length: one of
    /// 2451 tokens among short ones gets its own (it made every window 2450).
    #[test]
    fn conversations_are_grouped_by_length() {
        let c = corpus(&[40, 41, 2451, 38, 70]);
        let g: Vec<(usize, Vec<usize>)> =
            length_groups(&c, 8192, usize::MAX).into_iter().map(|(t, c)| (t, c.train.iter().map(|e| e.ids.len()).collect())).collect();
        assert_eq!(g, vec![(40, vec![40, 41, 38]), (69, vec![70]), (2450, vec![2451])]);
        // The model's context caps a window; --max-windows takes the first conversations.
        let g = length_groups(&c, 1024, 3);
        assert_eq!(g.iter().map(|(t, c)| (*t, c.train.len())).collect::<Vec<_>>(), vec![(40, 2), (1024, 1)]);
    }
}
