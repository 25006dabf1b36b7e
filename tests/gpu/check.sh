#!/usr/bin/env bash
# roger on a real NVIDIA machine, judged: exits 0 only when every check passes, 1 with the
# reasons when one fails (no GPU or no driver included), 2 when it cannot check at all (no
# binary, no python3).
# Needs a prebuilt release binary (it never builds: `cargo build --release --locked` first,
# or point ROGER_BIN at one) and python3 (to read roger's JSON). About a minute on an H100-class
# GPU; every step is bounded, so at most about 8 minutes even when steps hang.
#
#   tests/gpu/check.sh                               # uses target/release/roger
#   ROGER_BIN=/path/to/roger OUT=/tmp/gpucheck tests/gpu/check.sh
#   MIN_RATIO=0.6 GPU=0                              # the defaults
#
# Checks (each result and reason goes to $OUT/verdict.json and stderr):
#   reader      `probe --source auto` reads through NVML (no fallback to nvidia-smi)
#   nvml_vs_smi `probe --source nvml` and `--source smi` list the same GPUs (index, name,
#               UUID; total memory within 2%)
#   bench       `bench --json` runs on GPU $GPU: bf16 GEMM >= MIN_RATIO of the spec and
#               device-to-device bandwidth >= MIN_RATIO of the spec
#   vram        a probe taken while a bench worker runs sees that worker's own VRAM
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$(mktemp -d /tmp/roger-gpu-check.XXXXXX)}"
BIN="${ROGER_BIN:-target/release/roger}"
MIN_RATIO="${MIN_RATIO:-0.6}"
GPU="${GPU:-0}"
mkdir -p "$OUT"
export OUT MIN_RATIO GPU

step() { printf '\n===== %s\n' "$*" >&2; }
cannot() { echo "check.sh: cannot check: $*" >&2; exit 2; }

[ -x "$BIN" ] || cannot "no roger binary at $BIN: build one (cargo build --release --locked) or set ROGER_BIN"
command -v python3 >/dev/null 2>&1 || cannot "python3 is needed to read roger's JSON"
command -v timeout >/dev/null 2>&1 || cannot "timeout (coreutils) is needed to bound each step"

# run NAME LIMIT_S ARGS...: roger's stdout to $OUT/NAME.json, stderr to $OUT/NAME.err, exit
# code to $OUT/NAME.rc; never stops the script (the judge reads all three).
run() {
  local name=$1 limit=$2 rc=0
  shift 2
  timeout -k 10 "$limit" "$BIN" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || rc=$?
  echo "$rc" >"$OUT/$name.rc"
  echo "roger $* -> exit $rc" >&2
}

step "roger $("$BIN" --version 2>&1 || true)"
step "NVIDIA libraries the loader can find"
{
  ldconfig -p 2>/dev/null | grep -E 'libnvidia-ml\.so|libcuda\.so|libcublas(Lt)?\.so' || echo "(ldconfig lists none)"
  for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/cuda/lib64 \
           $(python3 -c 'import site; print(" ".join(p + "/nvidia/cublas/lib" for p in site.getsitepackages()))' 2>/dev/null || true); do
    ls "$d"/libcublas.so* "$d"/libnvidia-ml.so* 2>/dev/null || true
  done
} | sort -u | tee "$OUT/libraries.txt" >&2
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >&2 || true
else
  echo "nvidia-smi is not on PATH (the nvml_vs_smi check will fail)" >&2
fi

step "probes: auto, NVML, nvidia-smi"
run probe_auto 45 probe --json --no-ledger --source auto
run probe_nvml 45 probe --json --no-ledger --source nvml
run probe_smi 45 probe --json --no-ledger --source smi

step "bench --json on GPU $GPU"
run bench 200 bench --json --no-ledger --device gpu --gpu "$GPU" --timeout 3m

step "probe while a bench worker runs"
# fp32 at 8192 keeps the worker busy for seconds (minutes on a small GPU).
timeout -k 5 150 "$BIN" bench --json --no-ledger --device gpu --gpu "$GPU" \
  --dtypes fp32,bf16 --sizes 8192 --iters 300 --timeout 140s >"$OUT/bench_bg.json" 2>"$OUT/bench_bg.err" &
bg=$!
seen=0
deadline=$((SECONDS + 150))
while [ "$SECONDS" -lt "$deadline" ]; do
  run probe_during 30 probe --json --no-ledger --source auto
  if python3 - "$OUT/probe_during.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(1)
ok = any((h.get("used_memory") or 0) > 0 and "--worker" in (h.get("cmdline") or "") for h in r.get("holders", []))
sys.exit(0 if ok else 1)
PY
  then
    seen=1
    cp "$OUT/probe_during.json" "$OUT/probe_during_seen.json"
    break
  fi
  kill -0 "$bg" 2>/dev/null || break
  sleep 0.5
done
echo "worker seen by a probe: $seen" >&2
wait "$bg" || true  # ends by itself in seconds; timeout stops its whole process group at 150 s

step "verdict"
python3 - <<'PY'
import json, os, sys

out, min_ratio, gpu = os.environ["OUT"], float(os.environ["MIN_RATIO"]), int(os.environ["GPU"])
checks = []

def check(name, ok, detail):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", file=sys.stderr)

