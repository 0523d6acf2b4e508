from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from embedctl.config.fields import at_least, between, choice, positive


@dataclass
class DataConfig:
    """Training data: the pre-batched folder that `embedctl prebatch` wrote."""

    path: Optional[str] = None
    """Pre-batched training data (a folder or fsspec URL holding batch_%08d/ folders)."""
    split_factor: int = positive(1)
    """Split every stored batch into this many training steps, at query-group boundaries."""
    prefetch: int = at_least(0, 2)
    """Batches read ahead on a background thread."""
    shuffle: bool = True
    """Visit stored batches in a seeded random order per epoch (train.seed)."""


@dataclass
class PretokenizeConfig:
    """`embedctl pretokenize`: raw text -> sharded, resumable, deterministic token cache."""

    input: Optional[str] = None
    """Text source: a BEIR folder, a .tsv, .jsonl or .parquet file (optionally .gz/.zst), local or fsspec URL."""
    output: Optional[str] = None
    """Token cache folder to write (local or fsspec URL)."""
    format: str = choice("auto", "auto", "beir", "tsv", "jsonl", "parquet")
    """Input format; `auto` decides from the path."""
    side: str = choice("auto", "auto", "documents", "queries")
    """For a single file: tokenize as `documents` or `queries` (a BEIR folder always does both); `auto` means documents."""
    use_title: bool = True
    """Join the title before the text when the input has one."""
    title_join: str = " "
    """Separator between title and text."""
    rows_per_chunk: int = positive(8192)
    """Rows per parquet chunk of the cache (the unit of resume and of parallel work)."""
    workers: int = positive(1)
    """Tokenizer processes; output is byte-identical whatever this is."""
    num_shards: Optional[int] = positive(None)
    """Split the work across this many machines (default: WORLD_SIZE / SLURM_NTASKS when set, else 1)."""
    shard_index: Optional[int] = at_least(0, None)
    """This machine's shard (default: RANK / SLURM_PROCID when set, else 0)."""
    on_error: str = choice("fail", "fail", "skip")
    """On a bad row: `fail` (stop with file and line) or `skip` (skip it and write a report)."""
    overwrite: bool = False
    """Delete an existing cache that does not match this request instead of failing."""


@dataclass
class PrebatchConfig:
    """`embedctl prebatch`: token cache + relevance labels -> the Arctic Embed pre-batched format."""

    input: Optional[str] = None
    """Token cache folder written by `embedctl pretokenize` (holding queries/ and documents/)."""
    qrels: Optional[str] = None
    """Relevance labels: TREC qrels, BEIR qrels TSV, a query-document pair table, or triples."""
    relations_format: str = choice("auto", "auto", "qrels", "pairs", "triples")
    """How to read `qrels`; `auto` decides from the file's columns."""
    output: Optional[str] = None
    """Folder to write batch_%08d/ folders and metadata.json into."""
    queries_per_batch: int = positive(32)
    """Queries in one stored batch."""
    negatives_per_query: int = at_least(0, 0)
    """Hard negatives mined per query with `mine_model` (0 disables mining)."""
    mine_model: Optional[str] = None
    """Model used to mine hard negatives (default: model.name_or_path). Its kind comes from the model itself, not from model.kind: `minilm` or any plain/sentence-transformers model mines as a bi-encoder (exact dense search), an embedctl ColBERT checkpoint or a Stanford/PyLate folder by exact MaxSim."""
    mine_margin: float = between(0, 1, 0.95, low_open=True)
    """Keep a mined negative only if its score < mine_margin x the query's lowest positive score."""
    mine_depth: int = positive(100)
    """How many top-ranked documents per query to consider when mining."""
    false_negatives: str = choice("group", "group", "mark", "ignore")
    """Queries sharing a positive: `group` keeps them in different batches, `mark` stores the pair as positive, `ignore` does nothing."""
    seed: int = at_least(0, 0)
    """Seed for batch composition."""
    on_error: str = choice("fail", "fail", "skip")
    """Labels naming ids missing from the token cache, or malformed label lines: `fail` (file and line) or `skip` (listed in report.json)."""
    mine_batch_size: int = positive(32)
    """Texts per forward pass while encoding for hard-negative mining (and for the teacher)."""
    mine_chunk_docs: int = positive(2048)
    """Documents per mining corpus chunk: the unit a rank claims and a rerun resumes from (torchrun / srun), encoded once and scored against every query. Never depends on the number of ranks."""
    mine_query_chunk: int = positive(2048)
    """Queries per mining query chunk: encoded once (by whichever rank claims it) and scored against a corpus chunk as one block, so mining holds at most mine_query_chunk x mine_chunk_docs scores at a time. Never depends on the number of ranks."""
    teacher: Optional[str] = None
    """Teacher for knowledge distillation (`train.loss=distill`): a model that scores every (query, document) pair of each batch, stored as the TEACHER_SCORE column of relations.parquet. Any model embedctl loads; its kind comes from the model itself (`minilm` or any plain/sentence-transformers model: bi-encoder; an embedctl ColBERT checkpoint, a Stanford or PyLate folder: ColBERT). null: no teacher scores."""
    threads: Optional[int] = positive(None)
    """CPU threads for torch while mining hard negatives and scoring with the teacher; null leaves torch's default (one per core). Does not change the batches."""
    overwrite: bool = False
    """Replace an existing output folder."""
