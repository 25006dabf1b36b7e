//! `roger probe`: the machine under the run — GPUs, who holds VRAM, host memory, disks and
//! filesystem kinds — as a table or `--json`; or `--record F` to save GPU snapshots for replay.

use crate::cmd::Global;
use crate::gpu::checks::Level;
use crate::gpu::{replay::Recording, GpuReader};
use crate::ledger::{Entry, Kind, Ledger};
use crate::outln;
use crate::probe::{self, fmt_bytes, ProbeReport};
use crate::sys::fsx::{self, Durability, Replace};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write GPU snapshots to FILE as a replay recording ({"snapshots": [...]}) instead of judging.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Snapshots to record.
    #[arg(long, default_value_t = 3, requires = "record", value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub samples: u32,
    /// Time between recorded snapshots ("1s", "500ms").
    #[arg(long, default_value = "1s", requires = "record", value_parser = crate::config::units::parse_duration)]
    pub every: std::time::Duration,
    /// GPU source for this run: auto, nvml, smi, none, replay (default: the config's [gpu] source).
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// Recording to replay (implies --source replay).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Do not write the result to the ledger.
    #[arg(long)]
    pub no_ledger: bool,
    /// Also show the ranks in this process's tree (a torchrun launcher or a rank): RANK,
    /// LOCAL_RANK, WORLD_SIZE from each process's environment, and its GPU.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

pub fn run(global: &Global, args: ProbeArgs) -> Result<u8> {
    let cfg = crate::config::discover(global.config.as_deref())?;
    let mut gpu_cfg = cfg.as_ref().map(|c| c.gpu.clone()).unwrap_or_default();
    if let Some(s) = &args.source {
        gpu_cfg.source = s.clone();
    }
    if let Some(r) = &args.replay {
        gpu_cfg.source = "replay".into();
        gpu_cfg.replay = Some(r.clone());
    }
    let mut reader = crate::gpu::open_reader(&gpu_cfg);
    if let Some(file) = &args.record {
        return record(reader.as_mut(), file, args.samples, args.every);
    }
    let disk = cfg.as_ref().map(|c| c.disk.clone()).unwrap_or_default();
    let mut report = probe::collect(
        &probe::ProbeInputs {
            cfg: cfg.as_ref(),
            disk,
            gpu_expected: gpu_cfg.source != "none",
        },
        reader.as_mut(),
    );
    if let Some(pid) = args.pid {
        report.ranks = Some(ranks_of(pid, reader.as_mut())?);
    }
    if let (Some(c), false) = (&cfg, args.no_ledger) {
        write_ledger(&Ledger::new(c.ledger_path()), &c.run.name, &report)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
    }
    Ok(report.exit_code)
}

/// The rank map of `pid`'s tree, each rank on the GPU NVML lists it (or a process of it) on.
fn ranks_of(pid: u32, reader: &mut dyn GpuReader) -> Result<Vec<crate::ranks::Rank>> {
    use crate::sys::proc::{ProcFs, ProcSource};
    let fs = ProcFs::default();
    if fs.stat(pid)?.is_none() {
        bail!("--pid {pid}: no such process");
    }
    let tree = crate::sys::proc::tree(&fs, &[pid])?;
    let envs = tree
        .iter()
        .filter_map(|st| {
            let raw = crate::sys::environ::read(st.id.pid)?;
            Some((st.id, crate::ranks::parse_environ(&raw)?))
        })
        .collect();
    let mut ranks = crate::ranks::rank_map(&tree, &envs);
    if let Ok(snap) = reader.read() {
        let members = crate::ranks::members(&tree, &ranks);
        for r in &mut ranks {
            r.gpu = members.get(&r.rank).into_iter().flatten().find_map(|id| {
                snap.processes
                    .iter()
                    .find(|p| p.pid == id.pid)
                    .map(|p| p.gpu)
            });
        }
    }
    Ok(ranks)
}

