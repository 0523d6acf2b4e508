"""Training losses (one per file)."""

from embedctl.train.losses.infonce import InfoNCELoss, LossStats, info_nce_loss, maxsim_scorer

__all__ = ["InfoNCELoss", "LossStats", "info_nce_loss", "maxsim_scorer"]
