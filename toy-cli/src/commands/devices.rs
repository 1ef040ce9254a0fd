//! `toy devices`: the backends and devices ggml can use.

use crate::cli::DevicesArgs;
use crate::error::Result;
use serde_json::json;

/// List devices with their memory.
pub fn run(args: &DevicesArgs) -> Result<()> {
    ggml_rs::backend::load_default_backends();
    let devs = ggml_rs::devices();
    if args.json {
        let list: Vec<_> = devs
            .iter()
            .map(|d| {
                let (free, total) = d.memory();
                json!({ "name": d.user_name(), "ggml_name": d.name(), "backend": d.backend_name(), "kind": format!("{:?}", d.kind()).to_lowercase(),
                        "description": d.description(), "memory_free": free, "memory_total": total })
            })
            .collect();
        return crate::say!("{}", json!({ "format": "toy/devices-v1", "devices": list, "allreduce": allreduce(&devs) }));
    }
    crate::say!("{:<10} {:<8} {:<8} {:>12} {:>12}  description", "device", "backend", "kind", "free MiB", "total MiB")?;
    for d in &devs {
        let (free, total) = d.memory();
        crate::say!(
            "{:<10} {:<8} {:<8} {:>12} {:>12}  {}",
            d.user_name(),
            d.backend_name(),
            format!("{:?}", d.kind()).to_lowercase(),
            free >> 20,
            total >> 20,
            d.description()
        )?;
    }
    for a in allreduce(&devs) {
        crate::say!("{}", a["summary"].as_str().unwrap_or_default())?;
    }
    Ok(())
}

/// For every backend with several devices: which all-reduce data-parallel
/// training (`--device a,b`) would use between them.
fn allreduce(devs: &[ggml_rs::Device]) -> Vec<serde_json::Value> {
    let mut families: Vec<String> = devs.iter().filter(|d| d.kind() != ggml_rs::DeviceKind::Cpu).map(|d| d.backend_name()).collect();
    families.dedup();
    let mut out = Vec::new();
    for f in families {
        let same: Vec<_> = devs.iter().filter(|d| d.backend_name() == f).collect();
        if same.len() < 2 {
            continue;
        }
        let kind = ggml_rs::comm::AllReduceKind::for_devices(same[0], same.len());
        let how = match kind {
            ggml_rs::comm::AllReduceKind::Nccl => "NCCL".to_string(),
            ggml_rs::comm::AllReduceKind::Ggml => {
                "ggml's own (two GPUs, through pinned host memory; build with GGML_CUDA_NCCL for NCCL)".to_string()
            }
            ggml_rs::comm::AllReduceKind::None => "none (gradients are summed through host memory)".to_string(),
        };
        out.push(json!({ "backend": f, "devices": same.len(), "kind": kind.name(),
                         "summary": format!("all-reduce between the {} {f} devices: {how}", same.len()) }));
    }
    out
}
