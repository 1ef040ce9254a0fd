//! `toy debug`: dumps for the PyTorch parity harness (`scripts/parity/`).
//! Hidden from the main help.

use crate::checkpoint::{open_checkpoint, with_loaded, write_model, Provenance};
use crate::cli::{DebugArgs, DebugCommand};
use crate::error::{input, Result};
use crate::train::backends_for;
use crate::train::batches::Recorded;
use crate::train::step::{capacity, GradStep};
use ggml_rs::gguf::GgufWriter;
use ggml_rs::Context;

/// Run a `toy debug` subcommand.
pub fn run(args: &DebugArgs) -> Result<()> {
    match &args.command {
        DebugCommand::DumpGrads(a) | DebugCommand::DumpLogits(a) => {
            let grads = matches!(args.command, DebugCommand::DumpGrads(_));
            let ck = open_checkpoint(&a.model)?;
            let rec = Recorded::open(&a.batches)?;
            let b = rec.batch(a.step)?;
            let (t, nb) = (rec.layout.window - 1, rec.layout.batch);
            if t > ck.config.context && ck.config.arch == crate::model::Arch::Gpt2 {
                return Err(input(format!("windows of {t} tokens exceed the model's context {}", ck.config.context)));
            }
            let backends = backends_for(&a.device, 0)?;
            with_loaded(&ck, &backends[0], t, true, |w, consts| {
                let cctx = Context::new(capacity(ck.config.n_layers) * 2)?;
                let mut gs = GradStep::new(&cctx, w, consts, t, nb, &backends)?;
                let loss = gs.compute(&b.tokens, &b.targets)?;
                if grads {
                    let prov = Provenance { run_id: "debug".into(), step: a.step as u64, name: "toy-grads".into() };
                    let src = |p: ggml_rs::Tensor<'_>| -> Result<Vec<f32>> {
                        let g = gs.grad(p).ok_or_else(|| input(format!("no gradient for {}", p.name())))?;
                        Ok(g.read::<f32>()?)
                    };
                    write_model(&a.out, w, None, &prov, &src)?;
                    println!("{}", serde_json::json!({ "format": "toy/debug-v1", "loss": loss, "out": a.out }));
                } else {
                    let mut g = GgufWriter::new();
                    g.set("toy.loss", loss)?;
                    g.add_tensor("logits", gs.logits())?;
                    g.write(&a.out)?;
                    println!("{}", serde_json::json!({ "format": "toy/debug-v1", "loss": loss, "out": a.out }));
                }
                Ok(())
            })
        }
    }
}
