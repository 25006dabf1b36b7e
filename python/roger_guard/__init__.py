"""roger_guard: plug a training loop into roger, the guard of long training runs.

Standard library only at import time. What roger needs from a training script:

- checkpoints published through `roger publish` (crash-safe copy, latest.json, ledger):
  :func:`publish` after each save, :func:`wait` at the end of the job;
- resume from the last good checkpoint when `roger watch` relaunches the run:
  :func:`resume_checkpoint` / :func:`resume_step` (ROGER_RESUME_CKPT / ROGER_RESUME_STEP);
- after a divergence rollback, the step the divergence began (:func:`diverged_at`,
  ROGER_DIVERGED_AT) and the data window not to feed again (:func:`skip_window`);
- under `[preempt]`, save now when asked (:func:`save_requested`): the file named in
  ROGER_SAVE_NOW appears, or the save signal (USR1) arrives once
  :func:`install_save_signal` has set a flag-only handler.

Framework callbacks live in their own modules, which import their library:
``roger_guard.hf`` (Hugging Face ``transformers.Trainer``) and ``roger_guard.lightning``
(Lightning ``Trainer``).
"""

from ._core import (
    PublishError,
    RogerNotFound,
    diverged_at,
    install_save_signal,
    publish,
    resume_checkpoint,
    resume_step,
    roger_bin,
    save_requested,
    skip_window,
    wait,
)

__all__ = [
    "PublishError",
    "RogerNotFound",
    "diverged_at",
    "install_save_signal",
    "publish",
    "resume_checkpoint",
    "resume_step",
    "roger_bin",
    "save_requested",
    "skip_window",
    "wait",
]
