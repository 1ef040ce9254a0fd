//! Devices and backends: list what ggml can run on, start a backend by name,
//! load backend modules (`libggml-cuda.so`, ...) built elsewhere.
//!
//! Everything goes through ggml's backend registry (`ggml-backend.h`), never
//! through backend-specific entry points, so the same code works whether
//! backends are linked in or loaded at run time (`GGML_BACKEND_DL`).

use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::rc::Rc;

/// What kind of hardware a device is (`ggml_backend_dev_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// The host CPU (`GGML_BACKEND_DEVICE_TYPE_CPU`).
    Cpu,
    /// A GPU with its own memory (`GGML_BACKEND_DEVICE_TYPE_GPU`).
    Gpu,
    /// A GPU sharing the host's memory (`GGML_BACKEND_DEVICE_TYPE_IGPU`).
    IntegratedGpu,
    /// An accelerator that works with the CPU, such as BLAS (`GGML_BACKEND_DEVICE_TYPE_ACCEL`).
    Accelerator,
    /// A kind this crate does not know.
    Other,
}

impl DeviceKind {
    fn from_raw(t: sys::ggml_backend_dev_type) -> Self {
        match t {
            sys::GGML_BACKEND_DEVICE_TYPE_CPU => DeviceKind::Cpu,
            sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceKind::Gpu,
            sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceKind::IntegratedGpu,
            sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceKind::Accelerator,
            _ => DeviceKind::Other,
        }
    }
}

/// Precision of f32 matrix products, with PyTorch's names
/// (`torch.set_float32_matmul_precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MatmulPrecision {
    /// Full f32 arithmetic.
    Highest,
    /// TF32 tensor cores where the device has them (10-bit mantissa inputs,
    /// f32 accumulation): ggml's, llama.cpp's and nanoGPT's choice on CUDA.
    #[default]
    High,
    /// bf16 inputs (8-bit mantissa), f32 accumulation and f32 results: the
    /// products of PyTorch's `autocast(dtype=torch.bfloat16)` (and of its
    /// `"medium"` precision). CUDA through our patch 0018; elsewhere the
    /// backend keeps its own precision.
    Medium,
}

impl MatmulPrecision {
    /// The name (`"highest"`, `"high"`).
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Highest => "highest",
            MatmulPrecision::High => "high",
            MatmulPrecision::Medium => "medium",
        }
    }
}

/// A device known to ggml's registry. Devices live as long as the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    ptr: sys::ggml_backend_dev_t,
}

