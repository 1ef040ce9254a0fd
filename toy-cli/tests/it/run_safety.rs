//! The second reliability pass, one test per class: signals during saves, two
//! processes on one run folder, `--resume` with contradicting flags, a state
//! that does not match its checkpoint, a closed stdout, leftovers of a dead
//! process, a run that never started, transposed tensors, hostile corpora and
//! donors. Signal tests wait on `events.jsonl`, never on fixed sleeps alone.

use crate::common::process::{count, fails_with, ok, signal, wait_for};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use toy_stories as stories;

fn fails(o: &Output, needle: &str) -> String {
    fails_with(o, 2, needle)
}

fn toy(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID").current_dir(dir);
    c
}

fn train(dir: &Path, out: &str, extra: &[&str]) -> Command {
    let mut c = toy(dir);
    c.args(["train", "--threads", "1", "--log-every", "1000", "--out", out]).args(extra);
    c
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// Every checkpoint has its state and every state its checkpoint; no temporaries.
fn consistent(weights: &Path) {
    let n = names(weights);
    assert!(!n.iter().any(|f| f.starts_with('.')), "temporary files left: {n:?}");
    for f in &n {
        if let Some(stem) = f.strip_suffix(".state.gguf") {
            assert!(n.contains(&format!("{stem}.gguf")), "orphan state {f}: {n:?}");
        } else if let Some(stem) = f.strip_suffix(".gguf") {
            assert!(n.contains(&format!("{stem}.state.gguf")), "checkpoint {f} without its state: {n:?}");
        }
    }
}

fn latest_step(run: &Path) -> Option<u64> {
    let l = std::fs::read_link(run.join("weights/latest")).ok()?;
    l.to_str()?.strip_prefix("step_")?.strip_suffix(".gguf")?.parse().ok()
}

#[test]
fn repeated_signals_never_cut_a_save() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for (i, delay_ms) in [0u64, 15, 40, 80, 150, 0, 25, 60].iter().enumerate() {
        let out = format!("r{i}");
        let r = t.join(&out);
        // A checkpoint every step, so the later signals land in or near a save.
        let mut child = train(t, &out, &["--preset", "tiny", "--steps", "100000", "--save-every", "1", "--eval-every", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&r, "checkpoint", 2, &mut child);
        signal(&child, "-INT");
        std::thread::sleep(Duration::from_millis(*delay_ms));
        signal(&child, "-INT");
        let three = i >= 5;
        if three {
            std::thread::sleep(Duration::from_millis(5));
            signal(&child, "-INT");
        }
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(130), "{err}");
        // A third signal quits at once and says so, unless a save was under way.
        assert!(!three || err.contains("quit without saving") || err.contains("a checkpoint is being written"), "{err}");
        consistent(&r.join("weights"));
        let step = latest_step(&r).expect("weights/latest");
        if !three {
            // Two signals: the run still stops the normal way, with its checkpoint.
            let text = std::fs::read_to_string(r.join("events.jsonl")).unwrap();
            let end: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!((end["kind"].as_str(), end["reason"].as_str()), (Some("run_end"), Some("interrupted")));
            assert_eq!(end["final_step"].as_u64(), Some(step));
        }
        ok(&run(toy(t).args(["train", "--resume", &out, "--steps", &(step + 1).to_string(), "--threads", "1"])));
        consistent(&r.join("weights"));
    }
}

/// Three signals before the first checkpoint: the run quits at once, and a
/// folder that holds no checkpoint is removed, saying so (or, where the step
/// ended and saved before the third, the checkpoint is there).
#[test]
fn quitting_before_the_first_checkpoint_leaves_no_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for i in 0..3 {
        let out = format!("q{i}");
        let r = t.join(&out);
        let mut child = train(t, &out, &["--preset", "small", "--steps", "100000", "--eval-every", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&r, "step", 1, &mut child);
        for _ in 0..3 {
            signal(&child, "-INT");
            std::thread::sleep(Duration::from_millis(3));
        }
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(130), "{err}");
        assert!(err.contains("quit without saving") || err.contains("a checkpoint is being written"), "{err}");
        if r.exists() {
            assert!(latest_step(&r).is_some(), "a folder without a checkpoint was left: {err}");
        } else {
            assert!(err.contains(&format!("nothing was saved, so the run folder {out} was removed")), "{err}");
        }
    }
}

