"""Hugging Face Trainer plugged into roger with roger_guard (`pip install roger-guard`):

    from roger_guard.hf import RogerCallback, train
    trainer = Trainer(..., callbacks=[RogerCallback(log="train.jsonl")])
    train(trainer)

- every `save_steps` folder (`checkpoint-N/`) is published with `roger publish --detach` as
  soon as the Trainer has written it (on_save), and the queue is waited for when training
  ends (on_train_end: `roger publish --wait`);
- `train(trainer)` resumes from the last good checkpoint `roger watch` relaunched the run from
  (ROGER_RESUME_CKPT);
- a preemption hand-off's save-now request is answered at the next step with
  control.should_save;
- log= writes the Trainer's logs (loss, lr, grad_norm) as JSON lines for the critic.

The Trainer deletes old folders itself with `save_total_limit`: leave it unset and let
roger's retention prune the published copies (`[publish] keep_last`), or keep it >= 2 so it
never deletes a folder roger is still copying. On btrfs/XFS roger snapshots the folder at once
with reflinks.

Runs as it is, on CPU, with a tiny GPT-2 built from a config (no download), beside a
roger.toml that names checkpoint_dir:
    roger --config roger.toml watch -- python3 examples/publish/hf_trainer_callback.py
"""
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from roger_guard.hf import RogerCallback, train


class Tokens(torch.utils.data.Dataset):
    """Stands in for a tokenized dataset."""

    def __init__(self, n=64, length=16):
        self.ids = torch.randint(0, 64, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2,
                                       n_head=2))
    args = TrainingArguments(output_dir=os.environ.get("OUT", "out"),
                             max_steps=int(os.environ.get("MAX_STEPS", "40")), save_steps=10,
                             logging_steps=1, per_device_train_batch_size=8, report_to=[],
                             use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(),
                      callbacks=[RogerCallback(log=os.environ.get("TRAIN_LOG", "train.jsonl"))])
    train(trainer)


if __name__ == "__main__":
    main()