// SAFETY: registry devices are process-global, immutable descriptors.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: ggml returns NUL-terminated strings that live as long as the device.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Device {
    /// ggml's device name (`"CPU"`, `"CUDA0"`, `"Metal"`).
    pub fn name(&self) -> String {
        // SAFETY: valid registry device.
        cstr(unsafe { sys::ggml_backend_dev_name(self.ptr) })
    }

    /// A human description (the CPU model, the GPU name).
    pub fn description(&self) -> String {
        // SAFETY: valid registry device.
        cstr(unsafe { sys::ggml_backend_dev_description(self.ptr) })
    }

    /// The device kind.
    pub fn kind(&self) -> DeviceKind {
        // SAFETY: valid registry device.
        DeviceKind::from_raw(unsafe { sys::ggml_backend_dev_type(self.ptr) })
    }

    /// Free and total memory in bytes, as the device reports it; for the
    /// CPU, free is the host's available memory ([`host_available_memory`])
    /// where it can be read: ggml's CPU device reports its total as free on
    /// every system but Windows (`ggml_backend_cpu_device_get_memory`), and
    /// at most what the process's address-space limit (`ulimit -v`) leaves.
    pub fn memory(&self) -> (usize, usize) {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid registry device, valid out-pointers.
        unsafe { sys::ggml_backend_dev_memory(self.ptr, &mut free, &mut total) };
        if self.kind() == DeviceKind::Cpu {
            if let Some(available) = host_available_memory() {
                free = if total > 0 { available.min(total) } else { available };
            }
            if let Some(left) = address_space_left() {
                free = if free == 0 { left } else { free.min(left) };
            }
        }
        (free, total)
    }

    /// The name of the registry (backend family) the device belongs to (`"CPU"`, `"CUDA"`).
    pub fn backend_name(&self) -> String {
        // SAFETY: valid registry device.
        cstr(unsafe { sys::ggml_backend_reg_name(sys::ggml_backend_dev_backend_reg(self.ptr)) })
    }

    /// The short name users type: `cpu`, `cuda:0`, `metal`, ...
    pub fn user_name(&self) -> String {
        let family = self.backend_name().to_lowercase();
        let index =
            all_devices().into_iter().filter(|d| d.backend_name().eq_ignore_ascii_case(&family)).position(|d| d == *self).unwrap_or(0);
        let n_same = all_devices().iter().filter(|d| d.backend_name().eq_ignore_ascii_case(&family)).count();
        if self.kind() == DeviceKind::Cpu || n_same <= 1 && family != "cuda" {
            family
        } else {
            format!("{family}:{index}")
        }
    }

    /// The feature flags its registry reports (`ggml_backend_get_features`), as
    /// `(name, value)` pairs: for CUDA `ARCHS`, `USE_GRAPHS`, `NCCL` (patch 0015), ...
    pub fn features(&self) -> Vec<(String, String)> {
        let name = c"ggml_backend_get_features";
        // SAFETY: registry lookup; the function returns a NULL-name-terminated
        // static array (ggml-backend.h, ggml_backend_get_features_t).
        unsafe {
            let reg = sys::ggml_backend_dev_backend_reg(self.ptr);
            let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            if f.is_null() {
                return Vec::new();
            }
            let f: unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *mut sys::ggml_backend_feature = std::mem::transmute(f);
            let mut p = f(reg);
            let mut out = Vec::new();
            while !p.is_null() && !(*p).name.is_null() {
                out.push((cstr((*p).name), cstr((*p).value)));
                p = p.add(1);
            }
            out
        }
    }

    /// A function its registry exports by name, or null.
    pub(crate) fn proc_address(&self, name: &CStr) -> *mut std::ffi::c_void {
        // SAFETY: valid registry device; lookup only.
        unsafe { sys::ggml_backend_reg_get_proc_address(sys::ggml_backend_dev_backend_reg(self.ptr), name.as_ptr()) }
    }

    pub(crate) fn raw(&self) -> sys::ggml_backend_dev_t {
        self.ptr
    }
}

fn all_devices() -> Vec<Device> {
    log::init();
    // SAFETY: registry queries with in-range indices.
    let n = unsafe { sys::ggml_backend_dev_count() };
    (0..n).map(|i| Device { ptr: unsafe { sys::ggml_backend_dev_get(i) } }).collect()
}

/// Every device ggml knows now (built-in backends and loaded modules).
pub fn devices() -> Vec<Device> {
    all_devices()
}

/// Find a device by the name a user types: `cpu`, `cuda` (first CUDA device),
/// `cuda:N`, `metal`, or ggml's own device name (`CUDA0`), case-insensitive.
///
/// # Errors
/// [`Error::Backend`] listing the available devices when none matches.
pub fn device_by_name(name: &str) -> Result<Device> {
    let want = name.trim().to_lowercase();
    let devs = all_devices();
    let (family, index) = match want.split_once(':') {
        Some((f, i)) => {
            let i: usize = i.parse().map_err(|_| Error::Backend(format!("device {name:?}: the index after ':' must be a number")))?;
            (f.to_string(), Some(i))
        }
        None => (want.clone(), None),
    };
    if let Some(d) = devs.iter().find(|d| d.name().eq_ignore_ascii_case(&want)) {
        return Ok(*d);
    }
    let fam: Vec<Device> = devs.iter().copied().filter(|d| d.backend_name().eq_ignore_ascii_case(&family)).collect();
    if let Some(d) = fam.get(index.unwrap_or(0)) {
        return Ok(*d);
    }
    let have: Vec<String> = devs.iter().map(|d| d.user_name()).collect();
    Err(Error::Backend(format!(
        "no {name} device or backend found (available: {})",
        if have.is_empty() { "none".to_string() } else { have.join(", ") }
    )))
}