#[test]
fn a_run_folder_is_locked_while_it_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let r = t.join("r");
    let mut child = train(t, "r", &["--preset", "smoke", "--steps", "100000", "--eval-every", "0"]).stdout(Stdio::null()).spawn().unwrap();
    wait_for(&r, "step", 3, &mut child);
    fails(&run(toy(t).args(["train", "--resume", "r", "--threads", "1"])), "in use by process");
    // A new run into it says who holds it (it said "already exists; ... resume it").
    fails(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "5"])), "in use by process");
    // Nor does a project or a prepared corpus go into it; the message names what holds it.
    fails(&run(toy(t).args(["new", "r", "--force"])), "(a toy train running in it)");
    std::fs::write(t.join("s.txt"), "a story\n").unwrap();
    fails(&run(toy(t).args(["prep", "s.txt", "--out", "r", "--force"])), "(a toy train running in it)");
    assert!(!r.join("toy.toml").exists() && !r.join("manifest.json").exists());
    signal(&child, "-INT");
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let steps = count(&r, "step");
    ok(&run(toy(t).args(["train", "--resume", "r", "--threads", "1", "--steps", &(latest_step(&r).unwrap() + 2).to_string()])));
    assert_eq!(count(&r, "step"), steps + 2, "the second process ran alone");
}

#[test]
fn resume_refuses_flags_that_contradict_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "3", "--seed", "4"])));
    std::fs::write(t.join("other.txt"), stories::generate_with(3, 20)).unwrap();
    let resume = |extra: &[&str]| run(toy(t).args(["train", "--resume", "r", "--threads", "1"]).args(extra));
    let err = fails(&resume(&["--d-model", "96", "--lr", "5", "--corpus", "other.txt", "--steps", "6"]), "--d-model 96");
    assert!(err.contains("--lr 5") && err.contains("--corpus other.txt") && err.contains("config.toml"), "{err}");
    let err = fails(&resume(&["--seed", "5"]), "--seed 5 (the run has 4)");
    // The refusal names what may change, the moved corpus and base and a changed corpus too.
    assert!(err.contains("--steps,") && err.contains("--from may name") && err.contains("--allow-corpus-change"), "{err}");
    fails(&resume(&["--donor", "x.gguf"]), "--donor");
    assert_eq!(count(&t.join("r"), "step"), 3, "a refused resume trained");
    // Flags equal to the run's, and those that may change, are taken.
    let o = resume(&["--seed", "4", "--preset", "smoke", "--steps", "5", "--save-every", "1"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("from its config.toml"));
    assert_eq!(count(&t.join("r"), "step"), 5);
}

#[test]
fn a_state_from_another_step_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "4", "--save-every", "2"])));
    let w = t.join("r/weights");
    std::fs::copy(w.join("step_2.state.gguf"), w.join("step_4.state.gguf")).unwrap();
    let o = run(toy(t).args(["train", "--resume", "r", "--steps", "6", "--threads", "1"]));
    let err = fails(&o, "does not belong to");
    assert!(err.contains("step_4.gguf") && err.contains("step is 2"), "{err}");
    assert_eq!(count(&t.join("r"), "step"), 4);
    // Another run's state of the same step is refused as well.
    ok(&run(&mut train(t, "s", &["--preset", "smoke", "--steps", "4", "--save-every", "2", "--seed", "9"])));
    std::fs::copy(t.join("s/weights/step_4.state.gguf"), w.join("step_4.state.gguf")).unwrap();
    fails(&run(toy(t).args(["train", "--resume", "r", "--steps", "6", "--threads", "1"])), "does not belong to");
}

