"""Truncated ids from a prefix of long texts (embedctl.models.text_prefix): the same ids as tokenizing the whole
text, with the bundled tokenizer and with BPE (byte-level), Unigram (Metaspace) and WordPiece tokenizers trained
here; tokenizers outside the safe cases always tokenize whole texts."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from embedctl.config.sections.model import ModelConfig
from embedctl.models import text_prefix
from embedctl.models.text_prefix import cut_before_space, prefix_safe, truncated_ids
from embedctl.models.tokenization import TextTokenizer

ODD = [
    "word  double  spaces  " * 50,
    "tabs\tand\nnewlines\r\n between words " * 60,
    "naïve café résumé ΣΑΣ ΟΔΟΣ Σ " * 40,  # accents, Greek final sigma before a space
    "中文字符没有空格" * 120,  # no space at all: tokenized whole
    "x" * 3000,
    "   leading spaces" + " a" * 600,
    "e\u0301 combining accent after e " * 100,
    "1234567890 " * 100,
    "don't won't it's they're " * 80,  # byte-level BPE's contractions
    "emoji 😀 👍🏽 rocket🚀launch " * 60,
    "\u00a0nbsp\u00a0between\u00a0words and spaces " * 60,
    "ǅ ﬁ ligature ½ ㎏ " * 60,  # NFKC expands these
    "supercalifragilisticexpialidocious" * 3 + " " + "antidisestablishmentarianism " * 40,
    "",
    "short text",
    " ",
]


def _scifact_texts(scifact, count=600):
    texts = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts.append((doc.get("title") or "") + " " + doc["text"])
            if len(texts) == count:
                break
    return texts


def _truncating(tok: Tokenizer, budget: int) -> Tokenizer:
    backend = Tokenizer.from_str(tok.to_str())
    backend.no_padding()
    backend.enable_truncation(max_length=budget, strategy="longest_first", direction="right")
    return backend


def _same_ids(tok: Tokenizer, texts: list[str], budgets=(3, 16, 64, 177)) -> None:
    assert prefix_safe(tok.to_str())
    for budget in budgets:
        backend = _truncating(tok, budget)
        whole = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
        assert truncated_ids(backend, texts, budget, safe=True) == whole, budget
        assert truncated_ids(backend, texts[:1], budget, safe=True) == whole[:1]


@pytest.fixture(scope="module")
def corpus(scifact) -> list[str]:
    return _scifact_texts(scifact)


def test_bundled_tokenizer_same_ids_on_scifact_and_odd_texts(corpus):
    tok = TextTokenizer(ModelConfig(kind="colbert", doc_max_length=180))
    backend_json = tok._spec["backend"]
    assert prefix_safe(backend_json)
    _same_ids(Tokenizer.from_str(backend_json), corpus + ODD)
    # through TextTokenizer: the ids of the whole texts, specials and marker around them
    whole = truncated_ids(tok._backend("document"), corpus + ODD, tok.text_budget("document"), safe=False)
    head, tail = tok.prefix_ids + tok.marker_ids["document"], tok.suffix_ids
    assert tok.encode_documents(corpus + ODD) == [head + row + tail for row in whole]


@pytest.mark.parametrize("kind", ["bpe-bytelevel", "unigram-metaspace", "wordpiece-whitespace"])
def test_trained_tokenizers_same_ids(kind, corpus):
    if kind == "bpe-bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "unigram-metaspace":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=600, unk_token="<unk>", special_tokens=["<unk>"])
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits()])
        trainer = trainers.WordPieceTrainer(vocab_size=700, special_tokens=["[UNK]"])
    tok.train_from_iterator(corpus[:300], trainer=trainer)
    _same_ids(tok, corpus[300:] + ODD)


def test_a_prefix_with_too_few_ids_reads_the_whole_text(corpus):
    """Words of many characters an id (over 100 characters: one [UNK]) leave the prefix short of the budget: the
    whole text is tokenized again for those, and only those."""
    backend = _truncating(Tokenizer.from_str(TextTokenizer(ModelConfig(kind="colbert"))._spec["backend"]), 40)
    calls = []
    real = backend.encode_batch

    class Spy:
        def encode_batch(self, texts, add_special_tokens):
            calls.append(len(texts))
            return real(texts, add_special_tokens=add_special_tokens)

        def encode(self, text, add_special_tokens):
            calls.append(1)
            return backend.encode(text, add_special_tokens=add_special_tokens)

    texts = [("z" * 120 + " ") * 40, "the cell grows " * 200, "short"]
    whole = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    assert truncated_ids(Spy(), texts, 40, safe=True) == whole
    assert calls == [3, 1]  # one batch of prefixes, then the one text whose prefix held < 40 ids


def test_unsafe_tokenizers_tokenize_whole_texts():
    def spec(normalizer=None, pre=None, added=()):
        return json.dumps({"normalizer": normalizer, "pre_tokenizer": pre,
                           "added_tokens": [{"content": a} for a in added]})

    bert = {"type": "BertPreTokenizer"}
    assert prefix_safe(spec(pre=bert))
    assert prefix_safe(spec({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}, bert))
    assert prefix_safe(spec(pre={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                                          {"type": "Digits"}]}))
    assert not prefix_safe(spec(pre=None))  # no split: a model sees the whole text at once
    assert not prefix_safe(spec({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}, bert))
    assert not prefix_safe(spec(pre={"type": "Split", "pattern": {"Regex": "\\S+\\s\\S+"}}))
    assert not prefix_safe(spec(pre={"type": "ByteLevel", "use_regex": False}))
    assert not prefix_safe(spec(pre={"type": "Metaspace", "split": False}))
    assert not prefix_safe(spec(pre={"type": "Sequence", "pretokenizers": [{"type": "Digits"}]}))
    assert not prefix_safe(spec(pre={"type": "Sequence", "pretokenizers": [bert, {"type": "Split"}]}))
    assert not prefix_safe(spec(pre=bert, added=["<new line>"]))


def test_cut_before_space():
    assert cut_before_space("one two  three four", 12) == "one two"
    assert cut_before_space("short", 12) is None
    assert cut_before_space("x" * 50, 12) is None  # no space: whole
    assert cut_before_space("   " + "y" * 50, 12) is None  # only leading spaces: whole
    assert text_prefix.CUT_CHARS_PER_ID >= 4


def test_short_texts_never_parse_the_tokenizer_json():
    """A query (or any text too short to cut) is tokenized whole without asking prefix_safe, which parses the
    tokenizer's JSON (~9 ms for the bundled one, on a search's first query otherwise); a long text asks once."""
    tok = TextTokenizer(ModelConfig(kind="colbert"))
    tok.encode_queries(["what causes scurvy?"])
    tok.encode_documents(["a short document"])
    assert tok._prefix_safe is None
    tok.encode_documents(["word " * 2000])
    assert tok._prefix_safe is True
