//! `--device`: one device (`cpu`, `cuda`, `cuda:1`, `metal`) or a comma list
//! for data-parallel training (`cuda:0,cuda:1`, `cuda:all`, `cpu,cpu`), and the
//! backends each replica runs on.

use crate::error::{input, runtime, Result};
use ggml_rs::Backend;

/// The devices of `spec`, as given (lower case), `cuda:all` expanded.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input), naming the entry, for an empty
/// entry, a device that does not exist, a list mixing the CPU with other
/// devices, more CPU replicas than cores (at least 2), or a device other than
/// the CPU named twice.
pub fn parse(spec: &str) -> Result<Vec<String>> {
    parse_as(spec, "--device")
}

/// [`parse`], its errors starting with `origin` (say, `config.toml: device`)
/// instead of `--device`.
pub fn parse_as(spec: &str, origin: &str) -> Result<Vec<String>> {
    ggml_rs::backend::load_default_backends();
    let mut out = Vec::new();
    for raw in spec.split(',') {
        let d = raw.trim().to_lowercase();
        if d.is_empty() {
            return Err(input(format!("{origin} {spec}: an empty entry in the device list")));
        }
        if d == "cuda:all" {
            let n = ggml_rs::devices().iter().filter(|x| x.backend_name().eq_ignore_ascii_case("cuda")).count();
            if n == 0 {
                return Err(input(format!("{origin} {spec}: no CUDA device (see `toy devices`)")));
            }
            out.extend((0..n).map(|i| format!("cuda:{i}")));
            continue;
        }
        out.push(d);
    }
    let cpus = out.iter().filter(|d| d.as_str() == "cpu").count();
    if cpus != 0 && cpus != out.len() {
        return Err(input(format!(
            "{origin} {spec}: a data-parallel run uses devices of one kind; it cannot mix the CPU with other devices"
        )));
    }
    // Every replica holds the model, its gradients and its moments: more CPU
    // replicas than cores only multiply the memory (5,000 took 23.6 GB and
    // the kernel's OOM killer) without any speed.
    let cores = ggml_rs::backend::default_n_threads().max(2);
    if cpus > cores {
        return Err(input(format!("{origin} {spec}: {cpus} CPU replicas, more than the {cores} this machine can run side by side")));
    }
    let mut seen = std::collections::HashSet::new();
    for d in out.iter().filter(|d| d.as_str() != "cpu") {
        let dev = ggml_rs::backend::device_by_name(d).map_err(|e| input(format!("{origin} {spec}: {e}")))?;
        if !seen.insert(dev.name()) {
            return Err(input(format!("{origin} {spec}: {d} is listed twice (each replica needs its own device)")));
        }
    }
    Ok(out)
}

/// The CPU threads to use for `requested` (0: all cores): at most the cores
/// this process may use, with a note on stderr when more were asked for (more
/// threads than cores only make ggml's workers wait on each other).
pub fn threads(requested: usize) -> usize {
    let cores = ggml_rs::backend::default_n_threads();
    if requested == 0 {
        return cores;
    }
    if requested > cores {
        static NOTE: std::sync::Once = std::sync::Once::new();
        NOTE.call_once(|| crate::note!("note: --threads {requested} is more than the {cores} CPU cores here; using {cores}"));
        return cores;
    }
    requested
}

/// The backends of one replica on `device`: the device first (its f32 matrix
/// products at `precision` where it has the choice), a CPU backend of
/// `threads` threads last.
pub fn replica_backends(device: &str, threads: usize, precision: ggml_rs::MatmulPrecision) -> Result<Vec<Backend>> {
    ggml_rs::backend::load_default_backends();
    let cpu = Backend::cpu().map_err(|e| runtime(e.to_string()))?;
    cpu.set_n_threads(self::threads(threads));
    if device == "cpu" {
        return Ok(vec![cpu]);
    }
    let main = Backend::by_name(device).map_err(|e| input(format!("--device {device}: {e}")))?;
    if main.is_cpu() {
        return Ok(vec![cpu]);
    }
    main.set_matmul_precision(precision);
    Ok(vec![main, cpu])
}

/// The backends of every replica of `devices`, the CPU threads (`threads`, 0:
/// all cores) split evenly between CPU replicas.
pub fn backends(devices: &[String], threads: usize, precision: ggml_rs::MatmulPrecision) -> Result<Vec<Vec<Backend>>> {
    let total = self::threads(threads);
    let per = if devices.iter().all(|d| d == "cpu") { (total / devices.len()).max(1) } else { total };
    devices.iter().map(|d| replica_backends(d, per, precision)).collect()
}

/// `--device`'s devices, one replica each, and each one's backends; refused
/// when the batch does not split evenly over them.
pub fn replicas(cfg: &crate::config::TrainConfig) -> Result<(Vec<String>, Vec<Vec<Backend>>)> {
    let devices = parse(&cfg.device)?;
    let n = devices.len();
    if cfg.batch % n != 0 {
        return Err(input(format!(
            "a batch of {} (--batch, or the preset's) does not divide evenly over the {n} devices of --device {}; give a --batch that does",
            cfg.batch, cfg.device
        )));
    }
    let backends = backends(&devices, cfg.threads, cfg.dtype.precision(cfg.matmul_precision))?;
    Ok((devices, backends))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_of_cpus_and_bad_lists() {
        assert_eq!(parse("cpu").unwrap(), vec!["cpu"]);
        assert_eq!(parse(" CPU , cpu").unwrap(), vec!["cpu", "cpu"]);
        assert!(parse("cpu,").unwrap_err().to_string().contains("empty entry"));
        assert!(parse("cpu,cuda:3").unwrap_err().to_string().contains("cannot mix"));
        let many = vec!["cpu"; 5000].join(",");
        assert!(parse(&many).unwrap_err().to_string().contains("5000 CPU replicas"));
        assert!(parse("nosuch:3").unwrap_err().to_string().contains("nosuch"));
    }
}