def load(name):
    """roger's JSON report for a step, or why there is none."""
    rc = open(f"{out}/{name}.rc").read().strip() if os.path.exists(f"{out}/{name}.rc") else "?"
    try:
        return json.load(open(f"{out}/{name}.json")), rc
    except Exception as e:
        err = open(f"{out}/{name}.err").read().strip()[-500:] if os.path.exists(f"{out}/{name}.err") else ""
        return None, f"exit {rc}, no JSON report ({e}); stderr: {err}"

auto, why = load("probe_auto")
if auto is None:
    check("reader", False, why)
else:
    src, reader, fb = auto.get("gpu_source"), auto.get("gpu_reader") or "", auto.get("gpu_fallback")
    check("reader", src == "nvml" and "NVML" in reader and not fb,
          f"source {src or 'none'}, reader {reader or 'none'}" + (f"; fell back: {fb}" if fb else "")
          + (f"; error: {auto.get('gpu_error')}" if auto.get("gpu_error") else ""))

nv, why_nv = load("probe_nvml")
smi, why_smi = load("probe_smi")
if nv is None or smi is None or not nv.get("gpus") or not smi.get("gpus"):
    check("nvml_vs_smi", False, f"nvml: {why_nv if nv is None else nv.get('gpu_error') or 'ok'}; smi: {why_smi if smi is None else smi.get('gpu_error') or 'ok'}")
else:
    diffs = []
    a, b = nv["gpus"], smi["gpus"]
    if len(a) != len(b):
        diffs.append(f"NVML lists {len(a)} GPUs, nvidia-smi {len(b)}")
    for x, y in zip(a, b):
        for k in ("index", "name", "uuid"):
            if x.get(k) != y.get(k):
                diffs.append(f"GPU {x.get('index')} {k}: NVML {x.get(k)!r} vs nvidia-smi {y.get(k)!r}")
        mx, my = x.get("memory_total"), y.get("memory_total")
        if not mx or not my or abs(mx - my) > 0.02 * max(mx, my):
            diffs.append(f"GPU {x.get('index')} memory_total: NVML {mx} vs nvidia-smi {my}")
    check("nvml_vs_smi", not diffs, "; ".join(diffs) or f"{len(a)} GPU(s) agree (index, name, UUID, memory)")

bench, why = load("bench")
if bench is None or bench.get("gpu_error"):
    check("bench", False, why if bench is None else f"the GPU bench could not run: {bench['gpu_error']}")
else:
    m = bench["measured"]
    bf = next((s for s in bench.get("summaries", []) if s["dtype"] == "bf16"), None)
    bw, bw_ratio = m.get("bandwidth_gbs"), bench.get("bandwidth_ratio")
    problems = []
    if m.get("device") != "gpu":
        problems.append(f"ran on {m.get('device')}, not the GPU")
    if not bench.get("spec_model"):
        problems.append(f"{m.get('name')} has no spec: {bench.get('spec_note')}")
    if bf is None or bf.get("ratio") is None:
        problems.append("no bf16 ratio")
    elif bf["ratio"] < min_ratio:
        problems.append(f"bf16 GEMM reached {bf['best_tflops']:.1f} TFLOPS = {bf['ratio']:.0%} of the {bf['spec_tflops']} spec (below {min_ratio:.0%})")
    if bw_ratio is None:
        problems.append(f"no bandwidth ratio (measured {bw})")
    elif bw_ratio < min_ratio:
        problems.append(f"device-to-device bandwidth {bw:.0f} GB/s = {bw_ratio:.0%} of the {bench.get('bandwidth_spec_gbs')} GB/s spec (below {min_ratio:.0%})")
    load_ = bench.get("load") or {}
    detail = (f"{m.get('name')} ({bench.get('spec_model')}): bf16 {bf['best_tflops']:.1f} TFLOPS ({bf['ratio']:.0%})" if bf and bf.get("ratio") is not None else m.get("name", "?"))
    detail += f", bandwidth {bw_ratio:.0%}" if bw_ratio is not None else ""
    detail += f", {load_.get('loaded_samples', 0)} sample(s) under load, throttle {load_.get('throttle')}"
    check("bench", not problems, "; ".join(problems) or detail)

during, why = load("probe_during_seen") if os.path.exists(f"{out}/probe_during_seen.json") else load("probe_during")
if during is None:
    check("vram", False, why)
else:
    w = [h for h in during.get("holders", []) if "--worker" in (h.get("cmdline") or "")]
    seen = [h for h in w if (h.get("used_memory") or 0) > 0]
    if seen:
        check("vram", True, f"bench worker PID {seen[0]['pid']} holds {seen[0]['used_memory'] / 2**20:.0f} MiB on GPU {seen[0]['gpu']}")
    else:
        check("vram", False, "no probe saw the running bench worker's VRAM: "
              + (f"roger is in PID namespace {during['pid_namespace']} (host PIDs)" if during.get("pid_namespace")
                 else f"holders: {[(h['pid'], h.get('used_memory'), (h.get('cmdline') or '')[:40]) for h in during.get('holders', [])]}"))

json.dump({"ok": all(c["ok"] for c in checks), "min_ratio": min_ratio, "checks": checks},
          open(f"{out}/verdict.json", "w"), indent=2)
failed = [c for c in checks if not c["ok"]]
if failed:
    print(f"check.sh: FAIL ({len(failed)} of {len(checks)}): " + "; ".join(f"{c['check']}: {c['detail']}" for c in failed), file=sys.stderr)
    sys.exit(1)
print(f"check.sh: all {len(checks)} checks pass; results in {out}", file=sys.stderr)
PY
