"""configs/colbert_scifact.yaml, the shipped ColBERT route, end to end on a tiny SciFact slice: the commands of
its header comment (pretokenize, prebatch with minilm-mined negatives, train, PLAID index, search, evaluate),
each with the config's model settings; only paths, sizes and steps are overridden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.datahelpers import scifact_slice

from embedctl.config import load_config

CFG = str(Path(__file__).resolve().parents[2] / "configs" / "colbert_scifact.yaml")


def test_header_names_the_commands_and_model_settings_are_the_colbert_ones():
    header = [line for line in Path(CFG).read_text().splitlines() if line.startswith("#")]
    for command in ("pretokenize", "prebatch", "train", "index", "search", "evaluate"):
        assert any(f"embedctl {command} " in line for line in header), command
    m = load_config(CFG, []).cfg.model
    assert (m.name_or_path, m.kind, m.dim) == ("minilm", "colbert", 128)
    assert m.query_augmentation and m.mask_punctuation and (m.query_marker, m.doc_marker) == ("[unused0]", "[unused1]")
    cfg = load_config(CFG, []).cfg
    assert cfg.prebatch.mine_model == "minilm" and cfg.prebatch.negatives_per_query > 0
    assert (cfg.index.kind, cfg.index.nbits) == ("plaid", 2)


@pytest.mark.slow
def test_shipped_config_runs_end_to_end_on_a_tiny_slice(tmp_path, cli):
    beir = scifact_slice(tmp_path / "scifact", n_queries=6, extra_docs=14)
    run = tmp_path / "run"
    paths = [f"pretokenize.input={beir}", f"pretokenize.output={run}/tokens", f"prebatch.input={run}/tokens",
             f"prebatch.qrels={beir}/qrels/train.tsv", f"prebatch.output={run}/batches", f"data.path={run}/batches",
             f"output.dir={run}/train", f"index.collection={beir}/corpus.jsonl", f"index.root={run}/indexes",
             f"search.queries={beir}/queries.jsonl", f"search.qrels={beir}/qrels/train.tsv"]
    tiny = ["prebatch.queries_per_batch=4", "prebatch.mine_depth=10", "train.max_steps=2", "train.save_every=0",
            "optim.warmup_steps=1", "model.doc_max_length=64", "index.kmeans_niters=2"]
    err = ""
    for command in (["pretokenize", CFG], ["prebatch", CFG], ["train", CFG]):
        result = cli(*command, *paths, *tiny)
        assert result.exit_code == 0, result.output
        err += result.output  # click's runner: stdout and stderr together
    assert "with minilm (biencoder)" in err  # mined by the bi-encoder the name denotes
    assert "trained 2 steps in " in err and "final model: " in err
    card = json.loads((run / "train" / "final" / "embedctl_model.json").read_text())
    assert (card["kind"], card["dim"], card["query_marker"]) == ("colbert", 128, "[unused0]")
    result = cli("index", CFG, *paths, *tiny, f"model.name_or_path={run}/train/final", "index.name=trained")
    assert result.exit_code == 0, result.output
    meta = json.loads((run / "indexes" / "trained" / "embedctl_index.json").read_text())
    assert meta["kind"] == "plaid" and meta["plaid"]["nbits"] == 2
    result = cli("search", CFG, *paths, *tiny, "--index", f"{run}/indexes/trained", "--output", f"{run}/ranking.tsv")
    assert result.exit_code == 0, result.output
    result = cli("evaluate", "--run", f"{run}/ranking.tsv", "--qrels", f"{beir}/qrels/train.tsv", "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output.strip().splitlines()[-1])
    assert metrics["nDCG@10"] > 0.3  # 6 queries over ~25 abstracts: far above chance
