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
        println!("{}", json!({ "format": "toy/devices-v1", "devices": list }));
        return Ok(());
    }
    println!("{:<10} {:<8} {:<8} {:>12} {:>12}  description", "device", "backend", "kind", "free MiB", "total MiB");
    for d in devs {
        let (free, total) = d.memory();
        println!(
            "{:<10} {:<8} {:<8} {:>12} {:>12}  {}",
            d.user_name(),
            d.backend_name(),
            format!("{:?}", d.kind()).to_lowercase(),
            free >> 20,
            total >> 20,
            d.description()
        );
    }
    Ok(())
}
