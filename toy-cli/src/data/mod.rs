//! Training data: tokenizers, corpus readers, `toy prep`, the embedded default corpus.

pub mod corpus;
pub mod embedded;
pub mod stories;
pub mod text;
pub mod tokenizer;

pub use corpus::{load_corpus, Corpus, CorpusOptions};
pub use tokenizer::Tokenizer;
