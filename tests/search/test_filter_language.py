"""The filter language (embedctl.search.filters): grammar, the JSON form of the same tree, and hostile input
(bad syntax, injection attempts, oversized IN lists and nesting) refused with a clear FilterError (exit 2)."""

from __future__ import annotations

import json

import pytest

from embedctl.search.filters import (
    MAX_DEPTH,
    MAX_IN,
    And,
    Compare,
    Exists,
    FilterError,
    In,
    Not,
    Or,
    as_filter,
    from_json,
    parse,
)


def test_precedence_parentheses_and_every_operator():
    tree = parse('year >= 2015 and journal in ("Nature", \'Cell\') or not exists(retracted)')
    assert tree == Or((And((Compare("year", ">=", 2015), In("journal", ("Nature", "Cell")))),
                       Not(Exists("retracted"))))
    assert parse("a = 1 and (b < 2.5 or c != true)") == And((Compare("a", "=", 1),
                                                              Or((Compare("b", "<", 2.5), Compare("c", "!=", True)))))
    for op in ("=", "!=", "<", "<=", ">", ">="):
        assert parse(f"x {op} -3") == Compare("x", op, -3)
    assert parse("x == 'a'") == Compare("x", "=", "a")
    assert parse("metadata.year NOT IN (1, 2e3)") == In("metadata.year", (1, 2000.0), negated=True)
    assert parse("`odd name` = 'it\\'s'") == Compare("odd name", "=", "it's")


def test_json_form_round_trips_the_same_tree():
    for text in ('year >= 2015 and journal in ("Nature", "Cell")', "not (a = 1 or exists(b))",
                 "x not in ('a')", "flag = false"):
        tree = parse(text)
        again = from_json(json.loads(json.dumps(tree.to_json())))
        assert again == tree
        assert as_filter(tree.to_json()) == tree == as_filter(text)
    assert as_filter(None) is None


@pytest.mark.parametrize("text,where", [
    ("year >= ", "expected a value"),
    ("year 2015", "expected an operator"),
    ("(year = 1", "expected ')'"),
    ("year = 1 year = 2", "expected `and`, `or` or the end"),
    ("year = 1; DROP TABLE docs", "unexpected character ';'"),
    ("year = 1 or 1=1 --", "unexpected character '-'"),
    ("year = 1 or 1 = 1", "expected a field name"),
    ("__import__('os').system('x')", "unexpected character '.'"),
    ("__import__('os')", "expected an operator"),
    ("year = 'unterminated", "unexpected character"),
    ("", "the filter is empty"),
])
def test_bad_syntax_and_injection_attempts_name_the_column(text, where):
    with pytest.raises(FilterError) as err:
        parse(text)
    assert where in str(err.value) and err.value.exit_code == 2


def test_bounds_on_in_lists_nesting_and_json():
    huge = "id in (" + ", ".join(str(i) for i in range(100_000)) + ")"
    with pytest.raises(FilterError, match=f"more than {MAX_IN} values"):
        parse(huge)
    with pytest.raises(FilterError, match="nests deeper"):
        parse("(" * (MAX_DEPTH + 2) + "a = 1" + ")" * (MAX_DEPTH + 2))
    with pytest.raises(FilterError, match=f"more than {MAX_IN} values"):
        from_json({"field": "id", "op": "in", "values": list(range(100_000))})
    for bad, msg in [({"field": "a", "op": "~", "value": 1}, "unknown operator"),
                     ({"field": "a", "op": "=", "value": [1]}, "a value must be"),
                     ({"sql": "1=1"}, "unknown filter node"),
                     ({"and": []}, "non-empty list"),
                     ([1], "expected a JSON object")]:
        with pytest.raises(FilterError, match=msg):
            from_json(bad)
    with pytest.raises(FilterError, match="an expression string or its JSON form"):
        as_filter(42)
