//! The GPU side of `roger bench`, run from the parent: find the driver and cuBLAS (plain
//! dlopen), start the `--worker` child, sample the GPUs from a thread while it runs, and
//! attribute the samples to the worker's GPU by UUID. Any failure is a reason in words.

use super::libs;
use super::load::Load;
use super::Measured;
use crate::gpu::spec::Dtype;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the worker is asked to measure.
pub struct Job {
    pub gpu: usize,
    pub sizes: Vec<usize>,
    pub iters: usize,
    pub dtypes: Vec<Dtype>,
    pub timeout: Duration,
}

/// What the GPU side produced: the worker's measurement and the parent's samples.
pub struct GpuRun {
    pub measured: Measured,
    pub cublas: Option<String>,
    pub reader: Option<String>,
    pub load: Option<Load>,
    /// Why the samples could not be attributed to the bench's GPU.
    pub load_note: Option<String>,
}

/// How often the parent samples the GPU while the worker runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Run the worker while a thread samples the GPUs; a failure is the reason, in words.
pub fn run(job: &Job, gpu_cfg: &crate::config::GpuConfig) -> std::result::Result<GpuRun, String> {
    if !libs::driver_present() {
        return Err(format!(
            "no NVIDIA driver: {} could not be loaded (use --device cpu for the CPU GEMM)",
            libs::DRIVER_NAMES.join(", ")
        ));
    }
    let mut cublas = None;
    let ld = match libs::locate_cublas() {
        libs::Cublas::OnLoaderPath => None,
        libs::Cublas::Found(f) => {
            cublas = Some(format!("found {} (added its directory to the worker's LD_LIBRARY_PATH)", f.display()));
            f.parent().map(Path::to_path_buf)
        }
        libs::Cublas::Missing { searched } => return Err(format!(
            "cuBLAS (libcublas.so.12) not found: install the CUDA 12 toolkit or `pip install nvidia-cublas-cu12`, or put its directory on LD_LIBRARY_PATH; searched {}",
            searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )),
    };
    // Throttle reasons and clocks under load are the telling ones: read them while the worker
    // runs, not after it exited.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let cfg = gpu_cfg.clone();
        std::thread::spawn(move || {
            let mut reader = crate::gpu::open_reader(&cfg);
            let mut snaps = Vec::new();
            let mut first_error = None;
            loop {
                match reader.read() {
                    Ok(s) => snaps.push(s),
                    Err(e) => {
                        first_error.get_or_insert(e.to_string());
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            (snaps, first_error, reader.describe())
        })
    };
    let mut worker_pid = None;
    let result = super::cuda::run_in_child(
        job.gpu,
        &job.sizes,
        job.iters,
        &job.dtypes,
        job.timeout,
        ld.as_deref(),
        |pid| worker_pid = Some(pid),
    );
    stop.store(true, Ordering::Relaxed);
    let (snaps, read_error, reader) = sampler.join().unwrap_or_else(|_| {
        (
            Vec::new(),
            Some("the GPU sampler thread panicked".into()),
            String::new(),
        )
    });
    let measured = result.map_err(|e| format!("{e:#}"))?;
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let (load, load_note) = match snaps.last() {
        None => (
            None,
            Some(format!(
                "the GPU could not be sampled during the bench: {}",
                read_error.unwrap_or_else(|| "no reading".into())
            )),
        ),
        Some(last) => match super::load::target_gpu(
            &last.gpus,
            measured.uuid.as_deref(),
            job.gpu,
            visible.as_deref(),
        ) {
            Ok(i) => (Some(super::load::summarise(&snaps, i, worker_pid)), None),
            Err(why) => (None, Some(why)),
        },
    };
    Ok(GpuRun {
        measured,
        cublas,
        reader: Some(reader).filter(|r| !r.is_empty()),
        load,
        load_note,
    })
}
