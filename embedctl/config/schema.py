"""The root config: one dataclass per top-level section.

Every command reads the same resolved config; a command only looks at the sections it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embedctl.config.sections.data import DataConfig, PrebatchConfig, PretokenizeConfig
from embedctl.config.sections.index import IndexConfig, SearchConfig
from embedctl.config.sections.model import ModelConfig
from embedctl.config.sections.output import OutputConfig
from embedctl.config.sections.ranks import RanksConfig
from embedctl.config.sections.serve import ServeConfig
from embedctl.config.sections.train import EngineConfig, EvalConfig, OptimConfig, TrainConfig


@dataclass
class RootConfig:
    """Everything embedctl can be told, grouped by what reads it."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The encoder."""
    data: DataConfig = field(default_factory=DataConfig)
    """Training data."""
    pretokenize: PretokenizeConfig = field(default_factory=PretokenizeConfig)
    """`embedctl pretokenize`."""
    prebatch: PrebatchConfig = field(default_factory=PrebatchConfig)
    """`embedctl prebatch`."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The training loop."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and schedule."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Single process, DDP or DeepSpeed."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation during training."""
    index: IndexConfig = field(default_factory=IndexConfig)
    """`embedctl index`."""
    search: SearchConfig = field(default_factory=SearchConfig)
    """`embedctl search`."""
    serve: ServeConfig = field(default_factory=ServeConfig)
    """`embedctl serve`: the HTTP search service."""
    ranks: RanksConfig = field(default_factory=RanksConfig)
    """Several processes of `embedctl index` / `embedctl prebatch`: failure detection."""
    output: OutputConfig = field(default_factory=OutputConfig)
    """Where outputs go."""