#[test]
fn a_closed_stdout_does_not_stop_training() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let mut child = toy(t)
        .args(["train", "--preset", "smoke", "--steps", "40", "--threads", "1", "--log-every", "1", "--out", "r"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // like `| head -0`
    assert!(child.wait().unwrap().success(), "toy train died when nobody read its stdout");
    assert_eq!(count(&t.join("r"), "step"), 40);
    assert_eq!(latest_step(&t.join("r")), Some(40));
    assert_eq!(count(&t.join("r"), "run_end"), 1);
}

#[test]
fn leftovers_of_a_dead_process_are_removed_and_failed_saves_leave_none() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "2"])));
    let w = t.join("r/weights");
    for f in [".step_9.gguf.tmp-77", ".step_9.state.gguf.tmp-77", "step_7.state.gguf", ".latest.tmp-77"] {
        std::fs::write(w.join(f), b"partial").unwrap();
    }
    std::fs::write(t.join("r/.config.toml.tmp-77"), b"partial").unwrap();
    ok(&run(toy(t).args(["train", "--resume", "r", "--steps", "4", "--threads", "1"])));
    consistent(&w);
    assert!(!t.join("r/.config.toml.tmp-77").exists());
    assert_eq!(names(&w), ["latest", "step_2.gguf", "step_2.state.gguf", "step_4.gguf", "step_4.state.gguf"]);

    // The checkpoint cannot be written (a folder in its place): its state is not left alone.
    std::fs::create_dir_all(w.join("step_6.gguf/blocker")).unwrap();
    let o = run(toy(t).args(["train", "--resume", "r", "--steps", "6", "--threads", "1"]));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!w.join("step_6.state.gguf").exists() && !names(&w).iter().any(|f| f.starts_with('.')), "{:?}", names(&w));
    assert_eq!(latest_step(&t.join("r")), Some(4));

    // toy prep that cannot finish leaves no tokenizer without a manifest.
    std::fs::write(t.join("s.txt"), stories::generate_with(2, 30)).unwrap();
    std::fs::create_dir_all(t.join("p/train.bin/blocker")).unwrap();
    let o = run(toy(t).args(["prep", "s.txt", "--vocab-size", "300", "--out", "p", "--force"]));
    assert!(!o.status.success());
    assert!(!t.join("p/tokenizer.json").exists() && !t.join("p/manifest.json").exists(), "{:?}", names(&t.join("p")));
}

#[test]
fn a_run_that_never_started_leaves_no_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let err = fails(&run(&mut train(t, "r", &["--preset", "smoke", "--batch", "100000"])), "out of memory");
    assert!(err.contains("MiB"), "{err}");
    assert!(!t.join("r").exists(), "a skeleton run folder was left");
    let o = run(toy(t).args(["train", "--preset", "smoke", "--batch", "100000", "--threads", "1"]));
    fails(&o, "out of memory");
    assert!(!t.join("runs").exists());
}

/// An address-space limit (`ulimit -v`) is memory too: ggml's arenas past it
/// failed to allocate and ggml aborted (exit 134); and more CPU replicas than
/// cores are refused before any is built (5,000 took 23.6 GB).
#[test]
fn memory_limits_and_replica_counts_are_checked_up_front() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let toy = env!("CARGO_BIN_EXE_toy");
    let o = run(Command::new("sh")
        .current_dir(t)
        .arg("-c")
        .arg(format!("ulimit -v 400000 && exec {toy} train --preset medium --context 32 --steps 1 --threads 1 --out r")));
    fails(&o, "out of memory");
    assert!(!t.join("r").exists());
    // A training graph's scheduler is sized for the graph, not for the
    // capacity it was built with: a 2-layer model trains in 300 MB of address
    // space (its scheduler asked for 319 MiB before); sampling builds a
    // forward graph only, smaller still.
    let o = run(Command::new("sh")
        .current_dir(t)
        .arg("-c")
        .arg(format!("ulimit -v 300000 && exec {toy} train --preset smoke --steps 1 --eval-every 0 --threads 1 --out s")));
    ok(&o);
    let o = run(Command::new("sh").current_dir(t).arg("-c").arg(format!("ulimit -v 250000 && exec {toy} generate s -n 4 --threads 1")));
    ok(&o);
    let many = vec!["cpu"; 1000].join(",");
    fails(&run(&mut train(t, "d", &["--preset", "smoke", "--steps", "1", "--batch", "1000", "--device", &many])), "1000 CPU replicas");
    assert!(!t.join("d").exists());
}

