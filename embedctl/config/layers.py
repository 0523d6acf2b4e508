"""Compose a config file with its `defaults: [...]` recipe layers.

Order (later wins): each default layer in list order (each expanded recursively, its own defaults
first), then the file's own keys. Command-line overrides are applied later by the loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.errors import ConfigError

DEFAULTS_KEY = "defaults"


def recipe_roots(config_path: Path | None) -> list[Path]:
    """Folders searched for recipe layers, most specific first."""
    roots: list[Path] = []
    env = os.environ.get("EMBEDCTL_RECIPES")
    if env:
        roots += [Path(p) for p in env.split(os.pathsep) if p]
    if config_path is not None:
        here = config_path.resolve().parent
        roots += [here / "recipes", here.parent / "recipes"]
    roots.append(Path.cwd() / "recipes")
    roots.append(Path(__file__).resolve().parents[2] / "recipes")  # the source checkout
    seen: list[Path] = []
    for r in roots:
        if r not in seen:
            seen.append(r)
    return seen


@dataclass
class Composed:
    """The merged raw mapping plus which file set each dotted key."""

    data: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


def _read_yaml(path: Path, referenced_from: str | None) -> dict[str, Any]:
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not path.is_file():
        where = f" (named in {referenced_from})" if referenced_from else ""
        raise ConfigError([f"config file not found: {path}{where}; fix: check the path (a YAML file, e.g. "
                           "configs/*.yaml), or use key=value overrides alone"])
    try:
        loaded = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        tabbed = _tab_indented_line(path)
        if tabbed is not None:
            raise ConfigError([f"{path}:{tabbed}: a tab indents this line; YAML indents with spaces only "
                               "(fix: replace the tab with spaces)"]) from exc
        where, detail = _yaml_problem(exc)
        raise ConfigError([f"{path}{where}: not valid YAML: {detail}"]) from exc
    container = OmegaConf.to_container(loaded, resolve=False)
    if container is None:
        return {}
    if not isinstance(container, dict):
        raise ConfigError([f"{path}: expected a mapping of sections at the top level, got a {type(container).__name__}"])
    return container


def _yaml_problem(exc: Exception) -> tuple[str, str]:
    """(`:LINE:COLUMN` or "", `what (where it began); fix: ...`) on one line: the parser's message runs over
    several lines, names the file twice and says no fix."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return "", f"{' '.join(str(exc).split())}; fix: correct the YAML (a mapping of sections)"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    began = f" ({context} at line {start.line + 1})" if context and start is not None else ""
    if problem.startswith("found duplicate key"):
        fix = f"keep one `{problem.split('found duplicate key', 1)[1].strip()}:` in that mapping"
    else:
        fix = ("check that line and the one before: indentation (spaces, the same depth for keys of one "
               "mapping), a `key: value` pair, a closed bracket or quote")
    return f":{mark.line + 1}:{mark.column + 1}", f"{problem}{began}; fix: {fix}"


def _tab_indented_line(path: Path) -> int | None:
    """The first line whose indentation holds a tab (YAML forbids them), or None."""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if "\t" in line[: len(line) - len(line.lstrip(" \t"))]:
            return number
    return None


def _find_layer(name: str, config_path: Path, referenced_from: str) -> Path:
    if name.startswith(("./", "../", "/")) or name.endswith((".yaml", ".yml")):
        candidate = (config_path.parent / name) if not name.startswith("/") else Path(name)
        if candidate.suffix not in (".yaml", ".yml"):
            candidate = candidate.with_suffix(".yaml")
        if candidate.is_file():
            return candidate
        searched = [candidate]
    else:
        searched = [root / f"{name}.yaml" for root in recipe_roots(config_path)]
        for candidate in searched:
            if candidate.is_file():
                return candidate
    raise ConfigError(
        [
            f"recipe layer `{name}` named in {referenced_from} was not found; looked for: "
            + ", ".join(str(p) for p in searched)
            + "; fix: correct the name in `defaults`, create that recipe (recipes/GROUP/NAME.yaml), or set "
            "EMBEDCTL_RECIPES to your recipes folder"
        ]
    )


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def compose(path: Path, _stack: tuple[str, ...] = (), _referenced_from: str | None = None) -> Composed:
    """Load ``path`` and everything its defaults name, merged in order."""
    key = str(path.resolve())
    if key in _stack:
        cycle = " -> ".join([*_stack[_stack.index(key):], key])
        raise ConfigError([f"recipe layers form a cycle: {cycle}"])
    raw = _read_yaml(path, _referenced_from)
    defaults = raw.pop(DEFAULTS_KEY, []) or []
    if not isinstance(defaults, list) or not all(isinstance(d, str) for d in defaults):
        raise ConfigError([f"{path}: `defaults` must be a list of recipe layer names like [model/minilm, optim/adamw_warmup]"])
    out = Composed()
    for name in defaults:
        layer = compose(_find_layer(name, path, str(path)), (*_stack, key), str(path))
        out.data = deep_merge(out.data, layer.data)
        out.sources.update(layer.sources)
        out.files += layer.files
    out.data = deep_merge(out.data, raw)
    out.sources.update({k: str(path) for k in flatten(raw)})
    out.files.append(str(path))
    return out
