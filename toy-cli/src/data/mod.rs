//! Training data: tokenizers, corpus readers, `toy prep`, the embedded default corpus.

pub mod corpus;
pub mod embedded;
pub mod prep;
pub mod stories;
pub mod text;
pub mod tokenizer;

pub use corpus::{load_corpus, load_corpus_with, Corpus, CorpusOptions, TextOptions};
pub use tokenizer::Tokenizer;
