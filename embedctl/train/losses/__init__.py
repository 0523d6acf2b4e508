"""Training losses (one per file): InfoNCE (infonce.py), distillation (distill.py) and the configured
combination (combined.py, ``train.loss``)."""

from embedctl.train.losses.combined import LOSSES, TrainingLoss
from embedctl.train.losses.distill import distill_candidates, distill_loss
from embedctl.train.losses.infonce import (
           InfoNCELoss,
           LossStats,
           info_nce_from_scores,
           info_nce_loss,
           maxsim_scorer,
)

__all__ = ["LOSSES", "InfoNCELoss", "LossStats", "TrainingLoss", "distill_candidates", "distill_loss",
           "info_nce_from_scores", "info_nce_loss", "maxsim_scorer"]
