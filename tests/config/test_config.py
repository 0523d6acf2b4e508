"""The config system: layering order, overrides, schema errors, cycles, shipped configs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from embedctl.config import RootConfig, load_config
from embedctl.config.reference import reference_markdown, reference_rows
from embedctl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private recipes/ + configs/ tree so tests do not depend on the shipped layers."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EMBEDCTL_RECIPES", raising=False)
    write(tmp_path / "recipes/optim/a.yaml", "optim: {lr: 0.1, warmup_steps: 5}\n")
    write(tmp_path / "recipes/optim/b.yaml", "optim: {lr: 0.2}\n")
    write(tmp_path / "recipes/model/base.yaml", "model: {pooling: cls, doc_max_length: 100}\n")
    write(tmp_path / "recipes/model/nested.yaml", "defaults: [model/base]\nmodel: {doc_max_length: 200}\n")
    return tmp_path


def test_defaults_match_schema() -> None:
    cfg = load_config().cfg
    assert isinstance(cfg, RootConfig)
    assert cfg.model.name_or_path == "minilm"
    assert cfg.model.kind == "biencoder"
    assert cfg.engine.name == "single"
    assert cfg.data.split_factor == 1


@pytest.mark.parametrize(
    "key",
    ["model.name_or_path", "model.kind", "model.pooling", "optim.lr", "train.max_steps", "train.seed",
     "data.split_factor", "engine.name", "output.dir"],
)
def test_required_keys_exist(key: str) -> None:
    section, name = key.split(".")
    assert hasattr(getattr(load_config().cfg, section), name)


def test_layer_order_later_wins_and_file_beats_layers(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", """\
        defaults: [optim/a, optim/b]
        train: {max_steps: 7}
        """)
    cfg = load_config(cfg_path).cfg
    assert cfg.optim.lr == 0.2  # b after a
    assert cfg.optim.warmup_steps == 5  # from a, untouched by b
    assert cfg.train.max_steps == 7
    cfg_path = write(tree / "configs/y.yaml", "defaults: [optim/a]\noptim: {lr: 0.3}\n")
    assert load_config(cfg_path).cfg.optim.lr == 0.3


def test_nested_defaults(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", "defaults: [model/nested]\n")
    cfg = load_config(cfg_path).cfg
    assert cfg.model.pooling == "cls"  # from the nested layer's own default
    assert cfg.model.doc_max_length == 200  # the layer overrides its default


def test_overrides_beat_everything_and_flags_beat_overrides(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", "defaults: [optim/a]\noptim: {lr: 0.3}\n")
    loaded = load_config(cfg_path, ["optim.lr=1e-4", "train.max_steps=3", "model.matryoshka_dims=[64,32]"])
    assert loaded.cfg.optim.lr == pytest.approx(1e-4)
    assert loaded.cfg.train.max_steps == 3
    assert loaded.cfg.model.matryoshka_dims == [64, 32]
    loaded = load_config(cfg_path, ["train.max_steps=3"], {"train.max_steps": 9})
    assert loaded.cfg.train.max_steps == 9


def test_int_is_accepted_for_float_and_null_for_optional() -> None:
    cfg = load_config(None, ["optim.lr=1", "model.dropout=null", "train.grad_clip=null"]).cfg
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.model.dropout is None and cfg.train.grad_clip is None


def test_all_problems_reported_at_once_with_suggestions(tree: Path) -> None:
    cfg_path = write(tree / "configs/bad.yaml", """\
        optim: {lrr: 0.1}
        model: {kind: colbrt}
        """)
    with pytest.raises(ConfigError) as info:
        load_config(cfg_path, ["train.max_steps=abc", "lr=3", "engine.name=deepspeedd"])
    problems = info.value.problems
    assert len(problems) == 5, problems
    text = str(info.value)
    assert f"unknown key `optim.lrr` (set in {cfg_path}); did you mean `optim.lr`?" in text
    assert "`model.kind`" in text and "expected one of biencoder, colbert; got 'colbrt' (str); did you mean `colbert`?" in text
    assert "`train.max_steps` (set on the command line): expected an integer, got 'abc' (str)" in text
    assert "unknown key `lr` (set on the command line); did you mean `optim.lr`?" in text
    assert "did you mean `deepspeed`?" in text
    assert info.value.exit_code == 2


def test_unknown_section_and_wrong_section_type(tree: Path) -> None:
    cfg_path = write(tree / "configs/bad.yaml", "optimizer: {lr: 0.1}\ntrain: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg_path)
    text = str(info.value)
    assert "unknown key `optimizer`" in text and "did you mean `optim`?" in text
    assert "`train`" in text and "expected a section (mapping), got 5 (int)" in text


def test_list_element_types_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"`model.matryoshka_dims` \(set on the command line\): expected a list of integers"):
        load_config(None, ["model.matryoshka_dims=[64,x]"])


def test_malformed_override() -> None:
    with pytest.raises(ConfigError, match="override `optim.lr` is not of the form key=value"):
        load_config(None, ["optim.lr"])


def test_cycle_is_named(tree: Path) -> None:
    write(tree / "recipes/loop/a.yaml", "defaults: [loop/b]\n")
    write(tree / "recipes/loop/b.yaml", "defaults: [loop/a]\n")
    cfg_path = write(tree / "configs/x.yaml", "defaults: [loop/a]\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg_path)
    text = str(info.value)
    assert "recipe layers form a cycle:" in text
    assert "loop/a.yaml -> " in text and "loop/b.yaml -> " in text


def test_missing_layer_names_the_file_and_where_it_looked(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", "defaults: [optim/nope]\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg_path)
    text = str(info.value)
    assert f"recipe layer `optim/nope` named in {cfg_path} was not found; looked for:" in text
    assert str(tree / "recipes/optim/nope.yaml") in text


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="config file not found: does/not/exist.yaml"):
        load_config("does/not/exist.yaml")


def test_invalid_yaml_names_the_file(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", "model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(cfg_path)


def test_interpolation_resolves(tree: Path) -> None:
    cfg_path = write(tree / "configs/x.yaml", "model: {doc_max_length: 300, query_max_length: '${model.doc_max_length}'}\n")
    assert load_config(cfg_path).cfg.model.query_max_length == 300


SHIPPED = sorted((REPO / "configs").glob("*.yaml"))
RECIPES = sorted((REPO / "recipes").glob("**/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_config_validates_and_says_how_to_launch(path: Path) -> None:
    load_config(path)
    first = path.read_text().splitlines()[0]
    assert first.startswith(("# embedctl ", "# deepspeed ", "# torchrun ", "# make ")), first


@pytest.mark.parametrize("path", RECIPES, ids=[str(p.relative_to(REPO / "recipes")) for p in RECIPES])
def test_every_recipe_layer_validates(path: Path, tmp_path: Path) -> None:
    name = str(path.relative_to(REPO / "recipes").with_suffix(""))
    cfg_path = write(tmp_path / "configs/x.yaml", f"defaults: [{name}]\n")
    load_config(cfg_path)


def test_e5_config_is_what_it_says() -> None:
    cfg = load_config(REPO / "configs/e5_finetune.yaml").cfg
    assert cfg.model.name_or_path == "intfloat/e5-base-v2"
    assert (cfg.model.pooling, cfg.model.query_prefix, cfg.model.doc_prefix) == ("mean", "query: ", "passage: ")
    assert (cfg.engine.name, cfg.engine.zero_stage) == ("deepspeed", 1)


def test_every_field_is_documented() -> None:
    rows = reference_rows()
    missing = [r.key for r in rows if not r.doc]
    assert not missing, f"fields without a docstring: {missing}"
    assert "| `optim.lr` | a number, > 0 | `2e-05` |" in reference_markdown()


def test_shipped_reference_is_up_to_date() -> None:
    shipped = REPO / "docs" / "config-reference.md"
    assert shipped.read_text() == reference_markdown(), "regenerate it: make docs"


def test_ranges_are_field_constraints_checked_at_load_time() -> None:
    """Every range is a Constraint in the field's metadata (embedctl.config.fields): the loader reports
    each one with the dotted key, what was expected and a fix, all at once, exit 2."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["index.nbits=3", "search.k=0", "train.max_steps=-5", "model.matryoshka_dims=[64,0]",
                           "optim.betas=[0.9,1.5]", "prebatch.mine_margin=0", "engine.zero_stage=4",
                           "index.num_partitions=null", "model.dropout=null"])
    text = str(err.value)
    assert err.value.exit_code == 2 and "7 problem(s)" in text
    assert "`index.nbits` (set on the command line): expected one of 1, 2, 4, got 3 (int); fix: set index.nbits " \
           "to a value one of 1, 2, 4, e.g. index.nbits=2 (the default)" in text
    assert "`search.k` (set on the command line): expected > 0, got 0 (int)" in text
    assert "`train.max_steps` (set on the command line): expected > 0, got -5 (int)" in text
    assert "`model.matryoshka_dims` (set on the command line): expected every item > 0, got [64, 0]" in text
    assert "`optim.betas` (set on the command line): expected every item in [0, 1]" in text
    assert "`prebatch.mine_margin` (set on the command line): expected in (0, 1]" in text
    assert "`engine.zero_stage` (set on the command line): expected one of 0, 1, 2, 3" in text


