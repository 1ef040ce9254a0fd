//! `toy prep`: train a byte-level BPE on text and write a prepared corpus
//! (see [`crate::data::prep`]).

use crate::cli::PrepArgs;
use crate::data::prep::{prep, Manifest, PrepOptions};
use crate::error::{input, Result};
use std::io::IsTerminal;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

/// Run `toy prep` with `args`. SIGINT and SIGTERM stop it within a second and
/// leave no partial output.
pub fn run(args: &PrepArgs) -> Result<Manifest> {
    let mb = args.bpe_sample;
    let shown = if mb.abs() >= 1e6 { format!("{mb:e}") } else { format!("{mb}") };
    if !(mb.is_finite() && mb > 0.0) {
        return Err(input(format!("--bpe-sample {shown} must be a positive number of MB")));
    }
    if mb > 1e9 {
        return Err(input(format!("--bpe-sample {shown}: at most 1e9 MB (1 PB)")));
    }
    crate::data::corpus::check_text_field(&args.files, args.text_field.as_deref())?;
    if let Some(f) = args.files.iter().find(|f| crate::data::corpus::reads_as_ids(f)) {
        crate::note!(
            "note: {} holds whole numbers only: toy prep tokenizes it as text, while toy train and eval read such a .txt as token ids",
            f.display()
        );
    }
    let stop = Arc::new(AtomicI32::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let flag = stop.clone();
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { signal_hook::low_level::register(sig, move || flag.store(sig, std::sync::atomic::Ordering::SeqCst)) };
    }
    let opts = PrepOptions {
        vocab_size: args.vocab_size,
        val_fraction: args.val_fraction,
        seed: args.seed,
        force: args.force,
        text_field: args.text_field.clone().unwrap_or_else(|| PrepOptions::default().text_field),
        bpe_sample_bytes: (args.bpe_sample * (1u64 << 20) as f64) as u64,
        stop: Some(stop),
        progress: std::io::stderr().is_terminal(),
    };
    let m = prep(&args.files, &args.out, &opts).map_err(|e| {
        crate::data::sources::chat_refused(
            e,
            "toy prep tokenizes text; chat data is rendered with a model's chat template when fine-tuning (toy train finetune --from MODEL.gguf --corpus FILE)",
        )
    })?;
    if m.vocab_size < args.vocab_size {
        // The sample is drawn by documents: it is the whole text only when the
        // input files hold little more (separators, newlines; compressed files less).
        let input: u64 = m.source_files.iter().map(|f| f.bytes).sum();
        let bytes = |b: u64| if b == 1 { "1 byte".to_string() } else { format!("{b} bytes") };
        let why = match m.bpe_sample_bytes {
            Some(b) if b < opts.bpe_sample_bytes && b * 10 >= input * 9 => format!("the text ({}) has too few repeated pairs", bytes(b)),
            Some(b) => format!("its sample of {} has too few repeated pairs (a larger --bpe-sample may help)", bytes(b)),
            None => "the text has too few repeated pairs".to_string(),
        };
        crate::note!(
            "note: the BPE has {} ids, fewer than the {} asked for (--vocab-size, default {}): {why}",
            m.vocab_size,
            args.vocab_size,
            crate::data::tokenizer::DEFAULT_VOCAB_SIZE
        );
    }
    Ok(m)
}
