#!/usr/bin/env python3
"""A minimal training loop that plugs roger in (no framework needed to read it).

What roger needs from a training script:
  1. a metrics log it can read: one JSON object per line (roger.toml [run] log/format),
  2. checkpoints published through `roger publish` (crash-safe copy, latest.json, ledger),
  3. resume from ROGER_RESUME_CKPT / ROGER_RESUME_STEP when `roger watch` relaunches it.

Run it under the watch:
    roger --config roger.toml watch -- python3 examples/train_loop.py --resume {ckpt}
and the critic beside it (tmux):
    roger --config roger.toml critic --daemon
"""
import json
import math
import os
import subprocess
import sys
import time

LOG = os.environ.get("TRAIN_LOG", "train_log.jsonl")
CKPT_DIR = os.environ.get("CKPT_DIR", "ckpt")
STAGING = os.environ.get("STAGING_DIR", "staging")
# Matches roger.example.toml: cosine to 6e-5 over 1200 steps after a 200-step warmup.
TOTAL, WARMUP, PEAK, MIN_LR = 1200, 200, 6e-4, 6e-5
SAVE_EVERY = 100


def lr_at(step):
    if step < WARMUP:
        return PEAK * step / WARMUP
    progress = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return MIN_LR + 0.5 * (PEAK - MIN_LR) * (1 + math.cos(math.pi * progress))


def save_and_publish(step, state):
    os.makedirs(STAGING, exist_ok=True)
    path = os.path.join(STAGING, f"ckpt-{step}.json")
    with open(path, "w") as f:
        json.dump(state, f)
    # roger copies it crash-safely (staging, fsync, verify from disk, atomic rename),
    # updates latest.json, prunes old ones, and records it in the ledger.
    subprocess.run(["roger", "publish", path, "--to", CKPT_DIR, "--step", str(step)], check=True)
    os.remove(path)


def main():
    step = 0
    resume = os.environ.get("ROGER_RESUME_CKPT")
    if resume:
        with open(resume) as f:
            step = json.load(f)["step"]
        print(f"resumed from {resume} at step {step}", file=sys.stderr)
    with open(LOG, "a") as log:
        while step < TOTAL:
            step += 1
            # Inside the example phases' loss bands: [3, 11.5] in warmup, [2.5, 6] after.
            loss = 3.0 + 7.6 * math.exp(-step / 150) + 0.6 * (1 - step / TOTAL)
            row = {"step": step, "loss": loss, "lr": lr_at(step), "grad_norm": 0.8,
                   "tokens_per_s": 52000.0, "vram_gib": 41.5, "time": time.time()}
            log.write(json.dumps(row) + "\n")
            log.flush()
            if step % SAVE_EVERY == 0:
                save_and_publish(step, {"step": step})
            time.sleep(0.01)


if __name__ == "__main__":
    main()
