//! Finding cuBLAS before the CUDA worker starts: cudarc panics when a library or one of its
//! symbols is missing, so the parent only dlopens (never through cudarc) and says where it
//! looked; binding the symbols happens in the worker, which turns a panic into a reason. A driver-only host often has cuBLAS only
//! inside a PyTorch install (`site-packages/nvidia/cublas/lib`); found there, the directory is
//! put on the worker's LD_LIBRARY_PATH and the report says so.

use crate::gpu::dl::Library;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// cuBLAS file names the CUDA 12 build of cudarc can load.
pub const CUBLAS_NAMES: [&str; 2] = ["libcublas.so.12", "libcublas.so"];
/// The CUDA driver library names cudarc tries (Linux, CUDA 12), in its order.
pub const DRIVER_NAMES: [&str; 3] = ["libcuda.so", "libcuda.so.12", "libcuda.so.1"];

/// Where cuBLAS may live besides the loader's default path.
pub fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib/wsl/lib",
    ] {
        dirs.push(d.into());
    }
    dirs.extend(glob_dirs("/usr/local", "cuda-", "lib64"));
    for sp in site_packages() {
        dirs.push(sp.join("nvidia/cublas/lib"));
        dirs.push(sp.join("nvidia/cu13/lib"));
        dirs.push(sp.join("torch/lib"));
    }
    dirs.dedup();
    dirs
}

fn glob_dirs(parent: &str, prefix: &str, sub: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path().join(sub))
        .collect();
    v.sort();
    v.reverse();
    v
}

/// Python site-packages directories: the usual prefixes, conda/venv, and what python3 says.
pub fn site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec![
        "/usr/lib".into(),
        "/usr/local/lib".into(),
        "/opt/conda/lib".into(),
    ];
    for var in ["CONDA_PREFIX", "VIRTUAL_ENV"] {
        if let Some(p) = std::env::var_os(var) {
            roots.push(PathBuf::from(p).join("lib"));
        }
    }
    if let Some(h) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(h).join(".local/lib"));
    }
    let mut out = Vec::new();
    for r in roots {
        for py in glob_dirs(&r.display().to_string(), "python3", "") {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    if let Some(py) = crate::sys::bounded::which("python3") {
        let code = "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))";
        if let Ok(o) = crate::sys::bounded::run(&py, &["-c", code], Duration::from_secs(5)) {
            out.extend(
                o.stdout
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(PathBuf::from),
            );
        }
    }
    out.retain(|p| p.is_dir());
    out.dedup();
    out
}

/// The first cuBLAS library file in the given directories.
pub fn find_in(dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|d| CUBLAS_NAMES.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// How the worker will load cuBLAS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cublas {
    /// The dynamic loader finds it on its own.
    OnLoaderPath,
    /// Found in this file's directory, which goes on the worker's LD_LIBRARY_PATH.
    Found(PathBuf),
    Missing {
        searched: Vec<PathBuf>,
    },
}

pub fn locate_cublas() -> Cublas {
    // Not cudarc's is_culib_present: it binds every symbol with `expect` and panics on an
    // older cuBLAS. A plain dlopen cannot panic; the worker binds the symbols.
    if Library::open_first(&["libcublas.so", "libcublas.so.12"]).is_ok() {
        return Cublas::OnLoaderPath;
    }
    let dirs = candidate_dirs();
    match find_in(&dirs) {
        Some(f) => Cublas::Found(f),
        None => Cublas::Missing { searched: dirs },
    }
}

/// Is the CUDA driver library loadable at all? (A plain dlopen: see `locate_cublas`.)
pub fn driver_present() -> bool {
    Library::open_first(&DRIVER_NAMES).is_ok()
}

/// LD_LIBRARY_PATH with `dir` in front.
pub fn library_path_with(dir: &Path) -> std::ffi::OsString {
    let mut parts = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
        parts.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(parts).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cublas_in_a_pytorch_layout() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir
            .path()
            .join("lib/python3.11/site-packages/nvidia/cublas/lib");
        std::fs::create_dir_all(&lib).unwrap();
        assert_eq!(find_in(std::slice::from_ref(&lib)), None);
        std::fs::write(lib.join("libcublas.so.12"), b"").unwrap();
        assert_eq!(
            find_in(&[dir.path().to_path_buf(), lib.clone()]),
            Some(lib.join("libcublas.so.12"))
        );
        let lp = library_path_with(&lib);
        assert!(std::env::split_paths(&lp).next().unwrap() == lib);
    }

    #[test]
    fn no_cuda_here_is_not_a_panic() {
        let _ = driver_present();
        let _ = locate_cublas();
    }
}
