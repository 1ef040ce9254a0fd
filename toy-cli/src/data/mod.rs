//! Training data: tokenizers, raw text and documents, chat templates and
//! chat records, corpus readers, `toy prep`, the embedded default corpus.

pub mod bpe_train;
pub mod chat;
pub mod chat_examples;
pub mod chat_records;
pub mod corpus;
pub mod discover;
pub mod embedded;
pub mod prep;
pub mod prepared;
pub mod presplit;
pub mod sources;
pub mod text;
pub mod tokenizer;
pub mod tokens;

pub use corpus::{load_corpus, load_corpus_with, Corpus, CorpusOptions, TextOptions};
pub use tokenizer::Tokenizer;
pub use tokens::Tokens;
