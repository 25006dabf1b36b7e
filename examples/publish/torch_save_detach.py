"""torch.save to a unique name, then `roger publish --detach`: the training loop is blocked
only for torch.save itself plus a few milliseconds of queueing; a background publisher
copies, hashes, verifies from disk and publishes (latest.json, ledger) in order.

Each save goes to a NEW name (never overwrite a file roger may still be copying): on ext4
the source must stay untouched until it is published (roger rejects it with a ledger record
otherwise); on btrfs/XFS/bcachefs roger takes a reflink snapshot and the file may be reused
at once. At the end of the job, `roger publish --wait` waits for the queue to drain.
roger_guard (`pip install roger-guard`) runs both: publish() and wait().
"""
import os

import torch

import roger_guard

STAGING = os.environ.get("CKPT_STAGING", "/data/run7/staging")  # same filesystem as --to
DEST = os.environ.get("CKPT_DIR", "/data/run7/ckpt")


def save_and_publish(model, optimizer, step):
    os.makedirs(STAGING, exist_ok=True)
    path = os.path.join(STAGING, f"ckpt-{step}.pt")
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, path)
    # Returns once the publish is durable as an intent (publish_queued record).
    roger_guard.publish(path, step, to=DEST)


def finish():
    # End of the job: every queued publish published, or PublishError when one was rejected.
    roger_guard.wait(to=DEST, timeout="30m")


if __name__ == "__main__":
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 301):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            save_and_publish(model, opt, step)
    finish()
