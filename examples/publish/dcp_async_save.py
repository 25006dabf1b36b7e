"""PyTorch Distributed Checkpoint (DCP) into a directory per step, then one
`roger publish --detach` of the directory from rank 0 once every rank's shards are on disk.
roger copies the `.distcp` shards several at a time, verifies them from disk and swaps the
directory into place atomically; a truncated shard rejects the whole directory and the
previous checkpoint stays.

`dcp.async_save` returns a future: publish only after it completed (the shards are still
being written before that). Run with torchrun; works on CPU with the gloo backend.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import roger_guard

STAGING = os.environ.get("CKPT_STAGING", "/data/run7/staging")
DEST = os.environ.get("CKPT_DIR", "/data/run7/ckpt")


def publish(path, step):
    if dist.get_rank() == 0:
        roger_guard.publish(path, step, to=DEST)


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())
    pending = None  # (future, path, step) of the save in flight
    for step in range(1, 301):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            if pending is not None:
                pending[0].result()
                dist.barrier()  # every rank's shards of the previous save are written
                publish(pending[1], pending[2])
            path = os.path.join(STAGING, f"step_{step}")
            state = {"model": model.state_dict(), "optim": opt.state_dict()}
            if hasattr(dcp, "async_save"):  # torch >= 2.3
                pending = (dcp.async_save(state, checkpoint_id=path), path, step)
            else:
                dcp.save(state, checkpoint_id=path)
                dist.barrier()
                publish(path, step)
    if pending is not None:
        pending[0].result()
        dist.barrier()
        publish(pending[1], pending[2])
    if dist.get_rank() == 0:
        roger_guard.wait(to=DEST)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
