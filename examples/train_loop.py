#!/usr/bin/env python3
"""A minimal training loop that plugs roger in (no framework needed to read it).

What roger needs from a training script:
  1. a metrics log it can read: one JSON object per line (roger.toml [run] log/format),
  2. checkpoints published through `roger publish` (crash-safe copy, latest.json, ledger),
  3. resume from ROGER_RESUME_CKPT / ROGER_RESUME_STEP when `roger watch` relaunches it,
  4. under `[preempt]` (SLURM, spot VMs): save now when asked, by either channel roger offers:
     - the file named in ROGER_SAVE_NOW appears (`save_now = "file"`, the default; works for
       every rank, also under torchrun, which does not forward signals), or
     - a signal (`save_now = "signal"`, `save_signal = "USR1"`): the handler only sets a flag,
       and the loop saves at the next step boundary. Never save inside the handler: file I/O
       in a signal handler is how preemption saves get lost.
     It tells roger how long the save took (ROGER_SAVE_S) so the "does a save fit the notice
     window" check weighs save plus publish.

Run it under the watch:
    roger --config roger.toml watch -- python3 examples/train_loop.py --resume {ckpt}
and the critic beside it (tmux):
    roger --config roger.toml critic --daemon
"""
import json
import math
import os
import signal
import subprocess
import sys
import time

LOG = os.environ.get("TRAIN_LOG", "train_log.jsonl")
CKPT_DIR = os.environ.get("CKPT_DIR", "ckpt")
STAGING = os.environ.get("STAGING_DIR", "staging")
# Matches roger.example.toml: cosine to 6e-5 over 1200 steps after a 200-step warmup.
TOTAL, WARMUP, PEAK, MIN_LR = 1200, 200, 6e-4, 6e-5
SAVE_EVERY = 100
SAVE_NOW_FILE = os.environ.get("ROGER_SAVE_NOW")  # set by `roger watch` under [preempt]
save_now_flag = False


def on_save_signal(signum, frame):
    # Only a flag: the save happens in the loop, between steps.
    global save_now_flag
    save_now_flag = True


def save_requested():
    global save_now_flag
    if save_now_flag:
        save_now_flag = False
        return True
    return bool(SAVE_NOW_FILE) and os.path.exists(SAVE_NOW_FILE)


def lr_at(step):
    if step < WARMUP:
        return PEAK * step / WARMUP
    progress = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return MIN_LR + 0.5 * (PEAK - MIN_LR) * (1 + math.cos(math.pi * progress))


def save_and_publish(step, state):
    t0 = time.monotonic()
    os.makedirs(STAGING, exist_ok=True)
    path = os.path.join(STAGING, f"ckpt-{step}.json")
    with open(path, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    saved_s = time.monotonic() - t0
    # roger copies it crash-safely (staging, fsync, verify from disk, atomic rename),
    # updates latest.json, prunes old ones, and records it in the ledger (with save_s).
    env = dict(os.environ, ROGER_SAVE_S=f"{saved_s:.3f}")
    subprocess.run(["roger", "publish", path, "--to", CKPT_DIR, "--step", str(step)],
                   check=True, env=env)
    os.remove(path)


def main():
    signal.signal(signal.SIGUSR1, on_save_signal)
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
            if save_requested():
                # A preemption notice: save now, then keep training until roger stops us.
                save_and_publish(step, {"step": step})
                if SAVE_NOW_FILE and os.path.exists(SAVE_NOW_FILE):
                    os.remove(SAVE_NOW_FILE)
            elif step % SAVE_EVERY == 0:
                save_and_publish(step, {"step": step})
            time.sleep(0.01)


if __name__ == "__main__":
    main()
