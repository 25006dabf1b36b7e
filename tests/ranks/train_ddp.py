"""A small gloo training loop for roger's torchrun tests (tests/ranks/).

Each rank does a little CPU work per step, then all_reduce()s its gradient, logs one JSONL
line per step to logs/rank{RANK}.jsonl (step, loss, step_time = its own work before the
collective, in seconds) and rank 0 saves a checkpoint every CKPT_EVERY steps and publishes
it with `roger publish` (when ROGER_BIN is set). Knobs (environment):
  HANG_RANK, HANG_AT     rank HANG_RANK sleeps forever in `slow_loader` at step HANG_AT
  SLOW_RANK, SLOW_SHARE  rank SLOW_RANK works at SLOW_SHARE of the others' speed
  RUN_S                  stop after this many seconds of steps (rank 0 decides)
  STEPS, WORK_ITERS      steps to run, matmuls of host work per step
  DEVICE_S               seconds of (emulated) device work per step
Resumes from ROGER_RESUME_CKPT when set (the step is in the checkpoint).
"""

import json
import os
import subprocess
import sys
import time

import torch

torch.set_num_threads(1)
import torch.distributed as dist


def busy(iters):
    """A fixed amount of CPU work (a matmul loop, as a model step would): under load it
    takes longer, as a real step does."""
    a = torch.ones(64, 64)
    for _ in range(int(iters)):
        a = (a @ a).clamp_(max=1.0)
    return float(a[0, 0])


def slow_loader(step):
    """The dataloader that never returns (the hang under test)."""
    with open("hang-started", "w") as f:
        f.write(f"{time.time()} {step}\n")
    while True:
        time.sleep(1.0)


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    steps = int(os.environ.get("STEPS", "1000000"))
    work = int(os.environ.get("WORK_ITERS", "30"))
    device_s = float(os.environ.get("DEVICE_S", "0.04"))
    hang_rank = int(os.environ.get("HANG_RANK", "-1"))
    hang_at = int(os.environ.get("HANG_AT", "-1"))
    slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
    slow_share = float(os.environ.get("SLOW_SHARE", "1.0"))
    ckpt_every = int(os.environ.get("CKPT_EVERY", "0"))
    os.makedirs("logs", exist_ok=True)
    os.makedirs("ckpt", exist_ok=True)
    start = 0
    resume = os.environ.get("ROGER_RESUME_CKPT")
    if resume:
        start = torch.load(resume)["step"]
        # The resumed launch does not hang again: the fault was transient.
        hang_rank = -1
    run_s = float(os.environ.get("RUN_S", "0"))
    began = time.time()
    w = torch.zeros(8)
    log = open(f"logs/rank{rank}.jsonl", "a", buffering=1)
    for step in range(start + 1, steps + 1):
        t0 = time.perf_counter()
        if rank == hang_rank and step == hang_at:
            slow_loader(step)
        busy(work)
        # The accelerator's share of the step (this box has none): time the host waits.
        time.sleep(device_s)
        if rank == slow_rank:
            # Everything this rank does takes 1/SLOW_SHARE as long (a throttled GPU, a slow
            # host): the rest of its step, waited out.
            time.sleep((time.perf_counter() - t0) * (1.0 / slow_share - 1.0))
        own = time.perf_counter() - t0
        g = torch.full((9,), float(rank + 1))
        # Rank 0 ends the run after RUN_S seconds of steps; the collective tells the rest.
        g[8] = 1.0 if rank == 0 and run_s and time.time() - began > run_s else 0.0
        dist.all_reduce(g)
        w -= 0.01 * g[:8] / world
        loss = 1.0 / (1.0 + 0.01 * step)
        line = {"step": step, "loss": loss, "step_time": round(own, 5), "t": round(time.time(), 3)}
        log.write(json.dumps(line) + "\n")
        if rank == 0 and ckpt_every and step % ckpt_every == 0:
            path = f"ckpt/step{step}.pt"
            torch.save({"step": step, "w": w}, path)
            roger = os.environ.get("ROGER_BIN")
            if roger:
                subprocess.run([roger, "publish", path, "--step", str(step)], check=True)
        if g[8] > 0:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
