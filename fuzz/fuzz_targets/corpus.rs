//! Corpus readers: toy's `.bin` and `.txt` id files and raw text must give a
//! corpus or `Err`, never crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else { return };
    let dir = std::env::temp_dir().join(format!("toy-fuzz-corpus-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let ext = ["bin", "txt", "md"][kind as usize % 3];
    let path = dir.join(format!("input.{ext}"));
    std::fs::write(&path, body).unwrap();
    let opts = toy::data::CorpusOptions { vocab_size: if kind & 4 != 0 { Some(1000) } else { None }, ..Default::default() };
    let _ = toy::data::load_corpus(&path, &opts);
});
