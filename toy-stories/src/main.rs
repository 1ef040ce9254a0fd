//! Print the default corpus (`data/default-corpus.txt`) to stdout; see
//! `scripts/gen-default-corpus.sh`.

use std::io::Write;

fn main() -> std::io::Result<()> {
    std::io::stdout().write_all(toy_stories::generate().as_bytes())
}
