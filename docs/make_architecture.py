"""Draw embedctl's package diagram from its own imports into docs/architecture.md.

    .venv/bin/python docs/make_architecture.py           # rewrite the generated block of docs/architecture.md
    .venv/bin/python docs/make_architecture.py --check   # exit 1 when that block is not what the code gives
    .venv/bin/python docs/make_architecture.py --svg     # also docs/img/architecture.svg (graphviz `dot`, if installed)

It reads every module under embedctl/ with `ast` (nothing is imported): each `import embedctl...` /
`from embedctl... import ...` (relative ones too) at module top, or inside a function (lazy, marked), or
under `if TYPE_CHECKING:` (never run, left out). Modules group into packages (PACKAGES_OF_THEIR_OWN are
drawn apart from their parent; every other sub-package folds into its parent, embedctl/<name>.py modules
are nodes of their own) and packages into LAYERS, top to bottom. Arrows point from the importer to the
imported (dashed when every import behind it is inside a function); no counts, so that a new module does
not make the document stale, only a new arrow does. An arrow from a lower layer
to a higher one, and every arrow of a package cycle, is drawn red and listed with the imports behind it.
A package missing from LAYERS is drawn in an "unplaced" layer with a note: add it to LAYERS.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "embedctl"
DOC = REPO / "docs" / "architecture.md"
SVG = REPO / "docs" / "img" / "architecture.svg"
BEGIN, END = "<!-- BEGIN GENERATED: packages -->", "<!-- END GENERATED: packages -->"

# top to bottom: a package may import from its own layer and the layers below it, never from above
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("embedctl.__main__", "embedctl.cli")),
    ("commands", ("embedctl.commands",)),
    ("service", ("embedctl.serve",)),
    ("api", ("embedctl.api", "embedctl")),  # the package root re-exports the API (embedctl.Index)
    ("pipelines", ("embedctl.train", "embedctl.search", "embedctl.prebatch")),
    ("index", ("embedctl.index",)),
    ("core", ("embedctl.index.plaid", "embedctl.models", "embedctl.data", "embedctl.eval")),
    ("config", ("embedctl.config", "embedctl.runinfo")),
    ("foundation", ("embedctl.util", "embedctl.native", "embedctl.errors")),
]
PACKAGES_OF_THEIR_OWN = ("embedctl.index.plaid",)
RED = "#d62728"


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported embedctl module
    line: int
    lazy: bool  # inside a function: runs when called, not at import


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SOURCE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, lazy: bool = False):
    """(import node, lazy) for every import below ``node``, skipping `if TYPE_CHECKING:` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, lazy
        elif isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:
                yield from _walk(ast.Module(body=[other], type_ignores=[]), lazy)
        else:
            yield from _walk(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    is_package = path.name == "__init__.py"
    out = []
    for node, lazy in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the package holding this module
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in dict.fromkeys(targets):
            while target and target not in known and "." in target:  # import a.b.c where c is a name
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                out.append(Import(name, target, node.lineno, lazy))
    return out


def package_of(module: str, known: dict[str, Path]) -> str:
    for own in PACKAGES_OF_THEIR_OWN:
        if module == own or module.startswith(own + "."):
            return own
    parts = module.split(".")
    if len(parts) == 1:
        return module
    if len(parts) == 2 and not known[module].name == "__init__.py":
        return module  # embedctl/<name>.py: a node of its own
    return ".".join(parts[:2])


def layer_of(package: str) -> int | None:
    for i, (_, members) in enumerate(LAYERS):
        if package in members:
            return i
    return None


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted; sorted."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in sorted(edges):
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted({x for e in edges for x in e}):
        if v not in index:
            visit(v)
    return sorted(found)


@dataclass
class Graph:
    packages: dict[str, list[str]]  # package -> its modules
    edges: dict[tuple[str, str], list[Import]]  # (package, package) -> the imports behind the arrow
    module_cycles: list[list[str]]  # cycles among module-top imports: real import-time cycles


def build() -> Graph:
    known = modules()
    imports = [imp for name, path in known.items() for imp in imports_of(name, path, known)]
    packages: dict[str, list[str]] = defaultdict(list)
    for name in known:
        packages[package_of(name, known)].append(name)
    edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in imports:
        a, b = package_of(imp.source, known), package_of(imp.target, known)
        if a != b:
            edges[(a, b)].append(imp)
    top = {(i.source, i.target) for i in imports if not i.lazy}
    return Graph(dict(packages), dict(edges), cycles(top))


# ------------------------------------------------------------------ rendering -----------------------------
def node_id(package: str) -> str:
    return package.replace(".", "_").replace("__", "")


def short(package: str) -> str:
    return package.removeprefix("embedctl.") if package != "embedctl" else "embedctl (package root)"


def where(source: str, target: str, lazy: bool) -> str:
    # no line numbers: the block would go stale with every edit above an import
    return f"{source} -> {target}{' (lazy)' if lazy else ''}"


def mermaid(graph: Graph) -> tuple[list[str], list[str]]:
    """(the flowchart lines, the notes on red arrows and cycles)."""
    placed: dict[int | None, list[str]] = defaultdict(list)
    for package in sorted(graph.packages):
        placed[layer_of(package)].append(package)
    pkg_cycles = cycles(set(graph.edges))
    in_cycle = {(a, b) for comp in pkg_cycles for (a, b) in graph.edges if a in comp and b in comp}
    lines = ["flowchart TD"]
    names = [name for name, _ in LAYERS] + ["unplaced"]
    for i, layer_name in enumerate(names):
        members = placed.get(i if i < len(LAYERS) else None, [])
        if not members:
            continue
        lines.append(f'  subgraph layer{i}["{i + 1}. {layer_name}"]')
        for package in members:
            lines.append(f'    {node_id(package)}["{short(package)}"]')
        lines.append("  end")
    red, notes = [], []
    for n, ((a, b), imps) in enumerate(sorted(graph.edges.items())):
        pairs: dict[tuple[str, str], bool] = {}  # module pair -> every import of it lazy
        for i in imps:
            pairs[(i.source, i.target)] = pairs.get((i.source, i.target), True) and i.lazy
        # no counts on the picture: adding a module to a package must not make the document stale
        arrow = "-.->" if all(pairs.values()) else "-->"
        lines.append(f"  {node_id(a)} {arrow} {node_id(b)}")
        la, lb = layer_of(a), layer_of(b)
        upward = la is not None and lb is not None and lb < la
        if upward or (a, b) in in_cycle:
            red.append(n)
            why = "against the layer order" if upward else "part of a package cycle"
            if upward and (a, b) in in_cycle:
                why += ", part of a package cycle"
            shown = "; ".join(f"`{where(s, d, lz)}`" for (s, d), lz in sorted(pairs.items())[:6])
            more = f" and {len(pairs) - 6} more" if len(pairs) > 6 else ""
            notes.append(f"- **{short(a)} -> {short(b)}** ({why}): {shown}{more}")
    if red:
        lines.append(f"  linkStyle {','.join(map(str, red))} stroke:{RED},stroke-width:2px")
    for comp in pkg_cycles:
        notes.append(f"- package cycle: {' <-> '.join(short(p) for p in comp)}")
    for comp in graph.module_cycles:
        notes.append(f"- **import-time module cycle** (module-top imports): {' <-> '.join(f'`{m}`' for m in comp)}")
    for package in placed.get(None, []):
        notes.append(f"- `{package}` is in no layer: add it to LAYERS in docs/make_architecture.py")
    return lines, notes


def block(graph: Graph) -> str:
    lines, notes = mermaid(graph)
    layers = ["| layer | packages |", "|---|---|"]
    for i, (layer_name, members) in enumerate(LAYERS):
        present = [f"`{short(p)}`" for p in members if p in graph.packages]
        if present:
            layers.append(f"| {i + 1}. {layer_name} | {', '.join(present)} |")
    out = [BEGIN, "<!-- generated by docs/make_architecture.py from embedctl's imports; do not edit by hand -->", "",
           f"{len(graph.packages)} packages. An arrow `A -> B` means modules of A import modules of B (dashed: "
           "only inside functions). Red: an arrow against the layer order or inside a package cycle, listed "
           "below the diagram.", "", "```mermaid", *lines, "```", "", *layers, ""]
    out += ["Red arrows, cycles and unplaced packages:", "", *notes] if notes else ["No arrow runs against the "
                                                                                  "layer order; no cycles."]
    return "\n".join([*out, END])


def dot(graph: Graph) -> str:
    lines = ["digraph embedctl {", "  rankdir=TB; node [shape=box, fontname=Helvetica, fontsize=10];"]
    for i, (layer_name, members) in enumerate(LAYERS):
        present = [p for p in members if p in graph.packages]
        if present:
            lines.append(f'  subgraph cluster_{i} {{ label="{i + 1}. {layer_name}"; '
                         + " ".join(f'"{short(p)}";' for p in present) + " }")
    for (a, b), imps in sorted(graph.edges.items()):
        la, lb = layer_of(a), layer_of(b)
        color = RED if la is not None and lb is not None and lb < la else "black"
        style = "dashed" if all(i.lazy for i in imps) else "solid"
        pairs = len({(i.source, i.target) for i in imps})
        lines.append(f'  "{short(a)}" -> "{short(b)}" [label="{pairs}", color="{color}", style={style}];')
    return "\n".join([*lines, "}"]) + "\n"


def replace_block(text: str, new: str) -> str:
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC}: the markers {BEGIN} / {END} are missing")
    head, rest = text.split(BEGIN, 1)
    return head + new + rest.split(END, 1)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/architecture.md is out of date")
    parser.add_argument("--svg", action="store_true", help="also write docs/img/architecture.svg with graphviz dot")
    args = parser.parse_args()
    graph = build()
    current = DOC.read_text(encoding="utf-8")
    wanted = replace_block(current, block(graph))
    if args.check:
        if wanted != current:
            print(f"{DOC.relative_to(REPO)} is out of date: run python docs/make_architecture.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        DOC.write_text(wanted, encoding="utf-8")
    print(f"wrote {DOC.relative_to(REPO)}")
    if args.svg:
        exe = shutil.which("dot")
        if exe is None:
            print("graphviz `dot` not found: no SVG (the Mermaid diagram in the doc is the same picture)")
        else:
            svg = subprocess.run([exe, "-Tsvg"], input=dot(graph), capture_output=True, text=True, check=True).stdout
            SVG.parent.mkdir(parents=True, exist_ok=True)
            SVG.write_text(svg, encoding="utf-8")
            print(f"wrote {SVG.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