#[test]
fn threads_above_the_cores_are_capped() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let t0 = Instant::now();
    let o = run(toy(t).args(["train", "--preset", "smoke", "--steps", "1", "--eval-every", "0", "--threads", "100000", "--out", "r"]));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("note: --threads 100000 is more than"), "no note");
    assert!(t0.elapsed() < Duration::from_secs(60), "100000 threads were started");
    let o = run(toy(t).args(["generate", "r", "-n", "1", "--threads", "100000"]));
    ok(&o);
}

/// Copy the GGUF at `from` to `to` (every key, every tensor as f32), with
/// `edit` choosing each tensor's shape and values and `extra` appended.
fn copy_gguf(from: &Path, to: &Path, edit: impl Fn(&str, Vec<i64>, Vec<f32>) -> (Vec<i64>, Vec<f32>), extra: Option<(&str, Vec<f32>)>) {
    let f = GgufFile::open(from).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        if !k.starts_with("general.alignment") {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in f.tensors() {
        let (shape, data) = edit(&info.name, info.shape(), f.tensor_f32(&info.name).unwrap());
        g.add_tensor_data(&info.name, &shape, &data).unwrap();
    }
    if let Some((n, data)) = extra {
        g.add_tensor_data(n, &[data.len() as i64], &data).unwrap();
    }
    g.write(to).unwrap();
}

/// Copy the GGUF at `from` to `to`, giving `name` the shape `ne` (same data).
fn reshape(from: &Path, to: &Path, name: &str, ne: Option<&[i64]>, extra: Option<(&str, Vec<f32>)>) {
    copy_gguf(from, to, |n, shape, data| (if n == name { ne.map_or(shape, <[i64]>::to_vec) } else { shape }, data), extra);
}

#[test]
fn transposed_or_extra_tensors_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "2"])));
    let ck = t.join("r/weights/step_2.gguf");
    let f = GgufFile::open(&ck).unwrap();
    let (d, ff) = (64i64, f.tensor("blk.0.ffn_up.weight").unwrap().ne[1]);
    let v = f.tensor("token_embd.weight").unwrap().ne[1];
    // (tensor to reshape, its new ne, an extra tensor, what the message names)
    type Case<'a> = (&'a str, Option<Vec<i64>>, Option<(&'a str, Vec<f32>)>, &'a str);
    let mut cases: Vec<Case> = vec![
        ("blk.0.ffn_up.weight", Some(vec![ff, d]), None, "blk.0.ffn_up.weight"),
        ("blk.1.ffn_down.weight", Some(vec![d, ff]), None, "blk.1.ffn_down.weight"),
        ("blk.0.attn_q.weight", Some(vec![d / 2, d * 2]), None, "blk.0.attn_q.weight"),
        ("", None, Some(("blk.7.attn_norm.weight", vec![1.0; 64])), "block_count"),
    ];
    if f.tensor("output.weight").is_some() {
        cases.push(("output.weight", Some(vec![v, d]), None, "output.weight"));
    }
    for (i, (name, ne, extra, needle)) in cases.into_iter().enumerate() {
        let bad = t.join(format!("bad{i}.gguf"));
        reshape(&ck, &bad, name, ne.as_deref(), extra);
        let b = bad.to_str().unwrap();
        fails(&run(toy(t).args(["generate", b, "-n", "2"])), needle);
        fails(&run(toy(t).args(["eval", b, "--corpus", "r/weights/step_2.gguf"])), needle);
        fails(&run(&mut train(t, "w", &["warm-start", "--donor", b, "--steps", "1"])), needle);
    }
    assert!(!t.join("w").exists());
}