fn record(
    reader: &mut dyn GpuReader,
    file: &std::path::Path,
    samples: u32,
    every: std::time::Duration,
) -> Result<u8> {
    let mut rec = Recording::default();
    for i in 0..samples {
        if i > 0 {
            std::thread::sleep(every);
        }
        let snap = reader.read().map_err(|e| anyhow::anyhow!("{e}"))?;
        rec.snapshots.push(snap);
    }
    // Durable: a recording is a measurement taken over minutes that nothing can rebuild.
    let text = serde_json::to_string_pretty(&rec)? + "\n";
    let how = Replace::new(Durability::Durable, 0o666);
    fsx::write_atomic(file, text.as_bytes(), how)
        .with_context(|| format!("writing {}", file.display()))?;
    let gpus = rec.snapshots.first().map_or(0, |s| s.gpus.len());
    outln!(
        "recorded {samples} snapshot(s) of {gpus} GPU(s) to {}",
        file.display()
    );
    if gpus == 0 {
        bail!("the recording holds no GPUs");
    }
    Ok(crate::exit::OK)
}

fn write_ledger(ledger: &Ledger, run: &str, r: &ProbeReport) -> Result<()> {
    let gpus: Vec<String> = r
        .gpus
        .iter()
        .map(|g| format!("{}: {}", g.index, g.name))
        .collect();
    let findings: Vec<serde_json::Value> = r
        .findings
        .iter()
        .filter(|f| f.level >= Level::Warn)
        .map(|f| serde_json::json!({"level": f.level, "check": f.check, "message": f.message}))
        .collect();
    let entry = Entry::new(Kind::Probe, "probe", run)
        .field("status", &r.status)
        .field("gpu_source", &r.gpu_source)
        .field("gpu_reader", &r.gpu_reader)
        .field("gpu_fallback", &r.gpu_fallback)
        .field("pid_namespace", &r.pid_namespace)
        .field("gpus", gpus)
        .field(
            "vram_holders",
            r.holders.iter().map(|h| h.pid).collect::<Vec<_>>(),
        )
        .field(
            "orphaned",
            r.holders
                .iter()
                .filter(|h| h.orphaned.is_some())
                .map(|h| h.pid)
                .collect::<Vec<_>>(),
        )
        .field("findings", findings);
    let entry = match &r.ranks {
        Some(ranks) => entry.field("ranks", ranks),
        None => entry,
    };
    ledger.append(entry, chrono::Utc::now()).with_context(|| {
        format!(
            "writing the probe to the ledger {}",
            ledger.path().display()
        )
    })?;
    Ok(())
}

fn na<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("n/a".into(), |v| v.to_string())
}

