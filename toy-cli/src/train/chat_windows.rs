//! The training windows of a chat corpus. A window is `T + 1` tokens (inputs
//! `t0..t(T−1)`, targets `t1..tT`) whose targets are −1 wherever the token is
//! not trained (prompts, system turns, padding): the loss (patch 0017)
//! neither counts nor averages over them.
//!
//! Without `--pack` each conversation is one window, cut to `T + 1` tokens
//! and padded after its end. With `--pack` conversations share windows,
//! separated by the model's EOS (not trained): they are placed best-fit
//! decreasing (TRL's `bfd` packing: longest first, each into the fullest
//! window it still fits), so windows are nearly full and no conversation is
//! split across two. The causal mask is shared, so a packed conversation can
//! attend to the ones before it in its window (as TRL's packing did before it
//! passed position ids).
//!
//! A run walks the windows in a fresh random order every epoch
//! ([`Sampler::next_windows`](super::batches::Sampler::next_windows)). A
//! step's loss is the mean over its batch's trained tokens; with several
//! devices each replica takes that mean over its own rows and the gradients
//! are averaged, which weighs every token alike only when the replicas count
//! as many.

use super::batches::Batch;
use crate::data::chat_examples::{ChatCorpus, Example};
use crate::data::chat_records::RecordKind;
use std::collections::BTreeSet;

/// What building the windows of a split did to its conversations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fit {
    /// Conversations in the split.
    pub conversations: usize,
    /// Those longer than a window (`T + 1` tokens), cut to it.
    pub truncated: usize,
    /// Those left out because the cut removed every trained token.
    pub dropped: usize,
    /// Windows built.
    pub windows: usize,
    /// Trained tokens (targets that count) over all windows.
    pub trained_tokens: usize,
    /// Input positions holding a token rather than padding, over all windows.
    pub filled: usize,
}

impl Fit {
    /// The note on what windows of `t` tokens (and the token after them) cut,
    /// when they cut any conversation: how many, of how many.
    pub fn note(&self, t: usize) -> Option<String> {
        let dropped = match self.dropped {
            0 => String::new(),
            n => format!("; {n} of them had no trained token left and {} left out", if n == 1 { "is" } else { "are" }),
        };
        (self.truncated > 0).then(|| {
            format!(
                "note: {} of {} conversations truncated to {} tokens (the window: a context of {t} and the token after it){dropped}",
                self.truncated,
                self.conversations,
                t + 1
            )
        })
    }
}

impl std::ops::Add for Fit {
    type Output = Fit;
    fn add(self, o: Fit) -> Fit {
        Fit {
            conversations: self.conversations + o.conversations,
            truncated: self.truncated + o.truncated,
            dropped: self.dropped + o.dropped,
            windows: self.windows + o.windows,
            trained_tokens: self.trained_tokens + o.trained_tokens,
            filled: self.filled + o.filled,
        }
    }
}

/// The windows of one split, `T` inputs and `T` targets each, as i32 for ggml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windows {
    t: usize,
    /// The id of padding inputs.
    pad: i32,
    /// `[T, n]`, window-major.
    tokens: Vec<i32>,
    /// `[T, n]`: the next token where it is trained, −1 elsewhere.
    targets: Vec<i32>,
}

/// Whether `ex` has a trained target within a window of `t` (its first
/// `t + 1` tokens): else [`Windows::build`] leaves it out.
pub fn trains_within(ex: &Example, t: usize) -> bool {
    ex.trained[..ex.ids.len().min(t + 1)].iter().skip(1).any(|&b| b)
}

impl Windows {
    /// The windows of context `t` over `examples`: one per example, or
    /// packed (`pack`) with `eos` between examples; `eos` (else 0) pads.
    pub fn build(examples: &[Example], t: usize, pack: bool, eos: Option<u32>) -> (Windows, Fit) {
        let mut fit = Fit { conversations: examples.len(), ..Default::default() };
        let mut kept: Vec<&[u32]> = Vec::new();
        let mut masks: Vec<&[bool]> = Vec::new();
        for ex in examples {
            let n = ex.ids.len().min(t + 1);
            fit.truncated += usize::from(ex.ids.len() > t + 1);
            if !trains_within(ex, t) {
                fit.dropped += 1;
                continue;
            }
            kept.push(&ex.ids[..n]);
            masks.push(&ex.trained[..n]);
        }
        let sep = if pack { eos } else { None };
        let groups = if pack {
            pack_bfd(&kept.iter().map(|k| k.len()).collect::<Vec<_>>(), t + 1, sep.is_some())
        } else {
            (0..kept.len()).map(|i| vec![i]).collect()
        };
        let pad = eos.unwrap_or(0) as i32;
        let mut w = Windows { t, pad, tokens: Vec::with_capacity(groups.len() * t), targets: Vec::with_capacity(groups.len() * t) };
        for g in &groups {
            let (mut ids, mut trained) = (Vec::with_capacity(t + 1), Vec::with_capacity(t + 1));
            for (k, &i) in g.iter().enumerate() {
                if let (Some(s), true) = (sep, k > 0) {
                    ids.push(s);
                    trained.push(false);
                }
                ids.extend_from_slice(kept[i]);
                trained.extend_from_slice(masks[i]);
            }
            fit.trained_tokens += w.push(&ids, &trained);
            fit.filled += ids.len().min(t);
        }
        fit.windows = groups.len();
        (w, fit)
    }

