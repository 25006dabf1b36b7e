"""The helpers for any training loop: find the `roger` binary, publish, wait, resume, save
when asked, and the data window to skip after a divergence rollback. Standard library only."""

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading

_EXE = "roger.exe" if os.name == "nt" else "roger"


class RogerNotFound(FileNotFoundError):
    """No `roger` binary: not in ROGER_BIN, beside this Python, nor on PATH."""


class PublishError(subprocess.CalledProcessError):
    """`roger publish` exited non-zero; ``stderr`` holds what it said."""

    def __str__(self):
        said = (self.stderr or "").strip()
        return f"{' '.join(map(str, self.cmd))} exited {self.returncode}" + (
            f": {said}" if said else ""
        )


def _executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def roger_bin():
    """The `roger` to run: $ROGER_BIN, else the one installed beside this interpreter (the
    wheel puts it in the venv's scripts directory, which need not be on PATH), else PATH."""
    env = os.environ.get("ROGER_BIN")
    if env:
        if not _executable(env):
            raise RogerNotFound(f"ROGER_BIN={env!r} is not an executable file")
        return env
    dirs = []
    for scheme in (None, f"{os.name}_user"):
        try:
            dirs.append(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"))
        except KeyError:
            pass
    dirs.append(os.path.join(sys.prefix, "Scripts" if os.name == "nt" else "bin"))
    for d in dirs:
        if d and _executable(os.path.join(d, _EXE)):
            return os.path.join(d, _EXE)
    found = shutil.which(_EXE)
    if found:
        return found
    raise RogerNotFound(
        "no `roger` binary: set ROGER_BIN, or install roger into this environment "
        "(`pip install ./python` from a checkout; `pip install roger-guard` once released) "
        f"(looked in {', '.join(d for d in dirs if d)} and PATH)"
    )


def _run(args, env=None):
    """Run roger, pass its stderr through (its warnings are for the person reading the
    training log), raise PublishError when it fails."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.stderr:
        sys.stderr.write(p.stderr)
        sys.stderr.flush()
    if p.returncode != 0:
        raise PublishError(p.returncode, args, p.stdout, p.stderr)
    return p


def _head(config):
    args = [roger_bin()]
    if config is not None:
        args += ["--config", os.fspath(config)]
    return args


def publish(path, step=None, detach=True, to=None, save_s=None, config=None):
    """`roger publish PATH`: a checkpoint file or directory (HF `checkpoint-N/`, DCP).

    detach=True queues it (`--detach`) and returns in milliseconds; a background publisher
    copies, verifies from disk and publishes in order. The source must then stay untouched
    until published (save each checkpoint to a new name), except on btrfs/XFS, where roger
    takes a reflink snapshot at once. detach=False publishes in the foreground
    (`--no-detach`, even with `[publish] detach = true`).

    ``to``: the destination directory (default: the config's [run] checkpoint_dir; the config
    is ROGER_CONFIG, which `roger watch` sets for the run, else ./roger.toml). ``step``: the
    training step (default: parsed from the name). ``save_s``: how long the save took, for the
    preemption "does a save fit the notice window" check (ROGER_SAVE_S).

    Returns the finished process; raises PublishError when roger refused or failed.
    """
    args = _head(config) + ["publish", os.fspath(path), "--detach" if detach else "--no-detach"]
    if to is not None:
        args += ["--to", os.fspath(to)]
    if step is not None:
        args += ["--step", str(int(step))]
    env = None
    if save_s is not None:
        env = dict(os.environ, ROGER_SAVE_S=f"{float(save_s):.3f}")
    return _run(args, env)


def wait(to=None, timeout=None, config=None):
    """`roger publish --wait`: block until every queued publish of ``to`` (default: the
    config's checkpoint_dir) is published or rejected. Raises PublishError when one was
    rejected or ``timeout`` (seconds, or a duration such as "30m") passed."""
    args = _head(config) + ["publish", "--wait"]
    if to is not None:
        args += ["--to", os.fspath(to)]
    if timeout is not None:
        args += ["--timeout", f"{timeout}s" if isinstance(timeout, (int, float)) else str(timeout)]
    return _run(args)


def _step_env(name):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected a step number") from None
    if n < 0:
        raise ValueError(f"{name}={v!r}: expected a step number")
    return n


def resume_checkpoint():
    """The last good checkpoint `roger watch` relaunched this run from (ROGER_RESUME_CKPT),
    or None on a fresh start. A path that is gone raises: silently starting from scratch
    would throw the run away."""
    v = os.environ.get("ROGER_RESUME_CKPT", "")
    if not v:
        return None
    if not os.path.exists(v):
        raise FileNotFoundError(f"ROGER_RESUME_CKPT={v!r} does not exist")
    return v


def resume_step():
    """The step of :func:`resume_checkpoint` (ROGER_RESUME_STEP), or None."""
    return _step_env("ROGER_RESUME_STEP")


def diverged_at():
    """The step the divergence began, on the launch right after a divergence rollback
    (ROGER_DIVERGED_AT: the critic's onset over the whole log), else None."""
    return _step_env("ROGER_DIVERGED_AT")


def skip_window(after, before=0):
    """After a divergence rollback: the steps whose data the relaunched run should not train
    on, as a ``range`` (else None): from ``before`` steps before the onset (never before the
    resumed step) to ``after`` steps after it. PaLM resumed from a checkpoint before each loss
    spike and skipped the batches around it. ROGER_DIVERGED_AT is given to that one launch
    only: keep the window in your checkpoints so later relaunches keep skipping it."""
    d = diverged_at()
    if d is None:
        return None
    start = max(d - int(before), (resume_step() or 0) + 1, 0)
    return range(start, d + int(after))


_flag = threading.Event()
_answered = None  # the save-now request (the file's bytes) last answered


def _on_save_signal(signum, frame):
    # Only a flag: the save happens in the loop, between steps. File I/O in a signal handler
    # is how preemption saves get lost.
    _flag.set()


def _signum(sig):
    if not isinstance(sig, str):
        return sig
    name = sig.upper()
    num = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if num is None:
        raise ValueError(f"unknown signal {sig!r}: expected a name such as USR1")
    return num


def _warn_if_not_resumed(global_step, is_zero, how):
    """For the callbacks, when training starts: `roger watch` relaunched from a checkpoint
    (ROGER_RESUME_STEP) but the trainer starts at step 0, so the resume was forgotten; say on
    stderr, from the main process only, ``how`` to resume."""
    want = resume_step()
    if want and global_step == 0 and is_zero:
        print(
            f"roger_guard: ROGER_RESUME_CKPT is step {want} but the Trainer starts at step 0: "
            f"{how}",
            file=sys.stderr,
        )


def _arm_save_signal(sig):
    """For the callbacks: under `[preempt]` (ROGER_SAVE_NOW set), install the flag handler for
    ``sig`` unless the program already handles it."""
    if sig and os.environ.get("ROGER_SAVE_NOW"):
        num = _signum(sig)
        if signal.getsignal(num) in (signal.SIG_DFL, None):
            install_save_signal(num)


def install_save_signal(sig="USR1"):
    """Answer `[preempt] save_now = "signal"` (or "both"): ``sig`` (a name such as "USR1", or
    a number) sets a flag that :func:`save_requested` reads. Without a handler, USR1 would
    kill the run. Returns False (and installs nothing) off the main thread, where Python
    cannot install handlers."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(_signum(sig), _on_save_signal)
    return True


def save_requested():
    """True once per request to save now (a preemption notice is coming): the file named in
    ROGER_SAVE_NOW appeared or changed (each notice writes its own), or the save signal
    arrived. Cheap (one stat-and-read); call it at every step boundary, then save and
    publish: roger waits for a publish newer than the notice before it stops the run."""
    global _answered
    asked = False
    path = os.environ.get("ROGER_SAVE_NOW")
    if path:
        try:
            with open(path, "rb") as f:
                body = f.read()
        except OSError:
            body = None
        if body is not None and body != _answered:
            _answered = body
            asked = True
    if _flag.is_set():
        _flag.clear()
        asked = True
    return asked
