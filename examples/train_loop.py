#!/usr/bin/env python3
"""A minimal training loop that plugs roger in (no framework needed to read it).

What roger needs from a training script, each one call of roger_guard (`pip install
roger-guard`; from a checkout, PYTHONPATH=python):
  1. a metrics log it can read: one JSON object per line (roger.toml [run] log/format),
  2. checkpoints published through `roger publish`: roger_guard.publish() queues each one
     (`--detach`: crash-safe copy, verify, latest.json, ledger in the background) and
     roger_guard.wait() waits for the queue at the end,
  3. resume from roger_guard.resume_checkpoint() (ROGER_RESUME_CKPT) when `roger watch`
     relaunches it,
  4. under `[preempt]` (SLURM, spot VMs): save now when roger_guard.save_requested() says so,
     by either channel roger offers:
     - the file named in ROGER_SAVE_NOW appears (`save_now = "file"`, the default; works for
       every rank, also under torchrun, which does not forward signals), or
     - a signal (`save_now = "signal"`, `save_signal = "USR1"`): the handler
       roger_guard.install_save_signal() installs only sets a flag, and the loop saves at the
       next step boundary. Never save inside a handler: file I/O in a signal handler is how
       preemption saves get lost.
     publish(save_s=...) tells roger how long the save took (ROGER_SAVE_S) so the "does a save
     fit the notice window" check weighs save plus publish.

Run it under the watch:
    roger --config roger.toml watch -- python3 examples/train_loop.py
and the critic beside it (tmux):
    roger --config roger.toml critic --daemon
"""
import json
import math
import os
import sys
import time

import roger_guard

LOG = os.environ.get("TRAIN_LOG", "train_log.jsonl")
CKPT_DIR = os.environ.get("CKPT_DIR", "ckpt")
STAGING = os.environ.get("STAGING_DIR", "staging")
# Matches roger.example.toml: cosine to 6e-5 over 1200 steps after a 200-step warmup.
TOTAL, WARMUP, PEAK, MIN_LR = int(os.environ.get("TOTAL_STEPS", "1200")), 200, 6e-4, 6e-5
SAVE_EVERY = 100


def lr_at(step):
    if step < WARMUP:
        return PEAK * step / WARMUP
    progress = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return MIN_LR + 0.5 * (PEAK - MIN_LR) * (1 + math.cos(math.pi * progress))


def save_and_publish(step, state):
    t0 = time.monotonic()
    os.makedirs(STAGING, exist_ok=True)
    # A new name per save: a queued publish copies its source later, so it must stay as it is.
    path = os.path.join(STAGING, f"ckpt-{step}.json")
    with open(path, "w") as f:
        json.dump(state, f)
    # roger copies it crash-safely (staging, fsync, verify from disk, atomic rename),
    # updates latest.json, prunes old ones, and records it in the ledger (with save_s).
    roger_guard.publish(path, step, to=CKPT_DIR, save_s=time.monotonic() - t0)


def main():
    roger_guard.install_save_signal("USR1")
    step = 0
    resume = roger_guard.resume_checkpoint()
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
            # A preemption notice: save now, then keep training until roger stops us.
            if roger_guard.save_requested() or step % SAVE_EVERY == 0:
                save_and_publish(step, {"step": step})
            time.sleep(0.01)
    roger_guard.wait(to=CKPT_DIR)


if __name__ == "__main__":
    main()
