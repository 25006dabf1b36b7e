"""``pytorch_lightning.Trainer`` plugged into roger (the same callback as
``roger_guard.lightning``, built on the ``pytorch_lightning`` package)."""

import pytorch_lightning as _pl

from ._lightning import fit, make

RogerCallback = make(_pl)

__all__ = ["RogerCallback", "fit"]
