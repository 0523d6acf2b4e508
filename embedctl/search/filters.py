"""The filter language of `embedctl search --filter`, ``Index.search(filter=...)`` and the server: one
small typed language over an index's fields (embedctl.index.fields), parsed by hand into a tree, never
evaluated as code and never turned into SQL.

Grammar (keywords and ``true``/``false`` in any case)::

    expr    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | atom
    atom    := "(" expr ")" | "exists" "(" field ")"
             | field op literal | field ["not"] "in" "(" literal ("," literal)* ")"
    op      := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    literal := integer | float | 'string' | "string" | true | false
    field   := name ("." name)*  |  `any name`

e.g. ``year >= 2015 and journal in ("Nature", "Cell")``, ``not exists(retracted) or retracted = false``.
A string escapes its quote and ``\\`` with a backslash. Bounds: :data:`MAX_CHARS` characters,
:data:`MAX_IN` values in one ``in`` list, :data:`MAX_NODES` nodes, :data:`MAX_DEPTH` nesting.

The same tree as JSON (what the server and the API take, :func:`from_json` / :meth:`Node.to_json`)::

    {"and": [{"field": "year", "op": ">=", "value": 2015},
             {"field": "journal", "op": "in", "values": ["Nature", "Cell"]}]}
    {"or": [...]}, {"not": {...}}, {"exists": "retracted"}, {"field": "x", "op": "not in", "values": [...]}

Types are checked against the index's fields when the filter is evaluated (embedctl.search.filter_eval):
numbers compare with int and float fields, strings with string fields, booleans with bool fields; an
unknown field is refused naming the known ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Union

from embedctl.errors import EmbedctlError

MAX_CHARS = 1_000_000
MAX_IN = 1024
MAX_NODES = 4096
MAX_DEPTH = 64
OPS = ("=", "!=", "<", "<=", ">", ">=")
Literal = Union[int, float, str, bool]


class FilterError(EmbedctlError):
    """A filter that cannot be parsed or does not fit the index's fields (exit code 2: bad usage)."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, *, where: str = "filter"):
        self.reason = message
        super().__init__(f"{where}: {message}", hint=hint or "see docs/filters.md for the filter language")

    def named(self, where: str) -> FilterError:
        """The same error naming where the filter came from (a config key and its flag) instead of `filter`."""
        return FilterError(self.reason, self.hint, where=where)


# -- the tree ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compare:
    field: str
    op: str
    value: Literal

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "op": self.op, "value": self.value}


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Literal, ...]
    negated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "op": "not in" if self.negated else "in", "values": list(self.values)}


@dataclass(frozen=True)
class Exists:
    field: str

    def to_json(self) -> dict[str, Any]:
        return {"exists": self.field}


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]

    def to_json(self) -> dict[str, Any]:
        return {"and": [i.to_json() for i in self.items]}


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]

    def to_json(self) -> dict[str, Any]:
        return {"or": [i.to_json() for i in self.items]}


@dataclass(frozen=True)
class Not:
    item: Node

    def to_json(self) -> dict[str, Any]:
        return {"not": self.item.to_json()}


Node = Union[Compare, In, Exists, And, Or, Not]


def fields_of(node: Node) -> set[str]:
    """Every field name the tree reads."""
    if isinstance(node, (And, Or)):
        return set().union(*(fields_of(i) for i in node.items))
    if isinstance(node, Not):
        return fields_of(node.item)
    return {node.field}


