//! A deterministic generator of short children's stories: the embedded default
//! corpus (`data/default-corpus.txt`) is its output, byte for byte.
//!
//! Each story picks a hero and a friend (people and animals, with their
//! pronouns), a place with three things to see there, an object, a food and a
//! plot. A plot is a list of beats; each beat offers a few alternative
//! sentences written as templates (`{H}`, `{h_he}`, `{obj}`, ... filled from
//! the story's picks), and `¶` starts a new paragraph. Openings and endings are
//! shared by all plots. The random stream is our own SplitMix64, so the text
//! never changes with a dependency's version.
//!
//! Regenerate the committed file with `scripts/gen-default-corpus.sh` (which
//! runs this crate's binary); a test of `toy-cli` checks that it is current.
//! A workspace crate of its own, not part of the `toy` binary: toy's tests use
//! it for corpora of any size.

mod plots;
mod words;

use toy::rng::SplitMix64;
use words::{Character, Place, CHARACTERS, COLORS, FOODS, LIKES, OBJECTS, PARENTS, PLACES, SIZES, TIMES, TRAITS};

/// Number of stories in the default corpus.
pub const N_STORIES: usize = 600;

/// Seed of the default corpus.
pub const SEED: u64 = 0x70_79_2D_72_73; // "toy-rs"

/// The line that separates two stories.
pub const SEPARATOR: &str = "<|endoftext|>";

/// The filled-in words of one story, looked up by template keys.
struct Cast {
    vars: Vec<(&'static str, String)>,
}

impl Cast {
    fn new(rng: &mut SplitMix64) -> Cast {
        let hero = *rng.pick(CHARACTERS);
        let mut friend = *rng.pick(CHARACTERS);
        while friend.name == hero.name {
            friend = *rng.pick(CHARACTERS);
        }
        let place: Place = *rng.pick(PLACES);
        let obj = *rng.pick(OBJECTS);
        let color = *rng.pick(COLORS);
        let mut vars = Vec::with_capacity(48);
        let mut person = |prefix: &'static [&'static str; 8], c: &Character, rng: &mut SplitMix64| {
            let (he, his, him) = if c.girl { ("she", "her", "her") } else { ("he", "his", "him") };
            vars.push((prefix[0], c.name.to_string()));
            vars.push((prefix[1], c.kind.to_string()));
            vars.push((prefix[2], he.to_string()));
            vars.push((prefix[3], capital(he)));
            vars.push((prefix[4], his.to_string()));
            vars.push((prefix[5], capital(his)));
            vars.push((prefix[6], him.to_string()));
            vars.push((prefix[7], rng.pick(TRAITS).to_string()));
        };
        person(&["H", "h_kind", "h_he", "h_He", "h_his", "h_His", "h_him", "h_adj"], &hero, rng);
        person(&["F", "f_kind", "f_he", "f_He", "f_his", "f_His", "f_him", "f_adj"], &friend, rng);
        let (thing1, thing2, thing3) = place.things;
        let parent = *rng.pick(PARENTS);
        let time = *rng.pick(TIMES);
        let food = *rng.pick(FOODS);
        vars.extend([
            ("place", place.name.to_string()),
            ("in_place", place.at.to_string()),
            ("In_place", capital(place.at)),
            ("thing1", thing1.to_string()),
            ("thing2", thing2.to_string()),
            ("thing3", thing3.to_string()),
            ("obj", format!("{color} {obj}")),
            ("a_obj", format!("{} {color} {obj}", if color.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" })),
            ("obj_n", obj.to_string()),
            ("food", food.0.to_string()),
            ("food_n", food.1.to_string()),
            ("parent", parent.to_string()),
            ("Parent", capital(parent)),
            ("time", time.to_string()),
            ("time_l", lower_first(time)),
            ("size", rng.pick(SIZES).to_string()),
            ("like", rng.pick(LIKES).to_string()),
        ]);
        Cast { vars }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.vars.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }

    /// `template` with every `{key}` replaced (unknown keys are kept as they are).
    fn fill(&self, template: &str) -> String {
        let mut out = String::with_capacity(template.len() + 32);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find('}').and_then(|close| self.get(&after[..close]).map(|v| (close, v))) {
                Some((close, v)) => {
                    out.push_str(v);
                    rest = &after[close + 1..];
                }
                None => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Render beats (each a list of alternatives) into paragraphs.
fn render(beats: &[&[&str]], cast: &Cast, rng: &mut SplitMix64, out: &mut Vec<String>) {
    for beat in beats {
        let t = *rng.pick(beat);
        if t == plots::PARA {
            if out.last().is_some_and(|p| !p.is_empty()) {
                out.push(String::new());
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        let s = cast.fill(t);
        if out.is_empty() {
            out.push(String::new());
        }
        let p = out.last_mut().expect("one paragraph exists");
        if !p.is_empty() {
            p.push(' ');
        }
        p.push_str(&s);
    }
}

/// One story (paragraphs joined by newlines, no trailing newline).
pub fn story(rng: &mut SplitMix64) -> String {
    let cast = Cast::new(rng);
    let plot = rng.pick(plots::PLOTS);
    let mut paras = Vec::new();
    render(plots::OPENING, &cast, rng, &mut paras);
    render(plot, &cast, rng, &mut paras);
    render(plots::ENDING, &cast, rng, &mut paras);
    paras.retain(|p| !p.is_empty());
    paras.join("\n")
}

/// `n` stories from `seed`, each followed by a `<|endoftext|>` line.
pub fn generate_with(seed: u64, n: usize) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut out = String::with_capacity(n * 700);
    for _ in 0..n {
        out.push_str(&story(&mut rng));
        out.push('\n');
        out.push_str(SEPARATOR);
        out.push('\n');
    }
    out
}

/// The default corpus: [`N_STORIES`] stories from [`SEED`].
pub fn generate() -> String {
    generate_with(SEED, N_STORIES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_use_known_keys() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..200 {
            let s = story(&mut rng);
            assert!(!s.contains('{') && !s.contains('}'), "unfilled template in {s:?}");
            assert!(!s.contains("  ") && !s.contains('¶'), "{s:?}");
        }
    }

    #[test]
    fn same_seed_same_text() {
        assert_eq!(generate_with(7, 20), generate_with(7, 20));
        assert_ne!(generate_with(7, 20), generate_with(8, 20));
    }
}