    /// Append the window of `ids` (at most `T + 1`), trained where `trained`
    /// says; the number of its counted targets.
    fn push(&mut self, ids: &[u32], trained: &[bool]) -> usize {
        let t = self.t;
        self.tokens.extend((0..t).map(|j| ids.get(j).map_or(self.pad, |&x| x as i32)));
        let target = |j: usize| if j + 1 < ids.len() && trained[j + 1] { ids[j + 1] as i32 } else { -1 };
        self.targets.extend((0..t).map(target));
        trained.iter().skip(1).filter(|&&b| b).count()
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.tokens.len() / self.t
    }

    /// No windows at all.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The batch of the windows `indices` (each `< len()`), in that order.
    pub fn batch(&self, indices: &[usize]) -> Batch {
        let t = self.t;
        let mut b = Batch { tokens: Vec::with_capacity(indices.len() * t), targets: Vec::with_capacity(indices.len() * t) };
        for &i in indices {
            b.tokens.extend_from_slice(&self.tokens[i * t..(i + 1) * t]);
            b.targets.extend_from_slice(&self.targets[i * t..(i + 1) * t]);
        }
        b
    }

    /// The first `max` windows in batches of `b`, the last filled up with
    /// windows that count nothing (padding, every target −1): the validation
    /// set, the same at every evaluation.
    pub fn batches(&self, b: usize, max: usize) -> Vec<Batch> {
        let n = self.len().min(max);
        (0..n)
            .step_by(b.max(1))
            .map(|start| {
                let mut bt = self.batch(&(start..(start + b).min(n)).collect::<Vec<_>>());
                bt.tokens.resize(b * self.t, self.pad);
                bt.targets.resize(b * self.t, -1);
                bt
            })
            .collect()
    }
}

/// A chat corpus's windows for a run of context `T`.
#[derive(Clone, Debug)]
pub struct ChatRun {
    pub train: Windows,
    pub val: Windows,
    /// Both splits together.
    pub fit: Fit,
    /// The training split's.
    pub train_fit: Fit,
    pub pack: bool,
    /// What the records are (`messages`, `sharegpt`, `prompt-completion`,
    /// `alpaca`; those of a folder that mixes them joined with " and "), for events.
    pub kind: String,
}

impl ChatRun {
    /// The windows of both splits of `c` for context `t`.
    pub fn new(c: &ChatCorpus, t: usize, pack: bool) -> ChatRun {
        let (train, f1) = Windows::build(&c.train, t, pack, c.eos);
        let (val, f2) = Windows::build(&c.val, t, pack, c.eos);
        let label = |k: &RecordKind| match k {
            RecordKind::PromptCompletion => "prompt-completion",
            RecordKind::Alpaca => "alpaca",
            RecordKind::ShareGpt => "sharegpt",
            _ => "messages",
        };
        let mut kind = c.kinds.iter().map(label).collect::<Vec<_>>().join(" and ");
        if kind.is_empty() {
            kind = "messages".into();
        }
        ChatRun { train, val, fit: f1 + f2, train_fit: f1, pack, kind }
    }

    /// What a run says on stderr when conversations were cut, never silently.
    pub fn note(&self) -> Option<String> {
        self.fit.note(self.train.t)
    }

    /// What a run says of its chat data as it starts: the split, the trained
    /// tokens, and the padding (with a hint at `--pack` when most of a window
    /// is padding: steps then cost mostly nothing).
    pub fn summary(&self) -> String {
        let (f, t) = (&self.fit, self.train.t);
        let padding = 1.0 - f.filled as f64 / (f.windows * t).max(1) as f64;
        let hint = if !self.pack && padding > 0.5 { "; --pack puts several conversations in a window" } else { "" };
        format!(
            "chat data: {} conversation{} ({} records): {} window{} of {t} tokens for training, {} held out for validation; {} trained tokens in the training windows, {} of the windows padding{hint}",
            f.conversations,
            if f.conversations == 1 { "" } else { "s" },
            self.kind,
            self.train.len(),
            if self.train.len() == 1 { "" } else { "s" },
            self.val.len(),
            self.train_fit.trained_tokens,
            // (not "100%" where a token is trained, nor "0%" where one is padding)
            match 100.0 * padding {
                p if p > 99.0 && p < 100.0 => ">99%".to_string(),
                p if p > 0.0 && p < 1.0 => "<1%".to_string(),
                p => format!("{p:.0}%"),
            }
        )
    }