/// Load one backend module (`libggml-cuda.so`, ...) built from the same ggml
/// source; its devices then appear in [`devices`].
///
/// # Errors
/// [`Error::Backend`] when the file does not exist or is not a ggml backend.
pub fn load_backend(path: &Path) -> Result<()> {
    log::init();
    if !sys::BACKEND_DL {
        return Err(Error::Backend(format!(
            "{}: this build links ggml statically and cannot load backend modules (build with the `dynamic` feature)",
            path.display()
        )));
    }
    if !path.is_file() {
        return Err(Error::Backend(format!("{}: no such backend module", path.display())));
    }
    let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| Error::Backend("path contains NUL".into()))?;
    // SAFETY: valid C string; ggml returns NULL on failure.
    let reg = unsafe { sys::ggml_backend_load(c.as_ptr()) };
    if reg.is_null() {
        let why = log::take_last_error().unwrap_or_else(|| "not a ggml backend module".into());
        return Err(Error::Backend(format!("{}: {why}", path.display())));
    }
    Ok(())
}

/// Load every backend module found in `dir` (`libggml-<name>[-variant].so`)
/// whose backend is not registered yet (so a module is never loaded twice).
/// A folder with no module loads nothing.
///
/// # Errors
/// [`Error::Backend`] when `dir` does not exist or a module fails to load.
pub fn load_backends_from(dir: &Path) -> Result<()> {
    log::init();
    if !sys::BACKEND_DL {
        return Err(Error::Backend(format!(
            "{}: this build links ggml statically and cannot load backend modules (build with the `dynamic` feature)",
            dir.display()
        )));
    }
    if !dir.is_dir() {
        return Err(Error::Backend(format!("{}: no such backend folder", dir.display())));
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::Backend(format!("{}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let Some(rest) = name.strip_prefix("libggml-") else { continue };
        let Some(stem) = rest.split(".so").next().filter(|_| rest.contains(".so")) else { continue };
        let family = stem.split('-').next().unwrap_or(stem);
        if family == "base" || family.is_empty() {
            continue;
        }
        let c = CString::new(family).map_err(|_| Error::Backend("bad module name".into()))?;
        // SAFETY: valid C string; registry lookup only.
        if !unsafe { sys::ggml_backend_reg_by_name(c.as_ptr()) }.is_null() {
            continue;
        }
        load_backend(&path)?;
    }
    Ok(())
}

static DEFAULT_BACKENDS: std::sync::Once = std::sync::Once::new();

/// In builds with loadable backends, load the modules next to the executable
/// and next to the shared ggml library it loaded (the CPU module among them),
/// and the one named by `GGML_BACKEND_PATH`, once; a no-op when backends are
/// linked in.
pub fn load_default_backends() {
    log::init();
    if !sys::BACKEND_DL {
        return;
    }
    DEFAULT_BACKENDS.call_once(|| {
        let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf));
        if let Some(dir) = &exe_dir {
            let _ = load_backends_from(dir);
        }
        // The modules are built beside the shared ggml libraries, which the
        // executable may have found elsewhere (rpath, LD_LIBRARY_PATH).
        let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if let Some(dir) = ggml_library_dir().filter(|d| exe_dir.as_deref().map(canon) != Some(canon(d))) {
            let _ = load_backends_from(&dir);
        }
        if let Some(p) = std::env::var_os("GGML_BACKEND_PATH") {
            let _ = load_backend(Path::new(&p));
        }
    });
}

