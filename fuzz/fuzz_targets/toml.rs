//! `toy.toml`: any file must give `Ok(None)`, `Ok(Some(args))` or `Err` from
//! `read_toml`, and any args it gives must resolve to a config or `Err`: no
//! panic, no ggml abort.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toy::commands::train::{read_toml, resolve};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("toy-fuzz-toml-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    std::fs::write(dir.join("toy.toml"), data).unwrap();
    if let Ok(Some(args)) = read_toml(&dir) {
        let _ = resolve(&args, 300);
    }
});