    /// The `chat` object of `run_start`.
    pub fn event(&self) -> super::events::Chat {
        let f = &self.fit;
        super::events::Chat {
            records: self.kind.clone(),
            pack: self.pack,
            conversations: f.conversations,
            truncated: f.truncated,
            dropped: f.dropped,
            train_windows: self.train.len(),
            val_windows: self.val.len(),
            trained_tokens: self.train_fit.trained_tokens,
        }
    }
}

/// The conversation length (tokens) that sizes a default window of at most
/// `cap` tokens (`cap + 1` with the last one's next token), and how many of
/// `lens` are longer than that window holds: the longest that fits, when at
/// most one in ten is longer (those are cut in any case, and one outlier would
/// otherwise make every window mostly padding: one conversation of 23k tokens
/// among forty of 80 gave windows of 1024, 94% padding); else `cap + 1`.
/// A window sized by the result `n` holds `n - 1` inputs and their targets.
pub fn sizing_length(lens: &[usize], cap: usize) -> (usize, usize) {
    let over = lens.iter().filter(|&&n| n > cap + 1).count();
    let longest_fit = lens.iter().copied().filter(|&n| n <= cap + 1).max();
    match longest_fit {
        Some(n) if over * 10 <= lens.len() => (n, over),
        _ => (cap + 1, over),
    }
}

/// Best-fit decreasing: groups of the items of lengths `lens` whose lengths
/// (plus one separator between items when `sep`) sum to at most `cap`.
/// Items are taken longest first (ties in order); each goes into the group
/// with the least room that still holds it, or a new one. Every length is
/// at most `cap`.
pub fn pack_bfd(lens: &[usize], cap: usize, sep: bool) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut room: BTreeSet<(usize, usize)> = BTreeSet::new(); // (free tokens, group)
    for i in order {
        let need = lens[i] + usize::from(sep);
        match room.range((need, 0)..).next().copied() {
            Some((free, g)) => {
                room.remove(&(free, g));
                room.insert((free - need, g));
                groups[g].push(i);
            }
            None => {
                room.insert((cap - lens[i], groups.len()));
                groups.push(vec![i]);
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    /// One outlier in ten or fewer does not size the window; more, or none
    /// that fits, give the cap.
    #[test]
    fn outliers_do_not_size_the_window() {
        let mut lens = vec![80; 40];
        assert_eq!(sizing_length(&lens, 1024), (80, 0));
        lens.push(23_000);
        assert_eq!(sizing_length(&lens, 1024), (80, 1));
        lens.extend([5_000; 3]); // 4 of 44
        assert_eq!(sizing_length(&lens, 1024), (80, 4));
        lens.push(2_000); // 5 of 45
        assert_eq!(sizing_length(&lens, 1024), (1025, 5));
        assert_eq!(sizing_length(&[3_000], 1024), (1025, 1));
        assert_eq!(sizing_length(&[], 1024), (1025, 0));
    }

    use super::*;

    fn ex(ids: &[u32], trained: &[bool]) -> Example {
        Example { ids: ids.to_vec(), trained: trained.to_vec() }
    }

    #[test]
    fn one_conversation_per_window_padded_and_cut() {
        let a = ex(&[1, 2, 3, 4], &[false, false, true, true]);
        let long = ex(&[5, 6, 7, 8, 9, 10, 11], &[false, true, false, false, false, false, true]);
        let prompt_only_after_cut = ex(&[1, 1, 1, 1, 1, 1, 7], &[false, false, false, false, false, false, true]);
        let (w, fit) = Windows::build(&[a, long, prompt_only_after_cut], 4, false, Some(0));
        assert_eq!(fit, Fit { conversations: 3, truncated: 2, dropped: 1, windows: 2, trained_tokens: 3, filled: 8 });
        let b = w.batch(&[0, 1]);
        assert_eq!(b.tokens, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b.targets, [-1, 3, 4, -1, 6, -1, -1, -1]);
        let v = w.batches(3, 10);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].targets[8..], [-1; 4], "filled with windows that count nothing");
    }

    #[test]
    fn best_fit_decreasing() {
        // Capacity 10, separators: 6 → [0]; 5 does not fit beside it (6+1+5); 3 goes with 6 (6+1+3=10); 4 with 5.
        assert_eq!(pack_bfd(&[6, 5, 3, 4], 10, true), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(pack_bfd(&[2, 2, 2], 6, false), vec![vec![0, 1, 2]]);
    }
}
