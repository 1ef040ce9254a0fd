//! The data layer: `toy prep`, corpus readers, the tokenizer's GGUF round trip,
//! the embedded corpus and `toy new`, called as library functions.

use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use toy::data::prep::{prep, read_manifest, PrepOptions};
use toy::data::text::split_documents;
use toy::data::{embedded, load_corpus, load_corpus_with, CorpusOptions, TextOptions, Tokenizer};
use toy::error::Error;
use toy_stories as stories;

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` generated stories written to `dir/name`.
fn fixture(dir: &Path, name: &str, n: usize) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, stories::generate_with(11, n)).unwrap();
    p
}

fn opts(vocab_size: usize) -> PrepOptions {
    PrepOptions { vocab_size, val_fraction: 0.1, seed: 0, force: false, ..PrepOptions::default() }
}

/// The error message of an input error (exit code 2); panics on anything else.
fn input_err<T: std::fmt::Debug>(r: toy::error::Result<T>) -> String {
    match r {
        Err(e @ Error::Input(_)) => {
            assert_eq!(e.exit_code(), 2);
            e.to_string()
        }
        other => panic!("expected an input error, got {other:?}"),
    }
}

fn ids_le(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

#[test]
fn prep_writes_a_consistent_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture(tmp.path(), "stories.txt", 60);
    let out = tmp.path().join("prep");
    let m = prep(std::slice::from_ref(&src), &out, &opts(400)).unwrap();

    assert_eq!(m.format, "toy/prep-v1");
    assert_eq!(m.dtype, "u32");
    assert_eq!((m.n_documents, m.val_documents), (60, 6));
    assert!(m.vocab_size > 257 && m.vocab_size <= 400, "{}", m.vocab_size);
    let text = std::fs::read(&src).unwrap();
    assert_eq!(m.source_files.len(), 1);
    assert_eq!((m.source_files[0].bytes, m.source_files[0].sha256.clone()), (text.len() as u64, sha(&text)));
    assert_eq!(m.tokenizer_sha256, sha(&std::fs::read(out.join("tokenizer.json")).unwrap()));
    assert_eq!(std::fs::metadata(out.join("train.bin")).unwrap().len(), 4 * m.train_tokens);
    assert_eq!(std::fs::metadata(out.join("val.bin")).unwrap().len(), 4 * m.val_tokens);
    assert_eq!(read_manifest(&out).unwrap(), m);

    // Read back: every document decodes to its text and ends with <|endoftext|>.
    let c = load_corpus(&out, &CorpusOptions::default()).unwrap();
    let tok = c.tokenizer.clone().unwrap();
    let eot = tok.eot().unwrap();
    assert_eq!(Some(eot), m.eot_id);
    assert_eq!((c.train.len() as u64, c.val.len() as u64, c.vocab_size), (m.train_tokens, m.val_tokens, m.vocab_size));
    let text = String::from_utf8(text).unwrap();
    let docs = split_documents(&text);
    let mut seen = Vec::new();
    for stream in [c.train.to_vec().unwrap(), c.val.to_vec().unwrap()] {
        assert_eq!(stream.last(), Some(&eot));
        for d in stream.split(|&i| i == eot).filter(|d| !d.is_empty()) {
            seen.push(tok.decode(d).unwrap());
        }
    }
    assert_eq!(seen.len(), 60);
    seen.sort();
    let mut want: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    want.sort();
    assert_eq!(seen, want);
    // The whole stream is what encoding the documents gives.
    let total: usize = docs.iter().map(|d| tok.encode(d).unwrap().len() + 1).sum();
    assert_eq!(total as u64, m.train_tokens + m.val_tokens);
}

#[test]
fn prep_is_deterministic_and_seeded() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture(tmp.path(), "s.txt", 40);
    let read = |d: &Path| ["tokenizer.json", "train.bin", "val.bin", "manifest.json"].map(|f| std::fs::read(d.join(f)).unwrap());
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    prep(std::slice::from_ref(&src), &a, &opts(350)).unwrap();
    prep(std::slice::from_ref(&src), &b, &opts(350)).unwrap();
    assert_eq!(read(&a), read(&b));
    let c = tmp.path().join("c");
    prep(&[src], &c, &PrepOptions { seed: 9, ..opts(350) }).unwrap();
    assert_eq!(read(&a)[0], read(&c)[0], "the tokenizer does not depend on the seed");
    assert_ne!(read(&a)[2], read(&c)[2], "another seed holds out other documents");
}

#[test]
fn prep_refuses_bad_input_and_output() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let good = fixture(t, "good.txt", 5);
    let e = input_err(prep(&[t.join("missing.txt")], &t.join("o1"), &opts(300)));
    assert!(e.contains("missing.txt") && e.contains("does not exist"), "{e}");

    let bad = t.join("latin1.txt");
    std::fs::write(&bad, b"Once upon a time, caf\xe9.\n").unwrap();
    let e = input_err(prep(&[good.clone(), bad], &t.join("o2"), &opts(300)));
    assert!(e.contains("latin1.txt:1") && e.contains("column 22"), "{e}");

    let empty = t.join("empty.txt");
    std::fs::write(&empty, "\n<|endoftext|>\n  \n").unwrap();
    let e = input_err(prep(&[empty], &t.join("o3"), &opts(300)));
    assert!(e.contains("empty.txt") && e.contains("no text"), "{e}");

    let e = input_err(prep(std::slice::from_ref(&good), &t.join("o4"), &opts(100)));
    assert!(e.contains("--vocab-size 100"), "{e}");
    let e = input_err(prep(std::slice::from_ref(&good), &t.join("o5"), &PrepOptions { val_fraction: 1.0, ..opts(300) }));
    assert!(e.contains("--val-fraction"), "{e}");

    // A path below a regular file cannot be created, whoever runs the test.
    let e = input_err(prep(std::slice::from_ref(&good), &good.join("sub"), &opts(300)));
    assert!(e.contains("good.txt is not a folder"), "{e}");

    let full = t.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "x").unwrap();
    let e = input_err(prep(std::slice::from_ref(&good), &full, &opts(300)));
    assert!(e.contains("not empty") && e.contains("--force"), "{e}");
    prep(&[good], &full, &PrepOptions { force: true, ..opts(300) }).unwrap();
    assert!(full.join("keep.txt").exists() && full.join("manifest.json").exists());
}

#[test]
fn tokenizer_survives_a_gguf_round_trip() {
    let text = stories::generate_with(5, 40);
    let tok = Tokenizer::train_bpe(split_documents(&text).into_iter(), 500).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tok.gguf");
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    tok.write_gguf(&mut g).unwrap();
    g.write(&path).unwrap();

    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "gpt-2");
    let Some(Value::Array(Array::String(tokens))) = f.get("tokenizer.ggml.tokens") else { panic!("tokens") };
    assert_eq!(tokens.len(), tok.vocab_size());
    assert_eq!(tokens[0], "<|endoftext|>");
    assert!(tokens.iter().any(|t| t == "Ġthe"), "GPT-2 byte-to-unicode form");
    let Some(Value::Array(Array::String(merges))) = f.get("tokenizer.ggml.merges") else { panic!("merges") };
    assert_eq!(merges.len(), tok.vocab_size() - 257);
    assert!(merges.iter().all(|m| m.split(' ').count() == 2));
    let Some(Value::Array(Array::I32(types))) = f.get("tokenizer.ggml.token_type") else { panic!("token_type") };
    assert_eq!((types[0], types[1..].iter().all(|&t| t == 1)), (3, true));
    assert_eq!(f.get("tokenizer.ggml.eos_token_id"), Some(&Value::U32(0)));
    assert_eq!(f.get("tokenizer.ggml.bos_token_id"), Some(&Value::U32(0)));
    assert_eq!(f.get("tokenizer.ggml.add_bos_token"), Some(&Value::Bool(false)));

    let back = Tokenizer::read_gguf(&f).unwrap().unwrap();
    let probe = format!("{}\n<|endoftext|>Zebras café 123 naïve!  \t\n", &text[..2000]);
    assert_eq!(back.encode(&probe).unwrap(), tok.encode(&probe).unwrap());
    assert_eq!(back.eot(), tok.eot());
    assert_eq!(back.sha256(), tok.sha256(), "the rebuilt tokenizer.json is byte-identical");
    let ids = tok.encode(&probe).unwrap();
    assert_eq!(back.decode(&ids).unwrap(), probe);
}

#[test]
fn generation_ends_at_every_end_of_generation_token() {
    // A GGUF declaring eos and eot ids, with a chat template's <|im_end|> control token.
    let text = stories::generate_with(3, 30);
    let tok = Tokenizer::train_bpe(split_documents(&text).into_iter(), 400).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (plain, chat) = (tmp.path().join("plain.gguf"), tmp.path().join("chat.gguf"));
    let mut g = GgufWriter::new();
    tok.write_gguf(&mut g).unwrap();
    g.write(&plain).unwrap();
    let f = GgufFile::open(&plain).unwrap();
    assert_eq!(tok.end_of_generation(&f), vec![0], "a toy tokenizer ends at <|endoftext|> alone");
    let Some(Value::Array(Array::String(mut tokens))) = f.get("tokenizer.ggml.tokens").cloned() else { panic!("tokens") };
    let Some(Value::Array(Array::I32(mut types))) = f.get("tokenizer.ggml.token_type").cloned() else { panic!("types") };
    let im_end = tokens.len() as u32;
    tokens.push("<|im_end|>".into());
    types.push(3);
    let mut g = GgufWriter::new();
    for (k, v) in
        [("tokenizer.ggml.model", Value::String("gpt2".into())), ("tokenizer.ggml.merges", f.get("tokenizer.ggml.merges").unwrap().clone())]
    {
        g.set(k, v).unwrap();
    }
    g.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))).unwrap();
    g.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types))).unwrap();
    g.set("tokenizer.ggml.eos_token_id", 7u32).unwrap();
    g.set("tokenizer.ggml.eot_token_id", 5u32).unwrap();
    g.set("tokenizer.ggml.eom_token_id", 99_999u32).unwrap(); // outside the vocabulary: left out
    g.write(&chat).unwrap();
    let f = GgufFile::open(&chat).unwrap();
    let back = Tokenizer::read_gguf(&f).unwrap().unwrap();
    assert_eq!(back.end_of_generation(&f), vec![0, 5, 7, im_end]);
}

#[test]
fn byte_tokenizer_still_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b.gguf");
    let mut g = GgufWriter::new();
    Tokenizer::Bytes.write_gguf(&mut g).unwrap();
    g.write(&path).unwrap();
    let back = Tokenizer::read_gguf(&GgufFile::open(&path).unwrap()).unwrap().unwrap();
    assert!(matches!(back, Tokenizer::Bytes));
    assert_eq!(back.encode("héllo").unwrap(), "héllo".bytes().map(u32::from).collect::<Vec<_>>());
}

#[test]
fn raw_text_trains_a_bpe_on_the_fly() {
    let tmp = tempfile::tempdir().unwrap();
    let p = fixture(tmp.path(), "raw.txt", 40);
    let c = load_corpus(&p, &CorpusOptions::default()).unwrap();
    let tok = c.tokenizer.clone().unwrap();
    assert!(c.vocab_size > 257 && c.vocab_size <= 1024 && c.vocab_size == tok.vocab_size());
    assert_eq!(c.train.to_vec().unwrap().into_iter().chain(c.val.to_vec().unwrap()).filter(|&i| Some(i) == tok.eot()).count(), 40);
    assert_eq!(c.val.to_vec().unwrap().into_iter().filter(|&i| Some(i) == tok.eot()).count(), 2, "5% of 40 documents");

    // A tiny text gets a tiny vocabulary; a given tokenizer is used as is.
    let tiny = tmp.path().join("tiny.md");
    std::fs::write(&tiny, "hello hello hello").unwrap();
    let c = load_corpus(&tiny, &CorpusOptions::default()).unwrap();
    assert!(c.vocab_size < 270, "{}", c.vocab_size);
    let with = TextOptions { tokenizer: Some(tok.clone()), ..TextOptions::default() };
    let c = load_corpus_with(&tiny, &CorpusOptions { val_fraction: 0.0, vocab_size: None }, &with).unwrap();
    let mut want = tok.encode("hello hello hello").unwrap();
    want.push(tok.eot().unwrap());
    assert_eq!(c.train.to_vec().unwrap(), want);
}

#[test]
fn id_files_are_read_and_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let bin = t.join("ids.bin");
    std::fs::write(&bin, ids_le(&(0..100).collect::<Vec<u32>>())).unwrap();
    let c = load_corpus(&bin, &CorpusOptions { val_fraction: 0.1, vocab_size: None }).unwrap();
    assert_eq!((c.train.len(), c.val.to_vec().unwrap(), c.vocab_size), (90, (90..100).collect::<Vec<u32>>(), 100));
    let e = input_err(load_corpus(&bin, &CorpusOptions { val_fraction: 0.1, vocab_size: Some(50) }));
    assert!(e.contains("ids.bin") && e.contains("token 50") && e.contains("vocabulary of 50"), "{e}");

    let txt = t.join("ids.txt");
    std::fs::write(&txt, "1 2 3\n4 5 6\n\n7 8 9\n10 11 12\n").unwrap();
    let c = load_corpus(&txt, &CorpusOptions { val_fraction: 0.25, vocab_size: Some(20) }).unwrap();
    assert_eq!((c.train.len(), c.val.to_vec().unwrap(), c.vocab_size), (9, vec![10, 11, 12], 20));
    std::fs::write(&txt, "1 2 3\n4  25 6\n").unwrap();
    let e = input_err(load_corpus(&txt, &CorpusOptions { val_fraction: 0.0, vocab_size: Some(20) }));
    assert!(e.contains("ids.txt:2:4") && e.contains("id 25"), "{e}");
    // A .txt with words in it is raw text.
    std::fs::write(&txt, "1 2 3\nthree four\n").unwrap();
    assert!(load_corpus(&txt, &CorpusOptions::default()).unwrap().tokenizer.is_some());
}

#[test]
fn bad_corpora_are_input_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let o = CorpusOptions::default();
    let e = input_err(load_corpus(&t.join("nope.txt"), &o));
    assert!(e.contains("nope.txt") && e.contains("does not exist"), "{e}");
    for (name, bytes) in [("e.txt", &b""[..]), ("e.bin", &b""[..]), ("blank.md", &b" \n\n"[..])] {
        std::fs::write(t.join(name), bytes).unwrap();
        let e = input_err(load_corpus(&t.join(name), &o));
        assert!(e.contains(name) && e.contains("empty"), "{e}");
    }
    std::fs::write(t.join("odd.bin"), [1u8, 0, 0]).unwrap();
    assert!(input_err(load_corpus(&t.join("odd.bin"), &o)).contains("not a whole number"));
    std::fs::write(t.join("neg.bin"), ids_le(&[1, u32::MAX])).unwrap();
    assert!(input_err(load_corpus(&t.join("neg.bin"), &o)).contains("token 1"));
    std::fs::write(t.join("bad.txt"), b"ok\n\xff\xfe").unwrap();
    let e = input_err(load_corpus(&t.join("bad.txt"), &o));
    assert!(e.contains("bad.txt") && e.contains("offset 3"), "{e}");
    std::fs::create_dir(t.join("folder")).unwrap();
    assert!(input_err(load_corpus(&t.join("folder"), &o)).contains("holds no text files (.txt, .text, .md, .jsonl, .ndjson"));
}

#[test]
fn damaged_prepared_folders_are_input_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture(tmp.path(), "s.txt", 20);
    let out = tmp.path().join("p");
    let m = prep(&[src], &out, &opts(300)).unwrap();
    let o = CorpusOptions::default();

    let train = std::fs::read(out.join("train.bin")).unwrap();
    let mut bad = train.clone();
    bad[12..16].copy_from_slice(&(m.vocab_size as u32).to_le_bytes());
    std::fs::write(out.join("train.bin"), &bad).unwrap();
    let e = input_err(load_corpus(&out, &o));
    assert!(e.contains("train.bin") && e.contains("token 3") && e.contains(&format!("vocabulary of {}", m.vocab_size)), "{e}");

    std::fs::write(out.join("train.bin"), &train[..train.len() - 4]).unwrap();
    assert!(input_err(load_corpus(&out, &o)).contains("manifest says"));
    std::fs::write(out.join("train.bin"), &train).unwrap();
    load_corpus(&out, &o).unwrap();

    let tj = out.join("tokenizer.json");
    let json = std::fs::read_to_string(&tj).unwrap();
    assert!(json.contains("\"trim_offsets\": true"));
    std::fs::write(&tj, json.replacen("\"trim_offsets\": true", "\"trim_offsets\": false", 1)).unwrap();
    assert!(input_err(load_corpus(&out, &o)).contains("does not match manifest.json"));
    std::fs::write(&tj, "{\"version\": 1}").unwrap();
    assert!(input_err(load_corpus(&out, &o)).contains("tokenizer.json"));
    std::fs::write(out.join("manifest.json"), "{}").unwrap();
    assert!(input_err(load_corpus(&out, &o)).contains("manifest.json"));
}

#[test]
fn embedded_corpus_is_generated_and_tokenized_by_this_project() {
    assert!(stories::generate() == embedded::TEXT, "data/default-corpus.txt is stale: run scripts/gen-default-corpus.sh");
    let retrained = Tokenizer::train_bpe(split_documents(embedded::TEXT).into_iter(), embedded::VOCAB_SIZE).unwrap();
    assert!(retrained.json() == Some(embedded::TOKENIZER_JSON), "data/tokenizer.json is stale: run scripts/gen-default-corpus.sh");
    let c = embedded::corpus().unwrap();
    assert_eq!(c.vocab_size, embedded::VOCAB_SIZE);
    assert!(c.val.len() > 1000 && c.train.len() > 10 * c.val.len(), "{} / {}", c.train.len(), c.val.len());
    assert_eq!(c.tokenizer.unwrap().eot(), Some(0));
    // --vocab-size on the embedded corpus trains a BPE of that size on its text
    // (it used to be ignored), and is deterministic, so --resume finds the same ids.
    let (a, b) = (embedded::corpus_with_vocab(500).unwrap(), embedded::corpus_with_vocab(500).unwrap());
    assert_eq!(a.vocab_size, 500);
    assert!(a.train.len() > c.train.len(), "fewer ids per token, more tokens");
    assert!(a.train == b.train && a.val == b.val);
    assert_eq!(embedded::corpus_with_vocab(embedded::VOCAB_SIZE).unwrap().train, c.train);
}

#[test]
fn toy_new_scaffolds_a_project() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    let args = toy::cli::NewArgs { dir: dir.clone(), force: false };
    toy::commands::new::run(&args).unwrap();
    assert!(dir.join("runs").is_dir());
    assert_eq!(std::fs::read_to_string(dir.join("data/default-corpus.txt")).unwrap(), embedded::TEXT);

    let t = toy::commands::train::read_toml(&dir).unwrap().expect("toy.toml");
    assert_eq!(t.data.corpus.as_deref(), Some(dir.join("data/default").as_path()));
    let c = load_corpus(t.data.corpus.as_ref().unwrap(), &CorpusOptions::default()).unwrap();
    let e = embedded::corpus().unwrap();
    assert_eq!((c.train, c.val, c.vocab_size), (e.train, e.val, e.vocab_size));
    let defaults = toy::commands::setup::resolve(&toy::cli::TrainArgs::default(), e.vocab_size).unwrap();
    assert_eq!(toy::commands::setup::resolve(&t, e.vocab_size).unwrap(), defaults, "toy.toml holds the defaults");

    let e = input_err(toy::commands::new::run(&args));
    assert!(e.contains("not empty") && e.contains("--force"), "{e}");
    toy::commands::new::run(&toy::cli::NewArgs { force: true, ..args }).unwrap();
}
