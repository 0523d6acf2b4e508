"""Every range checked: every numeric config key refuses a value outside its range, NaN and infinity (exit 2
naming the key), and an override that is not valid YAML names its key (exit 2, no parser traceback)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing

import pytest

from embedctl.config import load_config
from embedctl.config.fields import constraint_of
from embedctl.config.schema import RootConfig
from embedctl.config.validate import _unwrap_optional
from embedctl.errors import ConfigError

# (override, fragment of the message): today's hostile values
CASES = [
    ("engine.timeout_s=-5", "`engine.timeout_s` (set on the command line): expected > 0"),
    ("engine.timeout_s=0", "`engine.timeout_s` (set on the command line): expected > 0"),
    ("index.lock_wait_s=-1", "`index.lock_wait_s` (set on the command line): expected >= 0"),
    ("ranks.wait_s=-1", "`ranks.wait_s` (set on the command line): expected >= 0"),
    ("ranks.dead_s=0", "`ranks.dead_s` (set on the command line): expected > 0"),
    ("index.drift_threshold=0", "`index.drift_threshold` (set on the command line): expected > 0"),
    ("index.drift_threshold=-1.5", "`index.drift_threshold` (set on the command line): expected > 0"),
    ("optim.lr=.nan", "`optim.lr` (set on the command line): got nan; expected a finite number"),
    ("optim.lr=.inf", "`optim.lr` (set on the command line): expected > 0, got inf"),
    ("ranks.dead_s=.inf", "`ranks.dead_s` (set on the command line): expected > 0, got inf"),
    ("train.temperature=-.inf", "`train.temperature`"),
    ("search.centroid_score_threshold=.nan", "`search.centroid_score_threshold` (set on the command line): got nan; expected a finite number"),
    ("optim.betas=[0.9,.nan]", "`optim.betas`"),
    ("train.max_steps=[1,2", "`train.max_steps` (set on the command line): the value in `train.max_steps=[1,2` is not valid YAML"),
    ("search.metrics={a: 1", "`search.metrics` (set on the command line): the value in"),
    ("index.name='unclosed", "`index.name`"),
]


@pytest.mark.parametrize("override,fragment", CASES, ids=[c[0] for c in CASES])
def test_out_of_range_or_unparseable_override_is_refused_naming_the_key(override, fragment):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    assert caught.value.exit_code == 2
    assert fragment in str(caught.value)


@pytest.mark.parametrize("override", ["train.max_steps=[1,2", "engine.timeout_s=-5", "optim.lr=.nan"])
def test_the_cli_exits_2_without_a_traceback(cli, override):
    res = cli("config", "show", override)
    assert res.exit_code == 2, res.output
    assert override.split("=")[0] in res.output
    assert "Traceback" not in res.output and "unexpected error" not in res.output


def _numeric_fields(cls: type, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, _ = _unwrap_optional(hints[f.name])
        if dataclasses.is_dataclass(tp):
            yield from _numeric_fields(tp, f"{prefix}{f.name}.")
        elif tp in (int, float) or (typing.get_origin(tp) is list and typing.get_args(tp)[0] in (int, float)):
            yield f"{prefix}{f.name}", f


# numeric keys whose whole range is meaningful (a threshold on a score can be any finite number)
UNBOUNDED = {"search.centroid_score_threshold"}


def test_every_numeric_key_has_a_range():
    """The audit as a test: a numeric key added without a range (negative waits used to pass) fails here."""
    missing = [key for key, f in _numeric_fields(RootConfig) if constraint_of(f) is None and key not in UNBOUNDED]
    assert missing == []


def test_nan_is_refused_for_every_float_key():
    keys = [key for key, f in _numeric_fields(RootConfig)
            if typing.get_type_hints(RootConfig) and "float" in str(f.type) and "list" not in str(f.type)]
    assert keys  # the audit found the float keys
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"{key}=.nan" for key in keys])
    assert len(caught.value.problems) == len(keys), caught.value.problems


@pytest.mark.parametrize("value", ["sometimes", "Auto", "later"])
def test_a_train_resume_word_that_is_no_choice_is_refused_by_config_validate(tmp_path, value):
    """`config validate train.resume=sometimes` read the override as a config file's name (config file not
    found), and `config show` accepted it: the schema takes auto, must, never or a checkpoint folder."""
    for command in (["config", "validate"], ["config", "show"]):
        res = subprocess.run([sys.executable, "-m", "embedctl", *command, f"train.resume={value}"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert "`train.resume`: expected `auto`, `must`, `never` or a step checkpoint folder" in res.stderr
        assert f"got {value!r}" in res.stderr and "fix: set train.resume=auto" in res.stderr
        assert "config file not found" not in res.stderr and "Traceback" not in res.stderr


def test_a_train_resume_path_or_a_folder_here_passes_config_validate(tmp_path):
    """A value with a `/` or `.` is a path, checked by train where the run's files are; a bare name of a folder
    in the current folder is one too. Overrides apply to each file named beside them."""
    (tmp_path / "step_00000010").mkdir()
    (tmp_path / "c.yaml").write_text("optim:\n  lr: 1.0e-4\n")
    for args in (["train.resume=runs/x/checkpoints/step_00000010"], ["train.resume=step_00000010"],
                 ["train.resume=must"], ["c.yaml", "train.resume=never"]):
        res = subprocess.run([sys.executable, "-m", "embedctl", "config", "validate", *args], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 0 and res.stderr.startswith("ok "), (args, res.stderr)
    res = subprocess.run([sys.executable, "-m", "embedctl", "config", "validate", "c.yaml", "optim.lr=-1"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and "`optim.lr`" in res.stderr and "c.yaml" in res.stderr, res.stderr


@pytest.mark.parametrize("text,said", [
    ("optim:\n  lr: 1e-4\n  lr: 2e-4\n", "c.yaml:3:3: not valid YAML: found duplicate key lr (while constructing a "
                                         "mapping at line 2); fix: keep one `lr:` in that mapping"),
    ("train:\n  max_steps: [1, 2\noptim:\n  lr: 1e-4\n", "c.yaml:3:6: not valid YAML: did not find expected ',' "
                                                         "or ']' (while parsing a flow sequence at line 2); fix: "),
    ("defaults: [nope.yaml]\n", "named in c.yaml was not found; looked for: nope.yaml; fix: correct the name"),
])
def test_a_yaml_file_error_names_file_line_and_the_fix(tmp_path, text, said):
    """A YAML syntax error was the parser's message over several lines (the file named twice, no fix); a
    duplicate key said no fix at all."""
    (tmp_path / "c.yaml").write_text(text)
    res = subprocess.run([sys.executable, "-m", "embedctl", "config", "validate", "c.yaml"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and said in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 2, res.stderr  # the headline and one line for the problem
