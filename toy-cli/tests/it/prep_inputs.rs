//! `toy prep` on the inputs people have: JSON Lines, folders of text files and
//! gzip give the ids of the same text; malformed records name file and line;
//! an interrupted or failed prep leaves nothing that looks like a prepared corpus,
//! nor the folders it made for it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toy_stories as stories;

fn toy(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toy")).current_dir(dir).args(args).output().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    g.write_all(bytes).unwrap();
    g.finish().unwrap()
}

/// The three files of a prepared folder that hold its content.
fn content(dir: &Path) -> [Vec<u8>; 3] {
    ["tokenizer.json", "train.bin", "val.bin"].map(|f| std::fs::read(dir.join(f)).unwrap())
}

#[test]
fn jsonl_folders_and_gzip_give_the_ids_of_plain_text() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let text = stories::generate_with(7, 40);
    let docs: Vec<&str> = toy::data::text::split_documents(&text);
    assert_eq!(docs.len(), 40);
    std::fs::write(t.join("plain.txt"), &text).unwrap();
    std::fs::write(t.join("plain.txt.gz"), gzip(text.as_bytes())).unwrap();
    let jsonl: String = docs.iter().map(|d| format!("{}\n", serde_json::json!({ "id": 1, "body": d }))).collect();
    std::fs::write(t.join("docs.jsonl"), &jsonl).unwrap();
    std::fs::write(t.join("docs.jsonl.gz"), gzip(jsonl.as_bytes())).unwrap();
    std::fs::create_dir(t.join("folder")).unwrap();
    for (i, d) in docs.iter().enumerate() {
        std::fs::write(t.join(format!("folder/{i:03}.txt")), d).unwrap();
    }
    std::fs::write(t.join("folder/notes.bin"), [0xffu8, 0xfe]).unwrap(); // not an input file: skipped
    let prep = |input: &str, out: &str, extra: &[&str]| {
        let mut args = vec!["prep", input, "--vocab-size", "320", "--out", out];
        args.extend_from_slice(extra);
        let o = toy(t, &args);
        assert!(o.status.success(), "toy prep {input}: {}", String::from_utf8_lossy(&o.stderr));
        content(&t.join(out))
    };
    let want = prep("plain.txt", "p-plain", &[]);
    assert_eq!(prep("plain.txt.gz", "p-gz", &[]), want, "plain.txt.gz");
    assert_eq!(prep("docs.jsonl", "p-jsonl", &["--text-field", "body"]), want, "docs.jsonl");
    assert_eq!(prep("docs.jsonl.gz", "p-jsonl-gz", &["--text-field", "body"]), want, "docs.jsonl.gz");
    assert_eq!(prep("folder", "p-folder", &[]), want, "folder");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(t.join("p-folder/manifest.json")).unwrap()).unwrap();
    assert_eq!(m["n_documents"], 40);
    assert_eq!(m["source_files"].as_array().unwrap().len(), 40);

    // `toy train --corpus` reads the same inputs directly.
    for c in ["docs.jsonl.gz", "folder"] {
        let out = format!("r-{}", c.replace('.', "-"));
        let field: &[&str] = if c.contains("jsonl") { &["--text-field", "body"] } else { &[] };
        let o = toy(t, &[&["train", "--preset", "smoke", "--steps", "2", "--corpus", c, "--out", &out, "--json"], field].concat());
        assert!(o.status.success(), "toy train --corpus {c}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // `toy eval` gives a gzipped text and the same documents as JSON Lines the same
    // figures, bits per byte included (over the records' texts, not their JSON).
    let eval = |c: &str, extra: &[&str]| {
        let o = toy(t, &[&["eval", "r-folder", "--corpus", c, "--context", "32", "--json", "--threads", "1"], extra].concat());
        assert!(o.status.success(), "toy eval --corpus {c}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (plain, gz) = (eval("plain.txt", &[]), eval("plain.txt.gz", &[]));
    assert!(plain["bits_per_byte"].as_f64().is_some() && plain == gz, "{plain} vs {gz}");
    let jsonl = eval("docs.jsonl", &["--text-field", "body"]);
    assert_eq!((&jsonl["bytes"], &jsonl["bits_per_byte"]), (&plain["bytes"], &plain["bits_per_byte"]), "{jsonl} vs {plain}");

    // A prepared folder: --split scores one of its splits (default: both).
    let o = toy(t, &["train", "--preset", "smoke", "--steps", "2", "--corpus", "p-plain", "--out", "r-p", "--threads", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let split = |s: &str| {
        let o = toy(t, &["eval", "r-p", "--corpus", "p-plain", "--context", "16", "--json", "--threads", "1", "--split", s]);
        assert!(o.status.success(), "--split {s}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].as_u64().unwrap()
    };
    let (all, train, val) = (split("all"), split("train"), split("val"));
    assert!(val > 0 && train > val && all > train, "all {all}, train {train}, val {val}");
}

#[test]
fn malformed_records_name_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for (name, body, want) in [
        ("a.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"fine\"\n", "a.jsonl:2: not a JSON object"),
        ("b.jsonl", "{\"text\": \"fine\"}\n\n{\"other\": 1}\n", "b.jsonl:3: no field \"text\""),
        ("c.jsonl", "{\"text\": [1]}\n", "c.jsonl:1: field \"text\" is not a string"),
    ] {
        std::fs::write(t.join(name), body).unwrap();
        let o = toy(t, &["prep", name, "--out", "out"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.starts_with("toy prep: ") && err.contains(want) && err.trim().lines().count() == 1, "{name}: {err}");
        assert!(!t.join("out").exists(), "{name}: an output folder was left behind");
    }
    // A .gz name on what is not gzip data (or is cut short, shorter than a header).
    for (name, body) in [("bad.txt.gz", &b"not gzip at all"[..]), ("short.txt.gz", &b"abcde"[..])] {
        std::fs::write(t.join(name), body).unwrap();
        let o = toy(t, &["prep", name, "--out", "out"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("not gzip data, or cut short") && err.trim().lines().count() == 1, "{err}");
        assert!(!t.join("out").exists());
    }
}

#[test]
fn an_interrupted_prep_leaves_no_prepared_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // Text whose BPE takes a few seconds: lines of random letters.
    let mut s = 0x9E3779B97F4A7C15u64;
    let mut text = String::new();
    for _ in 0..6000 {
        for _ in 0..120 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            text.push((b'a' + (s % 26) as u8) as char);
        }
        text.push('\n');
    }
    std::fs::write(t.join("letters.txt"), text).unwrap();
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let out = t.join(format!("out{code}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_toy"))
            .current_dir(t)
            .args(["prep", "letters.txt", "--vocab-size", "4096", "--out"])
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        if child.try_wait().unwrap().is_some() {
            panic!("prep finished before the signal; make the input larger");
        }
        let t0 = Instant::now();
        assert!(Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap().success());
        let status = child.wait().unwrap();
        let waited = t0.elapsed();
        assert_eq!(status.code(), Some(code), "{sig}");
        assert!(waited < Duration::from_secs(3), "{sig}: took {waited:?} to stop");
        assert!(!out.join("manifest.json").exists(), "{sig}: a manifest was left behind");
        assert!(!out.exists(), "{sig}: the output folder was left behind");
    }
    // Into an empty folder the user made: left as it was, empty (no `.lock` either).
    let out = t.join("made");
    std::fs::create_dir(&out).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toy"))
        .current_dir(t)
        .args(["prep", "letters.txt", "--vocab-size", "4096", "--out", "made"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(child.try_wait().unwrap().is_none(), "prep finished before the signal");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "the folder holds what the prep left");
}

#[test]
fn a_failed_prep_removes_the_folders_it_made() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("empty.txt"), "").unwrap();
    std::fs::write(t.join("bad.txt"), b"ok\n\xff\xfe\n").unwrap();
    std::fs::create_dir(t.join("mine")).unwrap();
    for (input, out) in [("empty.txt", "data/x"), ("bad.txt", "a/b/c"), ("bad.txt", "mine/b/c")] {
        let o = toy(t, &["prep", input, "--out", out]);
        assert_eq!(o.status.code(), Some(2), "{input} -> {out}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // What was there before stays (the inputs and `mine`); nothing the preps made does.
    let mut left: Vec<String> = std::fs::read_dir(t).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["bad.txt", "empty.txt", "mine"]);
    assert_eq!(std::fs::read_dir(t.join("mine")).unwrap().count(), 0);
}
