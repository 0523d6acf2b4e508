"""Resolve a config: schema defaults < the model folder's own settings < recipe layers < config file <
`key=value` overrides < CLI flags. ``LoadedConfig.origins`` says which of them set each key."""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.config.layers import compose, deep_merge, flatten
from embedctl.config.model_files import read_model_settings
from embedctl.config.schema import RootConfig
from embedctl.config.validate import validate
from embedctl.errors import ConfigError
from embedctl.util.console import stderr_console

COMMAND_LINE = "on the command line"


@dataclass
class LoadedConfig:
    """A validated config and how it came to be (saved beside every output)."""

    cfg: RootConfig
    config_path: str | None
    overrides: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    """dotted key -> where its value came from: `default`, `model file NAME (FOLDER)`, `config layer PATH`,
    `file PATH` or `command line` (keys absent here are schema defaults)."""

    def origin(self, key: str) -> str:
        return self.origins.get(key, "default")

    def to_yaml(self) -> str:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.structured(self.cfg))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.cfg)


def parse_overrides(overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Parse `a.b=value` items with OmegaConf's dotlist rules (YAML scalars: 1e-4, true, [1,2], null)."""
    if not overrides:  # importing omegaconf costs ~0.1 s of every command's start
        return {}, []
    import yaml
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
        except (OmegaConfBaseException, yaml.YAMLError) as exc:  # `key=[1,2`: a YAML syntax error
            reason = " ".join(str(exc).split())
            problems.append(f"`{key}` (set on the command line): the value in `{item}` is not valid YAML ({reason}); "
                            f"fix: write it as YAML, e.g. {key}=[1,2] for a list, or quote it: {key}='\"text\"'")
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
    if is_plain(data):  # nothing to resolve: what OmegaConf would return, without importing it
        return copy.deepcopy(data), []
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
    model_layer, model_origins = _model_file_layer(data, sources)
    data = deep_merge(model_layer, data)
    clean, schema_problems = validate(data, RootConfig, sources)
    problems += schema_problems
    if problems:
        raise ConfigError(problems, source=str(config_path) if config_path else None)
    cfg = build(clean)
    problems = check_sections(cfg)
    if problems:
        raise ConfigError(problems, source=str(config_path) if config_path else None)
    origins = {key: _describe_source(src, config_path) for key, src in sources.items()}
    origins.update(model_origins)
    return LoadedConfig(cfg=cfg, config_path=str(config_path) if config_path else None,
                        overrides=overrides, flags=flags, files=files, origins=origins)


def _describe_source(source: str, config_path: str | Path | None) -> str:
    if source == COMMAND_LINE:
        return "command line"
    if config_path is not None and Path(source).resolve() == Path(config_path).resolve():
        return f"file {source}"
    return f"config layer {source}"


def _model_file_layer(data: dict[str, Any], sources: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The `model.*` values the model folder declares for keys no layer set (embedctl.config.model_files),
    with their origins; warns about a set key the folder fixes to another value (the folder wins there)."""
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    name = model.get("name_or_path", "minilm")
    if not isinstance(name, str):
        return {}, {}
    kind = model.get("kind") if "model.kind" in sources else None
    found = read_model_settings(name, kind if isinstance(kind, str) else None)
    layer: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, value in found.values.items():
        dotted = f"model.{key}"
        where = f"model file {found.origin[key]} ({found.folder})"
        if dotted not in sources:
            layer[key] = value
            origins[dotted] = where
        elif key in found.fixed and model.get(key) != value:
            stderr_console().print(
                f"warning: {dotted}={model.get(key)!r} ({_describe_source(sources[dotted], None)}) is ignored: "
                f"the model folder fixes it to {value!r} ({where}); drop the setting or use another model",
                markup=False)
            origins[dotted] = where + ", fixed by the model"
    return ({"model": layer} if layer else {}), origins


def build(clean: dict[str, Any]) -> RootConfig:
    """Turn a validated mapping into dataclass instances: directly when every value is plain (:func:`is_plain`),
    else through OmegaConf's structured merge. Both give equal configs, types included (tested on every
    shipped config); the direct way spares a search the OmegaConf import and merge (~0.1-0.2 s)."""
    if is_plain(clean):
        return _construct(RootConfig, clean)
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(RootConfig), clean)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def is_plain(value: Any) -> bool:
    """True when ``value`` holds only str-keyed dicts, lists and scalars OmegaConf passes through unchanged:
    no ``${...}`` interpolation, no ``???`` (OmegaConf's missing value), no other types (tuples, paths, enums)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(is_plain(v) for v in value)
    if isinstance(value, str):
        return "${" not in value and value != "???"
    return value is None or isinstance(value, (bool, int, float))


def _construct(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` from a validated plain mapping, as OmegaConf's structured merge builds it: defaults for absent
    keys, sections built recursively, a dict field merged into its default, lists and scalars replacing theirs."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue  # the dataclass default (or default_factory), as OmegaConf.structured takes it
        tp, value = hints[f.name], values[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[f.name] = _construct(tp, value)
        elif isinstance(value, dict) and f.default_factory is not dataclasses.MISSING:
            kwargs[f.name] = deep_merge(f.default_factory(), copy.deepcopy(value))
        else:
            kwargs[f.name] = copy.deepcopy(value)
    return cls(**kwargs)


def check_sections(cfg: RootConfig) -> list[str]:
    """Cross-field checks: each section may define `problems() -> list[(key, message)]`."""
    out: list[str] = []
    for f in dataclasses.fields(cfg):
        section = getattr(cfg, f.name)
        check = getattr(section, "problems", None)
        if check is not None:
            out += [f"`{f.name}.{key}`: {message}" for key, message in check()]
    return out
