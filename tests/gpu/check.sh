#!/usr/bin/env bash
# GPU check for roger on a real NVIDIA machine: build (or reuse) the release binary, then run
# `roger probe --json`, `roger probe --record`, a replay of that recording, and `roger bench`
# (all dtypes, then a small MFU arbitration run), printing every result. Every step is
# bounded with `timeout`, sizes are fixed, and a failing step does not stop the others.
#
#   tests/gpu/check.sh                 # writes results under $OUT (or a temp dir)
#   ROGER_BIN=/path/to/roger tests/gpu/check.sh   # reuse a binary (no cargo / no network)
#
# cuBLAS: roger finds it on the loader path, in /usr/local/cuda*, or inside a PyTorch install
# (site-packages/nvidia/cublas/lib) and says where.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$(mktemp -d /tmp/roger-gpu-check.XXXXXX)}"
mkdir -p "$OUT"
step() { printf '\n===== %s\n' "$*"; }
run() { # run LIMIT_S CMD...: bounded, prints the exit code, never aborts the script
  local limit=$1; shift
  timeout -k 10 "$limit" "$@"
  local rc=$?
  echo "(exit $rc)"
  return 0
}

BIN="${ROGER_BIN:-}"
if [ -z "$BIN" ]; then
  if command -v cargo >/dev/null 2>&1; then
    step "cargo build --release (offline first; this machine may have no network)"
    run 900 cargo build --release --locked --offline || true
    [ -x target/release/roger ] || run 900 cargo build --release --locked
  fi
  BIN=target/release/roger
fi
if [ ! -x "$BIN" ]; then
  echo "no roger binary at $BIN: set ROGER_BIN or install cargo" >&2
  exit 1
fi
step "roger --version"; run 10 "$BIN" --version

step "driver"
if command -v nvidia-smi >/dev/null 2>&1; then
  run 30 nvidia-smi -L
  run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
else
  echo "nvidia-smi not on PATH"
fi
step "cuBLAS candidates (PyTorch installs included)"
for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu \
         $(python3 -c 'import site;print(" ".join(site.getsitepackages()))' 2>/dev/null | sed 's#\([^ ]*\)#\1/nvidia/cublas/lib#g'); do
  ls "$d"/libcublas.so* 2>/dev/null
done | sort -u | head -20

step "roger probe --json"
run 120 "$BIN" probe --json --no-ledger | tee "$OUT/probe.json"
step "roger probe (table)"
run 120 "$BIN" probe --no-ledger | tee "$OUT/probe.txt"
step "roger probe --record (3 samples, 1 s apart)"
run 120 "$BIN" probe --record "$OUT/recording.json" --samples 3 --every 1s --no-ledger
head -c 3000 "$OUT/recording.json" 2>/dev/null; echo
step "replay of that recording"
run 60 "$BIN" probe --replay "$OUT/recording.json" --no-ledger

step "roger bench (fp32, tf32, fp16, bf16 at 1024..8192; bandwidth)"
run 420 "$BIN" bench --json --no-ledger --timeout 6m | tee "$OUT/bench.json"
step "roger bench MFU arbitration (bf16 at 8192; a GPT-2-small-like run at 50k tokens/s)"
cat > "$OUT/roger.toml" <<'TOML'
[run]
name = "gpu-check"
[bench]
params = 124e6
layers = 12
hidden = 768
seq_len = 1024
TOML
run 180 "$BIN" --config "$OUT/roger.toml" bench --no-ledger --device gpu --dtypes bf16 --sizes 8192 --iters 10 --tokens-per-s 50000 --timeout 2m | tee "$OUT/bench_mfu.txt"
step "roger bench (table, bf16 and fp32 only)"
run 180 "$BIN" bench --no-ledger --device gpu --dtypes fp32,bf16 --sizes 4096,8192 --timeout 2m | tee "$OUT/bench.txt"

step "results are in $OUT"
ls -l "$OUT"
