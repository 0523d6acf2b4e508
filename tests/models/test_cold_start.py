"""What a search loads to encode its query: no more than it needs (bench/bench_cold_start.py times it).

A search encodes its query with the native BERT, a tokenizer read from the tokenizer cache and a config
built without OmegaConf; these tests pin that down in a fresh process, and check that the shortcuts give
what the long ways give (the tokenizer's lazily built parts, the uninitialised native BERT parameters).
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys

import numpy as np
import pytest

from embedctl.config.sections.model import ModelConfig
from embedctl.models.tokenization import TextTokenizer
from embedctl.models.tokenizer_cache import load_hf_tokenizer

# encode a query as `embedctl search` does (config from flags only, the index's model config, colbert)
_QUERY_PROCESS = """
import json, sys
from embedctl.config import load_config
from embedctl.models.encoder import load_encoder
loaded = load_config(None, [], {"search.index": "unused", "model.kind": "colbert"})
encoder = load_encoder(loaded.cfg.model)
encoder.tokenizer.punctuation_ids()
q = encoder.encode_queries(["what causes scurvy"])
heavy = ("transformers", "omegaconf", "fsspec", "faiss", "pyarrow", "sklearn", "scipy", "pandas")
print(json.dumps({"loaded": [m for m in heavy if m in sys.modules], "shape": list(q.shape),
                  "tokenizers": sorted(str(s) for s in encoder.tokenizer._backends)}))
"""


def _run(code: str, cache: str) -> dict:
    env = {**os.environ, "EMBEDCTL_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_query_encoding_imports_only_what_it_needs(tmp_path):
    """With the tokenizer cache filled, encoding a query imports none of transformers, OmegaConf, fsspec,
    faiss, pyarrow, scikit-learn, SciPy or pandas, and builds the query side's tokenizer only."""
    _run(_QUERY_PROCESS, str(tmp_path))  # the first process fills the tokenizer cache (with transformers)
    again = _run(_QUERY_PROCESS, str(tmp_path))
    assert again["loaded"] == []
    assert again["shape"] == [1, 32, 128]
    assert again["tokenizers"] == ["query"]


def _reference_punctuation(backend, unk_id: int) -> list[int]:
    """TextTokenizer.punctuation_ids as it was: on a tokenizer that never truncates."""
    ids: set[int] = set()
    for symbol in string.punctuation:
        token_id = backend.token_to_id(symbol)
        if token_id is not None and token_id != unk_id:
            ids.add(int(token_id))
        encoded = backend.encode(symbol, add_special_tokens=False).ids
        if len(encoded) == 1 and encoded[0] != unk_id:
            ids.add(int(encoded[0]))
    return sorted(ids)


@pytest.mark.parametrize("kind,query_max_length", [("colbert", 32), ("colbert", 4), ("biencoder", 32)])
def test_lazy_tokenizers_give_the_same_ids(kind, query_max_length):
    """Markers, punctuation and ids from the lazily built tokenizers equal those of transformers' tokenizer
    (a query budget of one id, query_max_length=4 with [CLS] [Q] [SEP], takes the never-truncating one)."""
    tok = TextTokenizer(ModelConfig(kind=kind, query_max_length=query_max_length))
    hf = load_hf_tokenizer(tok.tokenizer_dir)
    plain = hf.backend_tokenizer
    plain.no_truncation()
    plain.no_padding()
    assert tok.punctuation_ids() == _reference_punctuation(plain, hf.unk_token_id)
    if kind == "colbert":
        assert tok.marker_ids == {"query": [hf.convert_tokens_to_ids("[unused0]")],
                                  "document": [hf.convert_tokens_to_ids("[unused1]")]}
    texts = ["what causes scurvy?", "Vitamin C deficiency, in sailors... " * 40]
    for side in ("query", "document"):
        budget = tok.max_length(side) - len(tok.prefix_ids) - len(tok.marker_ids[side]) - len(tok.suffix_ids)
        want = [tok.prefix_ids + tok.marker_ids[side] + hf(t, add_special_tokens=False)["input_ids"][:budget]
                + tok.suffix_ids for t in texts]
        assert tok.encode(texts, side) == want
    assert tok.decode(tok.encode_queries(["scurvy"])[0]).startswith("[CLS]")


def test_native_bert_parameters_all_come_from_the_weights():
    """The native BERT is built with uninitialised parameters: every one is then loaded from the weights file."""
    from safetensors.torch import load_file

    from embedctl.models.layout import transformer_dir
    from embedctl.models.native_bert import try_native_bert

    folder = transformer_dir(TextTokenizer(ModelConfig()).model_path)
    bert = try_native_bert(folder)
    assert bert is not None
    state = load_file(str(folder / "model.safetensors"))
    own = bert.state_dict()
    assert set(own) <= set(state)
    for name, value in own.items():
        np.testing.assert_array_equal(value.numpy(), state[name].numpy(), err_msg=name)
