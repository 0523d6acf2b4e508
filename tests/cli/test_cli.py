"""The CLI front: dispatch, exit codes, error display, start-up cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embedctl.cli.common import split_args
from embedctl.errors import EmbedctlError

REPO = Path(__file__).resolve().parents[2]
SUBCOMMANDS = ["pretokenize", "prebatch", "train", "index", "search", "evaluate", "serve", "config"]


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "embedctl", *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, **(env or {})}, timeout=120,
    )


def test_help_lists_every_subcommand(cli) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in result.output


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from embedctl.cli.main import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "for sub in ['train', 'index', 'search', 'pretokenize', 'prebatch', 'evaluate', 'serve']:\n"
        "    assert CliRunner().invoke(app, [sub, '--help']).exit_code == 0\n"
        "heavy = [m for m in ('torch', 'transformers', 'deepspeed', 'faiss', 'pyarrow', 'numpy', 'omegaconf') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_version(cli) -> None:
    result = cli("--version")
    assert result.exit_code == 0 and result.output.startswith("embedctl ")


def test_config_show_prints_resolved_yaml(cli) -> None:
    result = cli("config", "show", str(REPO / "configs/minilm_scifact.yaml"), "optim.lr=1e-4", "train.max_steps=7")
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert data["optim"]["lr"] == pytest.approx(1e-4)
    assert data["train"]["max_steps"] == 7
    assert data["model"]["name_or_path"] == "minilm"
    assert set(data) >= {"model", "data", "train", "optim", "engine", "index", "search", "output"}


def test_config_validate_defaults_to_configs_dir() -> None:
    result = run_cli("config", "validate")
    assert result.returncode == 0, result.stderr
    assert "ok      configs/minilm_scifact.yaml" in result.stderr


def test_config_validate_fails_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lrr: 1}\n")
    good = REPO / "configs/minilm_scifact.yaml"
    result = run_cli("config", "validate", str(good), str(bad))
    assert result.returncode == 2
    assert "did you mean `optim.lr`?" in result.stderr
    assert "ok      " in result.stderr and "FAILED" in result.stderr


def test_user_error_has_no_traceback_unless_debug() -> None:
    result = run_cli("config", "show", "optim.lrr=1")
    assert result.returncode == 2
    assert "unknown key `optim.lrr` (set on the command line); did you mean `optim.lr`?" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    debug = run_cli("config", "show", "optim.lrr=1", env={"EMBEDCTL_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_missing_config_file_exit_2() -> None:
    result = run_cli("config", "show", "nope.yaml")
    assert result.returncode == 2
    assert "config file not found: nope.yaml" in result.stderr


def test_stray_positional_is_rejected(cli) -> None:
    result = cli("config", "show", "oops")
    assert result.exit_code == 2


def test_config_keys_lists_documented_keys(cli) -> None:
    result = cli("config", "keys", "optim", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "optim.lr" in result.output and "Peak learning rate" in result.output
    assert "model.kind" not in result.output


def test_split_args() -> None:
    assert split_args(["c.yaml", "a.b=1", "x=y z"]) == ("c.yaml", ["a.b=1", "x=y z"], [])
    assert split_args(["what is BM25?", "search.k=5"], allow_positional=True) == (None, ["search.k=5"], ["what is BM25?"])
    with pytest.raises(EmbedctlError):
        split_args(["stray"])


def test_run_info_is_written(tmp_path: Path) -> None:
    from embedctl.config import load_config
    from embedctl.runinfo import write_run_info

    loaded = load_config(REPO / "configs/minilm_scifact.yaml", ["train.max_steps=3"])
    write_run_info(tmp_path, loaded, "train")
    resolved = yaml.safe_load((tmp_path / "resolved_config.yaml").read_text())
    assert resolved["train"]["max_steps"] == 3
    raw = yaml.safe_load((tmp_path / "overrides.yaml").read_text())
    assert raw["overrides"] == ["train.max_steps=3"] and raw["command"] == "train"
    versions = json.loads((tmp_path / "versions.json").read_text())
    assert {"embedctl", "torch", "transformers", "deepspeed", "git_commit"} <= set(versions)
    assert not list(tmp_path.glob(".*.tmp"))


def test_model_alias_resolves_to_bundled_folder() -> None:
    from embedctl.models.hub import resolve_model_path

    path = Path(resolve_model_path("minilm"))
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def test_unknown_hub_id_names_the_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from embedctl.models.hub import resolve_model_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(EmbedctlError) as info:
        resolve_model_path("someone/not-a-cached-model")
    assert "`model.name_or_path` = 'someone/not-a-cached-model'" in str(info.value)
    assert "minilm" in str(info.value)


def test_deepspeed_launcher_local_rank_argument_is_accepted() -> None:
    # `deepspeed -m embedctl train CFG` runs `python -m embedctl --local_rank=N train CFG`.
    result = run_cli("--local_rank=1", "config", "show", "train.max_steps=4")
    assert result.returncode == 0, result.stderr
    assert "max_steps: 4" in result.stdout


def test_index_reads_flags_after_its_config_file(cli, tmp_path: Path, monkeypatch) -> None:
    """`embedctl index CFG --collection X --name N` builds, as every command reads flags after positionals;
    a first argument naming a subcommand still runs it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.tsv").write_text("d1\thello world\nd2\tanother document\n")
    (tmp_path / "cfg.yaml").write_text("index:\n  kind: dense\n")
    res = cli("index", "cfg.yaml", "--collection", "c.tsv", "--name", "small")
    assert res.exit_code == 0, res.output
    res = cli("index", "info", "--index", "indexes/small", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["documents"] == 2