#[test]
fn hostile_corpora_and_donors_get_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "2"])));
    fails(&run(&mut train(t, "x", &["--preset", "smoke", "--corpus", "/dev/zero"])), "not a regular file");
    fails(&run(toy(t).args(["eval", "r", "--corpus", "/dev/zero"])), "not a regular file");
    std::fs::write(t.join("ids.txt"), "1 2 3\n4 3.5 6\n").unwrap();
    fails(&run(&mut train(t, "x", &["--preset", "smoke", "--corpus", "ids.txt"])), "ids.txt:2:3: 3.5 is not a token id");
    std::fs::write(t.join("s.txt"), stories::generate_with(3, 40)).unwrap();
    // --max-windows 0 is every window, as train's --eval-windows 0 (it was refused: a helper's finding)
    let all = run(toy(t).args(["eval", "r", "--corpus", "s.txt", "--json"]));
    ok(&all);
    assert_eq!(run(toy(t).args(["eval", "r", "--corpus", "s.txt", "--max-windows", "0", "--json"])).stdout, all.stdout);
    // A corpus prepared with another tokenizer than the model's.
    ok(&run(toy(t).args(["prep", "s.txt", "--vocab-size", "300", "--out", "p"])));
    fails(&run(toy(t).args(["eval", "r", "--corpus", "p"])), "another tokenizer");
    // ... given as one of its split files, whose manifest and tokenizer lie beside it
    fails(&run(toy(t).args(["eval", "r", "--corpus", "p/val.bin"])), "another tokenizer");
    // Non-finite values: a donor table, a checkpoint tensor.
    let ck = t.join("r/weights/step_2.gguf");
    let f = GgufFile::open(&ck).unwrap();
    let mut table = f.tensor_f32("token_embd.weight").unwrap();
    table[64 * 5 + 3] = f32::NAN;
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.add_tensor_data("token_embd.weight", &f.tensor("token_embd.weight").unwrap().shape(), &table).unwrap();
    g.write(t.join("nan-donor.gguf")).unwrap();
    let err = fails(&run(&mut train(t, "x", &["warm-start", "--donor", "nan-donor.gguf", "--steps", "1"])), "token_embd.weight");
    assert!(err.contains("row 5") && !err.contains("--lr"), "{err}");
    let mut norm = f.tensor_f32("blk.0.attn_norm.weight").unwrap();
    norm[2] = f32::INFINITY;
    reshape_values(&ck, &t.join("inf.gguf"), "blk.0.attn_norm.weight", &norm);
    let err = fails(&run(toy(t).args(["generate", "inf.gguf", "-n", "2"])), "blk.0.attn_norm.weight");
    assert!(err.contains("model is broken"), "{err}");
    fails(&run(toy(t).args(["eval", "inf.gguf", "--corpus", "s.txt"])), "model is broken");
    assert!(!t.join("x").exists());
}

/// Copy the GGUF at `from` to `to` with `name`'s values replaced.
fn reshape_values(from: &Path, to: &Path, name: &str, values: &[f32]) {
    copy_gguf(from, to, |n, shape, data| (shape, if n == name { values.to_vec() } else { data }), None);
}

