"""Typed, layered configuration: dataclass schema + YAML recipe layers + `key=value` overrides."""

from embedctl.config.loader import LoadedConfig, load_config
from embedctl.config.schema import RootConfig

__all__ = ["LoadedConfig", "RootConfig", "load_config"]