/// The folder of the shared library that holds ggml's code (`libggml-base`),
/// from the dynamic loader (`dladdr`).
#[cfg(unix)]
fn ggml_library_dir() -> Option<std::path::PathBuf> {
    #[repr(C)]
    struct DlInfo {
        fname: *const std::ffi::c_char,
        fbase: *mut std::ffi::c_void,
        sname: *const std::ffi::c_char,
        saddr: *mut std::ffi::c_void,
    }
    extern "C" {
        fn dladdr(addr: *const std::ffi::c_void, info: *mut DlInfo) -> std::ffi::c_int;
    }
    let mut info = DlInfo { fname: std::ptr::null(), fbase: std::ptr::null_mut(), sname: std::ptr::null(), saddr: std::ptr::null_mut() };
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    let ok = unsafe { dladdr(sys::ggml_init as *const std::ffi::c_void, &mut info) };
    if ok == 0 || info.fname.is_null() {
        return None;
    }
    let path = std::path::PathBuf::from(cstr(info.fname));
    path.parent().filter(|p| p.is_dir()).map(Path::to_path_buf)
}

#[cfg(not(unix))]
fn ggml_library_dir() -> Option<std::path::PathBuf> {
    None
}

struct BackendInner {
    ptr: sys::ggml_backend_t,
    device: Device,
    /// The threads last set ([`Backend::set_n_threads`]), for backends that have them.
    n_threads: std::cell::Cell<Option<usize>>,
}

impl Drop for BackendInner {
    fn drop(&mut self) {
        // SAFETY: we own the backend; every user (schedulers) holds an Rc to us.
        unsafe { sys::ggml_backend_free(self.ptr) };
    }
}

/// A started backend (a stream on one device). Cheap to clone: clones share it,
/// and it is freed when the last clone (including the ones held by schedulers
/// and buffers) goes away.
#[derive(Clone)]
pub struct Backend {
    inner: Rc<BackendInner>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.name())
    }
}

impl Backend {
    /// Start a backend on `device`; a CPU backend with [`default_n_threads`]
    /// threads (ggml's own default is 4 whatever the machine).
    pub fn new(device: Device) -> Result<Backend> {
        log::init();
        // SAFETY: valid device; NULL params.
        let ptr = unsafe { sys::ggml_backend_dev_init(device.raw(), std::ptr::null()) };
        if ptr.is_null() {
            return Err(Error::Backend(format!("cannot start a backend on {}", device.name())));
        }
        let b = Backend { inner: Rc::new(BackendInner { ptr, device, n_threads: std::cell::Cell::new(None) }) };
        b.set_n_threads(default_n_threads());
        Ok(b)
    }

    /// Start the backend for a user-typed device name (see [`device_by_name`]).
    pub fn by_name(name: &str) -> Result<Backend> {
        load_default_backends();
        Backend::new(device_by_name(name)?)
    }

    /// The CPU backend, with [`default_n_threads`] threads (as [`Backend::new`]).
    pub fn cpu() -> Result<Backend> {
        load_default_backends();
        let dev = all_devices()
            .into_iter()
            .find(|d| d.kind() == DeviceKind::Cpu)
            .ok_or_else(|| Error::Backend("no CPU backend (is libggml-cpu loadable?)".into()))?;
        Backend::new(dev)
    }

    /// The device this backend runs on.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// ggml's backend name (`"CPU"`, `"CUDA0"`).
    pub fn name(&self) -> String {
        // SAFETY: live backend.
        cstr(unsafe { sys::ggml_backend_name(self.inner.ptr) })
    }

    /// True for the CPU backend.
    pub fn is_cpu(&self) -> bool {
        self.device().kind() == DeviceKind::Cpu
    }

