"""Hugging Face ``transformers.Trainer`` plugged into roger.

    from roger_guard.hf import RogerCallback, train

    trainer = Trainer(model=model, args=TrainingArguments(output_dir="out", save_steps=500),
                      train_dataset=ds, callbacks=[RogerCallback(log="train.jsonl")])
    train(trainer)  # trainer.train(resume_from_checkpoint=<the last good checkpoint, if any>)

- ``on_save``: `roger publish --detach` of the folder the Trainer just wrote
  (``output_dir/checkpoint-N/``), from the main process only;
- ``on_train_end``: `roger publish --wait` for the queue;
- a preemption hand-off's save-now request (the ROGER_SAVE_NOW file, or USR1) is answered at
  the next step boundary with ``control.should_save``;
- ``log=PATH``: the Trainer's logs as JSON lines (step, loss, lr, grad_norm, time) for roger's
  critic (``logging_steps`` sets how often);
- resume: :func:`train` passes ROGER_RESUME_CKPT as ``resume_from_checkpoint`` (a callback
  runs after the Trainer chose where to start, so it can only warn when that was forgotten).

The Trainer deletes old ``checkpoint-N/`` folders itself with ``save_total_limit``: leave it
unset and let roger's retention prune the published copies (``[publish] keep_last``), or keep
it >= 2 so a folder still being copied is never deleted (roger rejects a source that changed).
"""

import json
import os
import sys
import time

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from . import _core

__all__ = ["RogerCallback", "train"]


def train(trainer, **kwargs):
    """``trainer.train`` from the checkpoint `roger watch` relaunched this run from (None on a
    fresh start)."""
    return trainer.train(resume_from_checkpoint=_core.resume_checkpoint(), **kwargs)


class RogerCallback(TrainerCallback):
    """Publish every checkpoint the Trainer saves, save when a preemption notice asks, wait
    for the publish queue at the end, and optionally write the metrics log roger reads.

    to: destination directory (default: the config's checkpoint_dir). detach: queue each
    publish (False: publish in the foreground). wait_timeout: for the final --wait (seconds
    or "30m"; None waits as long as it takes). save_signal: the signal `[preempt] save_signal`
    sends (None: answer the file only); installed when ROGER_SAVE_NOW is set and nothing else
    handles it. config: a roger.toml (default: ROGER_CONFIG, else ./roger.toml).
    """

    def __init__(self, to=None, detach=True, wait_timeout=None, log=None, save_signal="USR1",
                 config=None):
        self.to = to
        self.detach = detach
        self.wait_timeout = wait_timeout
        self.log_path = log
        self.save_signal = save_signal
        self.config = config
        self._step_end = None
        self._log_file = None

    def on_train_begin(self, args, state, control, **kwargs):
        _core._arm_save_signal(self.save_signal)
        _core._warn_if_not_resumed(
            state.global_step,
            state.is_world_process_zero,
            "call roger_guard.hf.train(trainer) or pass "
            "resume_from_checkpoint=roger_guard.resume_checkpoint()",
        )

    def on_step_end(self, args, state, control, **kwargs):
        self._step_end = (state.global_step, time.monotonic())
        if self._agree(args, _core.save_requested()):
            control.should_save = True
        return control

    @staticmethod
    def _agree(args, asked):
        """Under torch.distributed, save when any rank was asked: every rank must take the
        same decision at the same step (FSDP and DeepSpeed saves are collective), and each
        rank reads the request at its own step boundary. Only under `[preempt]`, the one
        case with requests: elsewhere no collective is added to the step."""
        dist = sys.modules.get("torch.distributed")
        if not os.environ.get("ROGER_SAVE_NOW") or dist is None or not dist.is_available() \
                or not dist.is_initialized() or dist.get_world_size() == 1:
            return asked
        import torch

        flag = torch.tensor([1 if asked else 0], device=args.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        step = state.global_step
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        # The save ran between this step's on_step_end and now (with an evaluation, if one
        # was due: an upper bound, which is the safe side for the notice-window check).
        save_s = None
        if self._step_end is not None and self._step_end[0] == step:
            save_s = time.monotonic() - self._step_end[1]
        _core.publish(folder, step=step, detach=self.detach, to=self.to, save_s=save_s,
                      config=self.config)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.log_path or not logs or not state.is_world_process_zero:
            return
        row = {"step": state.global_step}
        for k, v in logs.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row["lr" if k == "learning_rate" else k] = v
        row["time"] = time.time()
        if self._log_file is None:
            self._log_file = open(self.log_path, "a")
        self._log_file.write(json.dumps(row) + "\n")
        self._log_file.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if state.is_world_process_zero and self.detach:
            _core.wait(to=self.to, timeout=self.wait_timeout, config=self.config)
