"""Lightning's ``Trainer`` plugged into roger: ``lightning.pytorch`` when installed, else
``pytorch_lightning`` (use ``roger_guard.pytorch_lightning`` to pick that one explicitly).

    from roger_guard.lightning import RogerCallback, fit

    trainer = L.Trainer(max_steps=10_000, callbacks=[RogerCallback("out", every_n_steps=500)])
    fit(trainer, model)  # trainer.fit(model, ckpt_path=<the last good checkpoint, if any>)
"""

try:
    import lightning.pytorch as _pl
except ModuleNotFoundError as e:
    if e.name not in ("lightning", "lightning.pytorch"):
        raise
    import pytorch_lightning as _pl

from ._lightning import fit, make

RogerCallback = make(_pl)

__all__ = ["RogerCallback", "fit"]