    /// A function the backend's registry exports by name
    /// (`ggml_backend_reg_get_proc_address`), or null.
    pub(crate) fn proc_address(&self, name: &CStr) -> *mut std::ffi::c_void {
        self.inner.device.proc_address(name)
    }

    /// Set the number of threads, for backends that have threads (the CPU):
    /// `n` is taken between 1 and ggml's `GGML_MAX_N_THREADS` (512). More
    /// threads than cores slow a step down (each op waits for all of them).
    /// Returns false when the backend has no such setting.
    pub fn set_n_threads(&self, n: usize) -> bool {
        let f = self.proc_address(c"ggml_backend_set_n_threads");
        if f.is_null() {
            return false;
        }
        let n = n.clamp(1, sys::GGML_MAX_N_THREADS as usize);
        // SAFETY: the registry exports this name with this signature (ggml-cpu.h); live backend.
        unsafe {
            let f: unsafe extern "C" fn(sys::ggml_backend_t, i32) = std::mem::transmute(f);
            f(self.inner.ptr, n as i32);
        }
        self.inner.n_threads.set(Some(n));
        true
    }

    /// The threads the backend runs ops with ([`set_n_threads`](Self::set_n_threads)),
    /// or `None` for a backend without threads (a GPU's).
    pub fn n_threads(&self) -> Option<usize> {
        self.inner.n_threads.get()
    }

    /// Choose how f32 matrix products are computed, for backends with a choice
    /// (CUDA through our patches 0009 and 0018: `High` is ggml's TF32
    /// tensor-core default, `Highest` full f32, `Medium` bf16 products with f32
    /// accumulation). Returns false, changing nothing, when the backend has no
    /// such setting (the CPU always computes in f32).
    pub fn set_matmul_precision(&self, p: MatmulPrecision) -> bool {
        let f = self.proc_address(c"ggml_backend_cuda_set_matmul_precision");
        if f.is_null() {
            return false;
        }
        // SAFETY: patch 0009 exports this name as void(ggml_backend_t, int); it
        // ignores backends that are not CUDA; live backend.
        unsafe {
            let f: unsafe extern "C" fn(sys::ggml_backend_t, i32) = std::mem::transmute(f);
            // 0: TF32, 1: f32 (patch 0009), 2: bf16 (patch 0018).
            let mode = match p {
                MatmulPrecision::High => 0,
                MatmulPrecision::Highest => 1,
                MatmulPrecision::Medium => 2,
            };
            f(self.inner.ptr, mode);
        }
        true
    }

    /// Whether the backend can run the op that produces `t`.
    pub fn supports(&self, t: crate::Tensor<'_>) -> bool {
        // SAFETY: live backend and tensor.
        unsafe { sys::ggml_backend_supports_op(self.inner.ptr, t.raw()) }
    }

    /// Wait for queued work to finish.
    pub fn synchronize(&self) {
        // SAFETY: live backend.
        unsafe { sys::ggml_backend_synchronize(self.inner.ptr) }
    }

    pub(crate) fn raw(&self) -> sys::ggml_backend_t {
        self.inner.ptr
    }
}

/// [`Error::OutOfMemory`] when `needed` bytes exceed `backend`'s free memory
/// (as its device reports it; a device reporting 0 is not checked), or, on the
/// CPU, what the process's address-space limit (`ulimit -v`) leaves: past it
/// ggml's allocations fail, and ggml aborts.
pub(crate) fn check_fits(backend: &Backend, needed: u64, what: &str) -> Result<()> {
    let dev = backend.device();
    let (mut free, _) = dev.memory();
    if dev.backend_name().eq_ignore_ascii_case("cpu") {
        if let Some(left) = address_space_left() {
            free = if free == 0 { left } else { free.min(left) };
        }
    }
    if free > 0 && needed > free as u64 {
        return Err(Error::OutOfMemory {
            device: backend.name(),
            what: what.to_string(),
            needed_mib: needed.div_ceil(1 << 20),
            free_mib: free as u64 >> 20,
        });
    }
    Ok(())
}