#[test]
fn hostile_inputs_of_the_adversarial_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("s.txt"), stories::generate_with(2, 20)).unwrap();
    for v in ["1000000000", "18446744073709551615"] {
        fails(&run(&mut train(t, "x", &["--preset", "smoke", "--corpus", "s.txt", "--vocab-size", v])), "too large");
        fails(&run(toy(t).args(["prep", "s.txt", "--vocab-size", v, "--out", "p"])), "too large");
    }
    assert!(!t.join("x").exists() && !t.join("p").exists());
    ok(&run(toy(t).args(["prep", "s.txt", "--vocab-size", "300", "--out", "p"])));
    fails(&run(&mut train(t, "x", &["--preset", "smoke", "--corpus", "p", "--vocab-size", "500"])), "contradicts");
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--steps", "2"])));
    // A FIFO is refused before it is opened (opening one blocks).
    if Command::new("mkfifo").arg(t.join("f.gguf")).status().is_ok_and(|s| s.success()) {
        let t0 = Instant::now();
        fails(&run(toy(t).args(["describe", "f.gguf"])), "not a regular file");
        fails(&run(toy(t).args(["generate", "f.gguf"])), "not a regular file");
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    // weights/latest pointing into another run is not this run's checkpoint.
    ok(&run(&mut train(t, "other", &["--preset", "smoke", "--steps", "1"])));
    let latest = t.join("r/weights/latest");
    std::fs::remove_file(&latest).unwrap();
    std::os::unix::fs::symlink("../../other/weights/step_1.gguf", &latest).unwrap();
    fails(&run(toy(t).args(["train", "--resume", "r", "--steps", "4", "--threads", "1"])), "no checkpoint");
    // toy.toml: a typo'd table is an error, as an unknown key inside [train] is.
    std::fs::create_dir(t.join("proj")).unwrap();
    std::fs::write(t.join("proj/toy.toml"), "[trian]\nsteps = 3\n").unwrap();
    fails(&run(toy(&t.join("proj")).args(["train", "--preset", "smoke"])), "trian");
    // An unknown key names the one meant; the recipe may be set there (the command line wins).
    std::fs::write(t.join("proj/toy.toml"), "[train]\nlora_rnk = 2\n").unwrap();
    fails(
        &run(toy(&t.join("proj")).args(["train", "--preset", "smoke"])),
        "line 2 (`lora_rnk = 2`): unknown field `lora_rnk`; did you mean `lora_rank`?",
    );
    std::fs::write(t.join("proj/toy.toml"), "[train]\nrecipe = \"finetune\"\n").unwrap();
    fails(&run(toy(&t.join("proj")).args(["train", "--preset", "smoke"])), "finetune needs --from");
    // A hostile batch layout.
    std::fs::write(t.join("batches.json"), r#"{"format":"toy/batches-v1","window":4611686018427387904,"batch":1,"dtype":"u32"}"#).unwrap();
    std::fs::write(t.join("batches.bin"), [0u8; 64]).unwrap();
    let o = run(toy(t).args(["debug", "dump-logits", "r/weights/step_2.gguf", "--batches", "batches.bin", "--out", "d.gguf"]));
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    // A recorded id the model cannot read, and outputs that are not a new file,
    // are refused before any work; a run folder stands for its batches.bin.
    ok(&run(&mut train(t, "rb", &["--preset", "smoke", "--steps", "1", "--record-batches"])));
    let mut ids = std::fs::read(t.join("rb/batches.bin")).unwrap();
    ids[8..12].copy_from_slice(&999_999u32.to_le_bytes());
    std::fs::create_dir(t.join("bad")).unwrap();
    std::fs::write(t.join("bad/batches.bin"), ids).unwrap();
    std::fs::copy(t.join("rb/batches.json"), t.join("bad/batches.json")).unwrap();
    let dump =
        |batches: &str, out: &str| run(toy(t).args(["debug", "dump-logits", "rb/weights/step_1.gguf", "--batches", batches, "--out", out]));
    fails(&dump("bad/batches.bin", "nodir/d1.gguf"), "outside the model's vocabulary");
    assert!(!t.join("nodir").exists(), "a refused dump makes no folder");
    fails(&dump("rb", "rb/batches.json/d.gguf"), "rb/batches.json is not a folder");
    fails(&dump("rb", "rb/weights/step_1.gguf"), "one of the inputs");
    fails(&dump("nope.bin", "d2.gguf"), "nope.bin: no such file");
    assert!(!t.join("d1.gguf").exists() && !t.join("d2.gguf").exists());
    ok(&dump("rb", "d3.gguf"));
    // Missing folders above --out are made, as prep and train make theirs.
    ok(&dump("rb", "new/dir/d5.gguf"));
    assert_eq!(std::fs::read(t.join("d3.gguf")).unwrap(), std::fs::read(t.join("new/dir/d5.gguf")).unwrap());
    // The model may be a run folder too (its weights/latest), and threads are set as elsewhere.
    let o = run(toy(t).args(["debug", "dump-logits", "rb", "--batches", "rb", "--out", "d4.gguf", "--threads", "1"]));
    ok(&o);
    assert_eq!(std::fs::read(t.join("d3.gguf")).unwrap(), std::fs::read(t.join("d4.gguf")).unwrap());
}

#[test]
fn a_vocabulary_above_the_identity_limit_trains() {
    // Above MAX_EYE_VOCAB the labels are dense and the target ids leave the graph.
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ids: Vec<String> =
        (0..40).map(|l| (0..100).map(|i| ((l * 7919 + i * 104729) % 20000).to_string()).collect::<Vec<_>>().join(" ")).collect();
    std::fs::write(t.join("ids.txt"), ids.join("\n")).unwrap();
    ok(&run(&mut train(t, "r", &["--preset", "smoke", "--corpus", "ids.txt", "--steps", "2"])));
}

/// `toy new` on a full disk left `data/default/.lock` and `runs/`, and the
/// retry said "not empty": what it wrote into an empty place is removed. A
/// full disk is a 300 KiB tmpfs (this test needs root to mount one, as CI has).
#[test]
fn toy_new_on_a_full_disk_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=300k", "tmpfs"]).arg(&mnt).status().is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("toy_new_on_a_full_disk_leaves_nothing: cannot mount a tmpfs here (not root?); not run");
        return;
    }
    let o = run(toy(tmp.path()).args(["new"]).arg(mnt.join("proj")));
    let left = names(&mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    fails_with(&o, 1, "No space left");
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// SIGINT while `toy train` tokenized a raw-text corpus waited for the BPE
/// (15 s for 20 MB): nothing is saved yet, so it ends at once with 130 and
/// leaves no folder.
#[test]
fn sigint_while_reading_a_raw_corpus_ends_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let words: Vec<String> = (0..5000u32).map(|i| format!("w{}x{}", i * 7919 % 9973, i % 13)).collect();
    let text: String =
        (0..400_000usize).map(|i| format!("{} {} {}\n", words[i % 5000], words[i * 31 % 5000], words[i * 17 % 4999])).collect();
    std::fs::write(t.join("big.txt"), text).unwrap();
    let child = train(t, "r", &["--preset", "smoke", "--steps", "5", "--corpus", "big.txt"]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    signal(&child, "-INT");
    let t0 = Instant::now();
    // A second signal (`timeout -s INT` may send two) promises no checkpoint either.
    signal(&child, "-INT");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted while reading the corpus"), "{err}");
    // Nothing is promised that will not happen: no step, no checkpoint.
    assert!(err.contains("nothing was saved") && !err.contains("checkpoint"), "{err}");
    // One line says it (the first signal's own note is that line).
    assert_eq!(err.matches("nothing was saved").count(), 1, "{err}");
    // stderr is no terminal: no blank line before the messages.
    assert!(!err.starts_with('\n') && !err.contains("\n\n"), "{err:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    assert!(!t.join("r").exists());
}

/// SIGINT while a warm-start loads its donor (a 40,000-token table: seconds
/// of PCA) ends at once too: 130, one line, no folder (it trained a step and
/// saved it).
#[test]
fn sigint_while_loading_a_donor_ends_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (w, v) = (512usize, 40_000usize);
    let bytes: Vec<u8> = (0..w * v).flat_map(|i| (((i * 7919 % 10007) as f32 / 10007.0) - 0.5).to_le_bytes()).collect();
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.set("llama.embedding_length", w as u32).unwrap();
    g.add_tensor_bytes("token_embd.weight", ggml_rs::DType::F32, &[w as i64, v as i64], bytes).unwrap();
    g.write(t.join("donor.gguf")).unwrap();
    let args = ["warm-start", "--donor", "donor.gguf", "--match-by", "index", "--preset", "smoke", "--steps", "5"];
    let child = train(t, "r", &args).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    signal(&child, "-INT");
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert_eq!(err.trim_end(), "toy train: interrupted while loading the donor; nothing was saved");
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    assert!(!t.join("r").exists());
}
