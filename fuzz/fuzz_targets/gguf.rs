//! GGUF loading: our validation, then ggml's parser, then every accessor.
//! Anything that crashes here is a bug: malformed files must give `Err`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ggml_rs::log::set_handler(Some(Box::new(|_, _| {})));
    let dir = std::env::temp_dir().join(format!("toy-fuzz-gguf-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input.gguf");
    std::fs::write(&path, data).unwrap();
    if let Ok(f) = ggml_rs::gguf::GgufFile::open(&path) {
        let _ = f.metadata_map();
        for t in f.tensors() {
            let _ = f.tensor_data(&t.name);
            if t.nbytes < (1 << 20) {
                let _ = f.tensor_f32(&t.name);
            }
        }
        // What the toy commands do with a checkpoint.
        let _ = toy::checkpoint::open_checkpoint(&path);
    }
});