fn print_human(r: &ProbeReport) {
    if let Some(ranks) = &r.ranks {
        if ranks.is_empty() {
            outln!("Ranks: none (no process of the tree has RANK in its environment)");
        } else {
            outln!("Ranks: {}", crate::ranks::map_line(ranks));
        }
    }
    match (&r.gpu_source, &r.gpu_error) {
        (Some(src), _) => outln!("GPUs ({})", r.gpu_reader.as_deref().unwrap_or(src.as_str())),
        (None, Some(e)) => outln!("GPUs: {e}"),
        (None, None) => outln!("GPUs: none"),
    }
    if let Some(why) = &r.gpu_fallback {
        outln!("  reader fallback: {why}");
    }
    for g in &r.gpus {
        if let Some(e) = &g.error {
            outln!("  {} {}", g.index, e);
            continue;
        }
        let mem = match (g.memory_used, g.memory_total) {
            (Some(u), Some(t)) => format!("{} / {}", fmt_bytes(u), fmt_bytes(t)),
            _ => "n/a".into(),
        };
        let power = match (g.power_w, g.power_limit_w) {
            (Some(p), Some(l)) => format!("{p:.0}/{l:.0} W"),
            (Some(p), None) => format!("{p:.0} W"),
            _ => "n/a".into(),
        };
        let clocks = format!("{}/{} MHz", na(g.sm_clock_mhz), na(g.sm_clock_max_mhz));
        outln!(
            "  {} {:<24} mem {mem}  util {}%  {}°C  {power}  sm {clocks}",
            g.index,
            g.name,
            na(g.util),
            na(g.temperature_c)
        );
        let throttle = if g.throttle.is_empty() {
            "none".into()
        } else {
            g.throttle.join(", ")
        };
        outln!(
            "    throttle: {throttle}  ecc uncorrected: {}  corrected: {}",
            na(g.ecc_uncorrected),
            na(g.ecc_corrected)
        );
    }
    if !r.holders.is_empty() {
        outln!("VRAM holders");
        for h in &r.holders {
            let mem = h.used_memory.map_or("n/a".into(), fmt_bytes);
            let flag = match (&h.orphaned, h.known_run) {
                (Some(why), _) => format!("  ORPHANED? {why}"),
                (None, true) => "  (run known to the ledger)".into(),
                _ => String::new(),
            };
            let cmd = h.cmdline.clone().unwrap_or_else(|| {
                if r.pid_namespace.is_some() {
                    "(host PID: roger is in a container's PID namespace)".into()
                } else if h.visible {
                    "?".into()
                } else {
                    "(not visible here)".into()
                }
            });
            let gpu = if h.gpu == crate::gpu::UNKNOWN_GPU {
                "?".to_string()
            } else {
                h.gpu.to_string()
            };
            outln!("  pid {:<8} gpu {gpu} {:>10}  {cmd}{flag}", h.pid, mem);
        }
        if r.per_process_vram_unavailable {
            outln!("  n/a: the driver does not report per-process VRAM under WDDM (WSL2/Windows)");
        }
    }
    if let Some(hv) = &r.host_view {
        outln!("Windows host view ({})", hv.program.display());
        match (&hv.snapshot, &hv.error) {
            (Some(s), _) => {
                for g in &s.gpus {
                    let used = g.memory_used.map_or("n/a".into(), fmt_bytes);
                    let total = g.memory_total.map_or("n/a".into(), fmt_bytes);
                    outln!(
                        "  {} {}: {used} / {total} used (all Windows and Linux processes)",
                        g.index,
                        g.name
                    );
                }
            }
            (None, Some(e)) => outln!("  unavailable: {e}"),
            _ => {}
        }
    }
    match (&r.memory, &r.memory_error) {
        (Some(m), _) => outln!(
            "Host memory: {} available of {} ({:.0}%), swap {} used of {}",
            fmt_bytes(m.available),
            fmt_bytes(m.total),
            m.available_share() * 100.0,
            fmt_bytes(m.swap_used()),
            fmt_bytes(m.swap_total)
        ),
        (None, Some(e)) => outln!("Host memory: unknown ({e})"),
        _ => {}
    }
    if let Some(w) = &r.wsl {
        outln!(
            "WSL{} {}{}",
            w.version,
            w.distro.as_deref().unwrap_or(""),
            if w.interop { " (interop on)" } else { "" }
        );
    }
    outln!("Paths");
    for p in &r.paths {
        let free = match (p.headroom, &p.space) {
            (Some(h), Some(s)) => {
                let by = if p.limited_by == Some(crate::sys::wsl::Limit::Host) {
                    " (host drive)"
                } else {
                    ""
                };
                format!("{} free{by} of {}", fmt_bytes(h), fmt_bytes(s.total))
            }
            _ => format!("free n/a ({})", p.error.as_deref().unwrap_or("?")),
        };
        outln!(
            "  {:<12} {:<9} {free}  {}",
            p.role,
            p.fs.class.as_str(),
            p.path.display()
        );
    }
    match (&r.kernel_xids.source, &r.kernel_xids.unreadable) {
        (Some(src), _) => outln!("Kernel log XIDs ({src}): {}", r.kernel_xids.xids.len()),
        (None, Some(why)) => outln!("Kernel log XIDs: not readable ({why})"),
        _ => {}
    }
    for f in r.findings.iter().filter(|f| f.level > Level::Ok) {
        outln!("{:<5} {}: {}", f.level.as_str(), f.check, f.message);
    }
    outln!(
        "probe: {}",
        crate::colour::status(&r.status, crate::colour::stdout())
    );
}