/// Bytes of host memory available to start new work without swapping:
/// Linux's `MemAvailable` (`/proc/meminfo`, in KiB there), capped by what the
/// process's memory cgroup has left where it sets a limit (a container's
/// `--memory`: [`cgroup_memory_left`]). `None` elsewhere or when it cannot be
/// read (kernels before 3.14 lack the line).
pub fn host_available_memory() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: usize = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.split_whitespace().next()?.parse().ok()?;
    let available = kib.checked_mul(1024)?;
    Some(cgroup_memory_left().map_or(available, |left| left.min(available)))
}

/// Bytes left under the memory limit of the cgroup this process sees as its
/// root (a container's): cgroup v2's `memory.max` less `memory.current`, or
/// v1's `memory.limit_in_bytes` less `memory.usage_in_bytes`, the inactive
/// page cache (reclaimable: `inactive_file`, v1 `total_inactive_file` of
/// `memory.stat`) not counted as used, as `docker stats` counts it. `None`
/// without a limit (`max`, or v1's page-rounded `i64::MAX`) or files.
pub fn cgroup_memory_left() -> Option<usize> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let (limit, usage, stat) = match read("/sys/fs/cgroup/memory.max") {
        Some(max) => (max, read("/sys/fs/cgroup/memory.current")?, read("/sys/fs/cgroup/memory.stat").unwrap_or_default()),
        None => (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.stat").unwrap_or_default(),
        ),
    };
    memory_left(&limit, &usage, &stat)
}

/// [`cgroup_memory_left`] from the files' texts.
fn memory_left(limit: &str, usage: &str, stat: &str) -> Option<usize> {
    let limit: u64 = limit.trim().parse().ok().filter(|&l| l < 1 << 62)?;
    let usage: u64 = usage.trim().parse().ok()?;
    let inactive = |key: &str| stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<u64>().ok());
    let cache = inactive("inactive_file").or_else(|| inactive("total_inactive_file")).unwrap_or(0);
    usize::try_from(limit.saturating_sub(usage.saturating_sub(cache))).ok()
}

/// Bytes this process may still map under its address-space limit, where one
/// is set (Linux: `/proc/self/limits` and `VmSize`); None when unlimited or unknown.
pub(crate) fn address_space_left() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let soft: usize = limits.lines().find(|l| l.starts_with("Max address space"))?.split_whitespace().nth(3)?.parse().ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let vm_kib: usize = status.lines().find(|l| l.starts_with("VmSize:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(soft.saturating_sub(vm_kib.saturating_mul(1024)).max(1))
}

/// [`Error::OutOfMemory`] when a host arena of `bytes` (a ggml context, which
/// ggml allocates or aborts) would pass the address-space limit.
pub(crate) fn check_host_arena(bytes: usize, what: &str) -> Result<()> {
    match address_space_left() {
        Some(left) if bytes > left => Err(Error::OutOfMemory {
            device: "CPU".into(),
            what: what.to_string(),
            needed_mib: (bytes as u64).div_ceil(1 << 20),
            free_mib: left as u64 >> 20,
        }),
        _ => Ok(()),
    }
}

/// The number of CPU threads to use by default: the machine's available parallelism.
pub fn default_n_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cgroup_limit_caps_free_memory_less_its_inactive_cache() {
        use super::memory_left;
        let stat = "anon 100\nfile 900\ninactive_file 300\nactive_file 600\n";
        assert_eq!(memory_left("1000\n", "800\n", stat), Some(500));
        assert_eq!(memory_left("1000\n", "800\n", "total_inactive_file 100\n"), Some(300));
        assert_eq!(memory_left("max\n", "800\n", stat), None);
        assert_eq!(memory_left("9223372036854771712\n", "800\n", stat), None);
        assert_eq!(memory_left("1000", "1200", ""), Some(0));
    }
}