def test_constraint_helpers() -> None:
    import dataclasses

    from embedctl.config.fields import Constraint, at_least, between, constraint_of, one_of, positive

    @dataclasses.dataclass
    class Example:
        a: int = positive(1)
        b: int = at_least(0, 0)
        c: float = between(0, 1, 0.5, low_open=True)
        d: int = one_of(2, 1, 2, 4)
        e: list = positive([3])

    fields = {f.name: constraint_of(f) for f in dataclasses.fields(Example)}
    assert [fields[k].describe() for k in "abcde"] == ["> 0", ">= 0", "in (0, 1]", "one of 1, 2, 4", "> 0"]
    assert not fields["a"].allows(0) and fields["a"].allows(None) and fields["b"].allows(0)
    assert not fields["c"].allows(0) and fields["c"].allows(1) and not fields["d"].allows(3)
    assert fields["e"].allows([1, 2]) and not fields["e"].allows([1, 0])
    assert Example().e == [3] and Example().e is not Example().e
    with pytest.raises(AssertionError):
        positive(0)  # a default outside its own range is a bug in the schema
    assert Constraint(low=1).example() == 1


def test_numeric_fields_with_an_obvious_range_are_constrained() -> None:
    import dataclasses
    import typing

    from embedctl.config.fields import constraint_of
    from embedctl.config.schema import RootConfig

    # fields whose range is not obvious (a score threshold can be any real number)
    free = {"search.centroid_score_threshold", "engine.timeout_s"}
    # keys the index-lifecycle work is adding to sections/index.py; its owner gives them their range
    free |= {"index.drift_threshold", "index.lock_wait_s"}
    missing = []

    def walk(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(tp, f"{prefix}{f.name}.")
                continue
            args = typing.get_args(tp) or (tp,)
            numeric = any(a in (int, float) for a in args) or tp in (list[int], list[float])
            if numeric and constraint_of(f) is None and f"{prefix}{f.name}" not in free:
                missing.append(f"{prefix}{f.name}")

    walk(RootConfig)
    assert not missing, f"numeric keys without a range constraint: {missing}"
