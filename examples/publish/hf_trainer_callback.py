"""Hugging Face Trainer: publish every `save_steps` folder (`checkpoint-N/`) with
`roger publish --detach` as soon as the Trainer has written it, and wait for the queue when
training ends. Add `RogerPublish(dest)` to `Trainer(callbacks=[...])`.

The Trainer saves into `output_dir/checkpoint-N/` and, with `save_total_limit`, deletes old
folders itself: keep `save_total_limit` >= 2 so it never deletes a folder roger is still
copying (or let roger's retention do the pruning: `[publish] keep_last`, and no
`save_total_limit`). On btrfs/XFS roger snapshots the folder at once with reflinks.
"""
import os
import subprocess

from transformers import TrainerCallback


class RogerPublish(TrainerCallback):
    def __init__(self, dest, wait_timeout="30m"):
        self.dest = dest
        self.wait_timeout = wait_timeout

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        subprocess.run(
            ["roger", "publish", "--detach", folder, "--to", self.dest, "--step", str(state.global_step)],
            check=True,
        )

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            subprocess.run(["roger", "publish", "--wait", "--to", self.dest, "--timeout", self.wait_timeout], check=True)


# Usage:
#   trainer = Trainer(model=model, args=TrainingArguments(output_dir="out", save_steps=500,
#                     save_total_limit=2), train_dataset=ds,
#                     callbacks=[RogerPublish("/data/run7/ckpt")])
#   trainer.train()
