"""The Lightning callback, built on whichever Lightning module the caller imported
(``lightning.pytorch`` or ``pytorch_lightning``: a Trainer accepts only its own package's
``Callback``). No import of Lightning here."""

import json
import os
import sys
import time

from . import _core


def make(pl):
    class RogerCallback(pl.Callback):
        """Save every ``every_n_steps`` optimizer steps (and when a preemption notice asks)
        to ``dirpath/step_N.ckpt`` with ``trainer.save_checkpoint``, publish each with `roger
        publish --detach`, and wait for the queue at the end of training and on an exception
        (so the checkpoints already saved are published before the process dies).

        Each save is a new file: roger copies a queued source later, so it must stay
        untouched. Resume with :func:`fit` (``ckpt_path`` = ROGER_RESUME_CKPT).

        to: destination directory (default: the config's checkpoint_dir). detach: queue each
        publish. wait_timeout: for --wait (seconds or "30m"). log: write each training step's
        loss as JSON lines for roger's critic. save_signal: the signal `[preempt]
        save_signal` sends (None: the ROGER_SAVE_NOW file only). config: a roger.toml.
        """

        def __init__(self, dirpath, every_n_steps, to=None, detach=True, wait_timeout=None,
                     log=None, save_signal="USR1", config=None):
            super().__init__()
            self.dirpath = dirpath
            self.every_n_steps = int(every_n_steps)
            self.to = to
            self.detach = detach
            self.wait_timeout = wait_timeout
            self.log_path = log
            self.save_signal = save_signal
            self.config = config
            self._saved = None
            self._log_file = None

        def on_train_start(self, trainer, pl_module):
            _core._arm_save_signal(self.save_signal)
            _core._warn_if_not_resumed(
                trainer.global_step,
                trainer.is_global_zero,
                "call roger_guard.lightning.fit(trainer, model) or pass "
                "ckpt_path=roger_guard.resume_checkpoint()",
            )

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            step = trainer.global_step
            if self.log_path and trainer.is_global_zero:
                loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
                if loss is not None:
                    self._write_log({"step": step, "loss": float(loss), "time": time.time()})
            asked = _core.save_requested()
            if os.environ.get("ROGER_SAVE_NOW"):
                # Under `[preempt]`: every rank must take the same decision (saving is
                # collective under DDP), and each reads the request at its own step boundary.
                asked = trainer.strategy.reduce_boolean_decision(asked, all=False)
            due = self.every_n_steps > 0 and step > 0 and step % self.every_n_steps == 0
            if (asked or due) and step != self._saved:
                self.save(trainer, step)

        def save(self, trainer, step):
            """Save ``step_N.ckpt`` and publish it (main process)."""
            path = os.path.join(self.dirpath, f"step_{step}.ckpt")
            t0 = time.monotonic()
            trainer.save_checkpoint(path)
            self._saved = step
            if trainer.is_global_zero:
                _core.publish(path, step=step, detach=self.detach, to=self.to,
                              save_s=time.monotonic() - t0, config=self.config)

        def on_train_end(self, trainer, pl_module):
            self._close_log()
            if trainer.is_global_zero and self.detach:
                _core.wait(to=self.to, timeout=self.wait_timeout, config=self.config)

        def on_exception(self, trainer, pl_module, exception):
            self._close_log()
            if trainer.is_global_zero and self.detach:
                try:
                    _core.wait(to=self.to, timeout=self.wait_timeout, config=self.config)
                except (_core.PublishError, _core.RogerNotFound) as e:
                    # The training's own exception is the one to propagate.
                    print(f"roger_guard: after {type(exception).__name__}: {e}", file=sys.stderr)

        def _write_log(self, row):
            if self._log_file is None:
                self._log_file = open(self.log_path, "a")
            self._log_file.write(json.dumps(row) + "\n")
            self._log_file.flush()

        def _close_log(self):
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    return RogerCallback


def fit(trainer, model, **kwargs):
    """``trainer.fit`` from the checkpoint `roger watch` relaunched this run from."""
    return trainer.fit(model, ckpt_path=_core.resume_checkpoint(), **kwargs)