# -- tokenizer --------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)(?![A-Za-z_.])
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<quoted>`[^`]+`)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9][A-Za-z0-9_]*)*)
  | (?P<op><=|>=|!=|==|=|<|>)
  | (?P<punct>[(),])
""", re.VERBOSE)
_KEYWORDS = {"and", "or", "not", "in", "exists", "true", "false"}


@dataclass(frozen=True)
class Token:
    kind: str  # num, str, name, kw, op, punct, end
    text: str
    pos: int
    value: Any = None


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_CHARS:
        raise FilterError(f"the filter is {len(text):,} characters long; at most {MAX_CHARS:,}",
                          hint="filter on fewer values, or split the search")
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterError(f"unexpected character {text[pos]!r} at column {pos + 1}: {_show(text, pos)}")
        kind = m.lastgroup
        raw = m.group(kind)
        if kind == "num":
            value = float(raw) if any(c in raw for c in ".eE") else int(raw)
            out.append(Token("num", raw, pos, value))
        elif kind == "str":
            out.append(Token("str", raw, pos, re.sub(r"\\(.)", r"\1", raw[1:-1])))
        elif kind == "quoted":
            out.append(Token("name", raw, pos, raw[1:-1]))
        elif kind == "name":
            low = raw.lower()
            out.append(Token("kw", low, pos) if low in _KEYWORDS else Token("name", raw, pos, raw))
        elif kind in ("op", "punct"):
            out.append(Token(kind, "=" if raw == "==" else raw, pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


def _show(text: str, pos: int) -> str:
    lo = max(0, pos - 20)
    return f"...{text[lo:pos]}>>>{text[pos:pos + 20]}" if lo else f"{text[:pos]}>>>{text[pos:pos + 20]}"


# -- parser -----------------------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.nodes = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, what: str, tok: Token | None = None) -> FilterError:
        tok = tok or self.peek()
        found = "the end" if tok.kind == "end" else repr(tok.text)
        return FilterError(f"expected {what} at column {tok.pos + 1}, found {found}: {_show(self.text, tok.pos)}")

    def expect(self, kind: str, text: str | None = None, what: str | None = None) -> Token:
        tok = self.peek()
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self.fail(what or repr(text or kind))
        return self.take()

    def node(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FilterError(f"the filter has more than {MAX_NODES} parts", hint="simplify it, or use `in (...)`")
        return node

    def parse(self) -> Node:
        tree = self.or_()
        if self.peek().kind != "end":
            raise self.fail("`and`, `or` or the end")
        return tree

    def or_(self) -> Node:
        items = [self.and_()]
        while self.peek().kind == "kw" and self.peek().text == "or":
            self.take()
            items.append(self.and_())
        return items[0] if len(items) == 1 else self.node(Or(tuple(items)))

    def and_(self) -> Node:
        items = [self.not_()]
        while self.peek().kind == "kw" and self.peek().text == "and":
            self.take()
            items.append(self.not_())
        return items[0] if len(items) == 1 else self.node(And(tuple(items)))

    def not_(self) -> Node:
        if self.peek().kind == "kw" and self.peek().text == "not":
            self.take()
            self.enter()
            item = self.not_()
            self.depth -= 1
            return self.node(Not(item))
        return self.atom()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"the filter nests deeper than {MAX_DEPTH} levels", hint="simplify it")

    def atom(self) -> Node:
        tok = self.peek()
        if tok.kind == "punct" and tok.text == "(":
            self.take()
            self.enter()
            inner = self.or_()
            self.depth -= 1
            self.expect("punct", ")", "')'")
            return inner
        if tok.kind == "kw" and tok.text == "exists":
            self.take()
            self.expect("punct", "(", "'(' after exists")
            name = self.expect("name", what="a field name")
            self.expect("punct", ")", "')'")
            return self.node(Exists(name.value))
        if tok.kind != "name":
            raise self.fail("a field name, `not`, `exists(...)` or '('")
        name = self.take().value
        nxt = self.peek()
        if nxt.kind == "op":
            self.take()
            return self.node(Compare(name, nxt.text, self.literal()))
        negated = False
        if nxt.kind == "kw" and nxt.text == "not":
            self.take()
            negated = True
            nxt = self.peek()
        if nxt.kind == "kw" and nxt.text == "in":
            self.take()
            self.expect("punct", "(", "'(' after in")
            values = [self.literal()]
            while self.peek().kind == "punct" and self.peek().text == ",":
                self.take()
                values.append(self.literal())
                if len(values) > MAX_IN:
                    raise _too_many_in(name)
            self.expect("punct", ")", "',' or ')'")
            return self.node(In(name, tuple(values), negated))
        raise self.fail(f"an operator ({' '.join(OPS)}) or `in` after the field {name!r}")

    def literal(self) -> Literal:
        tok = self.peek()
        if tok.kind in ("num", "str"):
            self.take()
            return tok.value
        if tok.kind == "kw" and tok.text in ("true", "false"):
            self.take()
            return tok.text == "true"
        raise self.fail("a value (a number, a quoted string, true or false)")


def _too_many_in(name: str) -> FilterError:
    return FilterError(f"`{name} in (...)` lists more than {MAX_IN} values",
                       hint=f"list at most {MAX_IN} values, or filter on a coarser field")


def parse(text: str) -> Node:
    """The tree of a filter expression; :class:`FilterError` (with the column) when it is not one."""
    if not isinstance(text, str) or not text.strip():
        raise FilterError("the filter is empty", hint="give an expression such as `year >= 2015`")
    return _Parser(text).parse()


# -- JSON form --------------------------------------------------------------------------------------------
def from_json(obj: Any, _depth: int = 0, _count: list[int] | None = None) -> Node:
    """The tree of the JSON form (module docstring); refuses anything else, naming what it found."""
    count = _count if _count is not None else [0]
    count[0] += 1
    if count[0] > MAX_NODES:
        raise FilterError(f"the filter has more than {MAX_NODES} parts", hint="simplify it, or use `in`")
    if _depth > MAX_DEPTH:
        raise FilterError(f"the filter nests deeper than {MAX_DEPTH} levels", hint="simplify it")
    if not isinstance(obj, dict) or not obj:
        raise FilterError(f"expected a JSON object (a filter node), found {type(obj).__name__}")
    keys = set(obj)
    if keys in ({"and"}, {"or"}):
        key = keys.pop()
        items = obj[key]
        if not isinstance(items, list) or not items:
            raise FilterError(f"`{key}` takes a non-empty list of filter nodes")
        nodes = tuple(from_json(i, _depth + 1, count) for i in items)
        return nodes[0] if len(nodes) == 1 else (And(nodes) if key == "and" else Or(nodes))
    if keys == {"not"}:
        return Not(from_json(obj["not"], _depth + 1, count))
    if keys == {"exists"}:
        return Exists(_json_field(obj["exists"]))
    if "field" in keys and "op" in keys:
        name, op = _json_field(obj["field"]), obj["op"]
        if op in ("in", "not in"):
            if keys != {"field", "op", "values"}:
                raise FilterError("an `in` node has exactly the keys field, op, values")
            values = obj["values"]
            if not isinstance(values, list) or not values:
                raise FilterError(f"`values` of `{name} in` must be a non-empty list")
            if len(values) > MAX_IN:
                raise _too_many_in(name)
            return In(name, tuple(_json_literal(v) for v in values), op == "not in")
        if op == "==":
            op = "="
        if op not in OPS:
            raise FilterError(f"unknown operator {op!r}; expected one of {', '.join(OPS)}, in, not in")
        if keys != {"field", "op", "value"}:
            raise FilterError("a comparison node has exactly the keys field, op, value")
        return Compare(name, op, _json_literal(obj["value"]))
    raise FilterError(f"unknown filter node with keys {sorted(keys)}; expected and, or, not, exists, "
                      "or field + op + value(s)")


def _json_field(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise FilterError(f"a field name must be a non-empty string, found {value!r}")
    return value


def _json_literal(value: Any) -> Literal:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise FilterError(f"a value must be a number, a string or a boolean, found {type(value).__name__}")


def as_filter(spec: Any) -> Node | None:
    """A tree from what a caller passes: None, an expression string, the JSON form (a dict) or a tree."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return parse(spec)
    if isinstance(spec, dict):
        return from_json(spec)
    if isinstance(spec, (Compare, In, Exists, And, Or, Not)):
        return spec
    raise FilterError(f"a filter is an expression string or its JSON form (a dict), not {type(spec).__name__}")
