"""Resolve a config: schema defaults < recipe layers < config file < `key=value` overrides < CLI flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.config.layers import compose, deep_merge, flatten
from embedctl.config.schema import RootConfig
from embedctl.config.validate import validate
from embedctl.errors import ConfigError

COMMAND_LINE = "on the command line"


@dataclass
class LoadedConfig:
    """A validated config and how it came to be (saved beside every output)."""

    cfg: RootConfig
    config_path: str | None
    overrides: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def to_yaml(self) -> str:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.structured(self.cfg))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.cfg)


def parse_overrides(overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Parse `a.b=value` items with OmegaConf's dotlist rules (YAML scalars: 1e-4, true, [1,2], null)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    parsed: dict[str, Any] = {}
    problems: list[str] = []
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key or key.strip() != key:
            problems.append(f"override `{item}` is not of the form key=value (e.g. optim.lr=1e-4)")
            continue
        try:
            conf = OmegaConf.from_dotlist([item])
            parsed = deep_merge(parsed, OmegaConf.to_container(conf, resolve=False))
        except OmegaConfBaseException as exc:
            problems.append(f"override `{item}` could not be parsed: {exc}")
    return parsed, problems


def _nest(flags: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flags.items():
        node = out
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _resolve_interpolations(data: dict[str, Any], sources: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Resolve ``${...}``; each value that cannot be resolved is one problem naming its key and reference."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True), []  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        conf = OmegaConf.create(data)
        problems = []
        for dotted, value in flatten(data).items():
            if not (isinstance(value, str) and "${" in value):
                continue
            try:
                OmegaConf.select(conf, dotted, throw_on_missing=True)
            except OmegaConfBaseException as bad:
                where = (sources or {}).get(dotted)
                where = "" if not where else f" (set {where})" if where.startswith("on ") else f" (set in {where})"
                reason = str(bad).strip().splitlines()[0].replace("KeyError raised while resolving interpolation: ", "")
                problems.append(f"`{dotted}`{where}: cannot resolve {value}: {reason.strip(chr(34))}; fix: refer to "
                                "an existing key (e.g. ${model.name_or_path}) or a set environment variable "
                                "(${oc.env:NAME}), or write the value itself")
        return data, problems or [f"cannot resolve an interpolation: {str(exc).splitlines()[0]}"]


def load_config(
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    flags: dict[str, Any] | None = None,
) -> LoadedConfig:
    """Load, layer, override and validate. Raises ConfigError listing every problem at once."""
    overrides = list(overrides or [])
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    files: list[str] = []
    if config_path is not None:
        composed = compose(Path(config_path))
        data, sources, files = composed.data, composed.sources, composed.files
    parsed, problems = parse_overrides(overrides)
    for layer in (parsed, _nest(flags)):
        data = deep_merge(data, layer)
        sources.update({k: COMMAND_LINE for k in flatten(layer)})
    data, interp_problems = _resolve_interpolations(data, sources)
    problems += interp_problems
    clean, schema_problems = validate(data, RootConfig, sources)
    problems += schema_problems
    if problems:
        raise ConfigError(problems, source=str(config_path) if config_path else None)
    cfg = build(clean)
    problems = check_sections(cfg)
    if problems:
        raise ConfigError(problems, source=str(config_path) if config_path else None)
    return LoadedConfig(cfg=cfg, config_path=str(config_path) if config_path else None,
                        overrides=overrides, flags=flags, files=files)


def build(clean: dict[str, Any]) -> RootConfig:
    """Turn a validated mapping into dataclass instances through OmegaConf's structured merge."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(RootConfig), clean)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def check_sections(cfg: RootConfig) -> list[str]:
    """Cross-field checks: each section may define `problems() -> list[(key, message)]`."""
    out: list[str] = []
    for f in dataclasses.fields(cfg):
        section = getattr(cfg, f.name)
        check = getattr(section, "problems", None)
        if check is not None:
            out += [f"`{f.name}.{key}`: {message}" for key, message in check()]
    return out
