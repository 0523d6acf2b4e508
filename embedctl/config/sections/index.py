from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from embedctl.config.fields import at_least, between, choice, default_list, one_of, positive


@dataclass
class IndexConfig:
    """`embedctl index`: PLAID (ColBERTv2) or dense faiss indexes."""

    collection: Optional[str] = None
    """Collection: ColBERT TSV, BEIR corpus.jsonl, parquet, or a token cache folder; local or fsspec URL."""
    root: str = "indexes"
    """Folder holding indexes; `embedctl search` looks here."""
    name: Optional[str] = None
    """Index name (a folder under index.root); default: the collection's file name without extension."""
    kind: str = choice("auto", "auto", "plaid", "dense", "lexical")
    """`plaid` or `dense`; `auto` picks plaid for a ColBERT model, dense for a bi-encoder; `lexical` builds the BM25 side alone (no model, no vectors: `search.mode=lexical` only)."""
    lexical: bool = True
    """Keep a BM25 side beside the vectors (embedctl/index/lexical.py; bm25s) for an index built from a text collection: built, added to, deleted from and compacted in the same version as the vectors, so `search.mode=lexical|hybrid` needs no second build; false leaves it out."""
    nbits: int = one_of(2, 1, 2, 4)
    """PLAID residual bits per dimension: 1, 2 or 4."""
    kmeans_niters: int = positive(4)
    """PLAID k-means iterations."""
    kmeans_points_per_centroid: int = positive(32)
    """PLAID k-means trains on at most this many sample vectors per centroid (faiss's own default is 256: a closer fit of the centroids, k-means time grows linearly with it)."""
    backend: str = choice("auto", "auto", "native", "reference", "torch")
    """PLAID backend doing the arithmetic (embedctl/index/plaid/backends.py): `native` (the C kernels built at install), `reference` (plain numpy/torch, exact, slower), `torch` (a GPU); `auto` picks torch on a GPU, else native where the kernels were built, else reference. Recorded in the index; a resume refuses another backend."""
    assign_precision: str = choice("auto", "auto", "fp32", "bf16", "int16", "int8")
    """PLAID nearest-centroid arithmetic of the native backend (k-means and compression): `int16` (AVX2 CPUs) multiplies 16-bit roundings and rescores near-ties exactly, ~2.5x faster than fp32 on AVX2 (with AVX-512 VNNI the same arithmetic runs 2.1x faster again); `int8` (CPUs with AVX-512 VNNI) multiplies 8-bit roundings and rescores the few centroids within their wider bound exactly, 1.55x int16 there; `bf16` (CPUs with AMX) runs the scores on the AMX tiles and rescores near-ties exactly; all give the exact centroids. `fp32` scores in float64 without a reduced-precision kernel (exact, slowest). `auto` picks bf16 with AMX, else int8 with AVX-512 VNNI, else int16 with AVX2, else fp32 (a resumed build keeps the one it started with)."""
    num_partitions: Optional[int] = positive(None)
    """PLAID centroids; null uses 2^floor(log2(16 sqrt(num_embeddings)))."""
    chunk_size: Optional[int] = positive(None)
    """Documents per PLAID chunk; null uses min(25000, 1 + N)."""
    batch_size: int = positive(32)
    """Documents per encoding batch."""
    use_title: bool = True
    """Encode `title + " " + text` when a document has a title (BEIR style); false encodes the text alone."""
    dense_type: str = choice("flat", "flat", "ivf", "hnsw")
    """Dense faiss index: exact inner product (`flat`), `ivf` or `hnsw`."""
    ivf_nlist: Optional[int] = positive(None)
    """IVF lists; null uses 4 sqrt(N)."""
    hnsw_m: int = positive(32)
    """HNSW neighbours per node."""
    hnsw_ef_construction: int = positive(200)
    """HNSW build-time search depth."""
    seed: int = at_least(0, 0)
    """Seed for sampling and k-means."""
    overwrite: bool = False
    """Replace an existing index of the same name."""
    drift_threshold: float = positive(1.5)
    """PLAID `add`: added vectors whose mean |residual| exceeds this many times the build's held-out mean count as drifted; when the batch's ratio exceeds it, `index.drift_action` applies."""
    drift_action: str = choice("warn", "warn", "expand", "ignore")
    """PLAID `add` when the new documents drift from the centroids: `warn` (say a rebuild is due), `expand` (add centroids for the outlying vectors, next-plaid style), `ignore`."""
    lock_wait_s: float = at_least(0, 0.0)
    """Seconds a writer (build, add, delete, compact) waits for another writer of the same index to finish before it is refused; 0 refuses at once."""
    recluster_below_docs: int = at_least(0, 1000)
    """PLAID `add` to an index holding fewer live documents than this re-clusters: new centroids and buckets trained, as a fresh build would, on every live document and the new ones, all written as one new segment (re-encoded from their stored texts: the result equals a fresh build of those documents; the add costs re-encoding the index, at most this many documents more). 0 never (next-plaid rebuilds below 1000 too)."""
    recluster_add_ratio: Optional[float] = positive(1.0)
    """PLAID `add` re-clusters (as index.recluster_below_docs does) when the documents added since the centroids were trained, this add included, reach this many times the documents they were trained on: 1.0 re-clusters each time the index doubles, so over any sequence of adds the re-encoding stays within about twice the documents' own encoding; null never."""
    merge_factor: int = at_least(0, 10)
    """`add`: after each add the newest segments are merged into one, nothing encoded again, as Lucene's log merge policy does (embedctl/index/merge.py): a segment of n live documents is on level floor(log_F n) for F = merge_factor, and when F or more of the newest segments are on level L with only smaller ones after them (the lowest such L), they and those become one. An index taking many small adds (a server's writes) then keeps at most F - 1 segments per level, so each commit and version open stays cheap. 0 or 1: never merge (`embedctl index compact` merges every segment)."""
    threads: Optional[int] = positive(None)
    """CPU threads for torch (encoding, and the PLAID build's k-means and compression) and faiss (dense build) while building or changing an index; null leaves the library defaults (one per core). Does not change the index, but for the bf16 encoder on a CPU with AMX tiles, whose oneDNN products split their sums by thread count: there the count is recorded with the backend, and a resume or a rank with another is refused, naming this key."""
    passages: bool = False
    """Split each document into passages of index.passage_tokens tokens (the model's tokenizer) overlapping by index.passage_overlap, and index the passages (vectors and BM25 side); search still returns documents, each scored by its best passage, whose text is the hit's (embedctl/index/passages.py, docs/getting-started.md#long-documents-passages). False: a document longer than model.doc_max_length is truncated (its tail is never searched)."""
    passage_tokens: Optional[int] = positive(None)
    """index.passages: text tokens per passage (the title, when index.use_title, counts in them); null uses all the model's document length leaves for text (model.doc_max_length less the special and marker tokens)."""
    passage_overlap: int = at_least(0, 32)
    """index.passages: tokens each passage repeats of the one before it (so a sentence cut at a passage end is whole in the next); less than index.passage_tokens."""

    def problems(self) -> list[tuple[str, str]]:
        """index.name is one folder name: the index stays under index.root (a `..` or `/` in it would
        build, and with --overwrite remove, a folder elsewhere)."""
        from embedctl.util.fs import folder_name_problem

        out = []
        if self.passage_tokens is not None and self.passage_overlap >= self.passage_tokens:
            out.append(("passage_overlap", f"index.passage_overlap={self.passage_overlap} must be less than "
                        f"index.passage_tokens={self.passage_tokens} (each passage must move on by at least one token); "
                        f"fix: set index.passage_overlap={max(0, self.passage_tokens // 4)} or raise index.passage_tokens"))
        why = folder_name_problem(self.name) if self.name is not None else None
        if why is None:
            return out
        return out + [("name", f"{why}; fix: pass --name NAME (a plain folder name) and --root DIR for where the index "
                         "goes (e.g. --root indexes --name scifact)")]

    # what shapes an index (recorded as the build's request: a resume continues only the same request);
    # every other key is where the index goes or an argument of an operation, so adding one never
    # invalidates a resume (tests/index/test_request_keys.py checks each key is in one of the two lists)
    SHAPING = ("collection", "kind", "nbits", "kmeans_niters", "kmeans_points_per_centroid", "num_partitions",
               "chunk_size", "batch_size", "use_title", "dense_type", "ivf_nlist", "hnsw_m", "hnsw_ef_construction",
               "seed", "lexical", "passages", "passage_tokens", "passage_overlap")
    NOT_SHAPING = ("root", "name", "overwrite", "backend", "assign_precision", "drift_threshold", "drift_action",
                   "lock_wait_s", "recluster_below_docs", "recluster_add_ratio", "merge_factor", "threads")


@dataclass
class SearchConfig:
    """`embedctl search`: top-k retrieval from an index."""

    index: Optional[str] = None
    """Index folder; default: the newest index under index.root (or index.root/index.name when set)."""
    query: Optional[str] = None
    """One query to search (printed as a table)."""
    queries: Optional[str] = None
    """A queries file (TSV `qid \\t text` or JSONL) to search in batch."""
    qrels: Optional[str] = None
    """Qrels to evaluate the batch ranking against right away."""
    output: Optional[str] = None
    """Where to write the batch ranking."""
    format: str = choice("colbert", "colbert", "trec")
    """Ranking format: `colbert` (qid \\t pid \\t rank \\t score) or `trec` (TREC run file)."""
    k: int = positive(10)
    """Hits per query of a queries file (the ranking's depth); `-k N` on the command line also sets the hits shown for one query."""
    query_k: int = positive(10)
    """Hits shown for one query (`embedctl search "text"`), whatever search.k a config sets for its batch runs; `-k N` (or search.k=N) on the command line wins."""
    candidates: str = choice("auto", "auto", "warp", "plaid")
    """PLAID candidate generation: `warp` (each query token scores the vectors of its own best cells straight from their packed bytes, per-document estimates, the best max(2k, 40) scored exactly: embedctl/search/warp.py), `plaid` (Stanford ColBERT's centroid stages, tuned by search.ncells / centroid_score_threshold / ndocs), or `auto`: warp unless search.centroid_score_threshold or search.ndocs is given (keys only PLAID's stages read). On the first 2,000 SciFact documents, one thread: k=10 in 1.2-1.6 ms against 2.6-4.2 for plaid's adaptive budget, nDCG@10 within 0.05% of exhaustive on minilm and the trained ColBERT (docs/evaluation.md). It reads a cell-ordered copy of the vectors held in memory (about the residual bytes again), which a session set to plaid never builds; warp with search.ndocs or search.centroid_score_threshold is refused. A filter takes its own path either way (docs/filters.md)."""
    ncells: Optional[int] = positive(None)
    """PLAID: nearest centroids probed per query token (both candidate paths); null (adaptive): with warp candidates each token probes its best cells until they hold 32 / 48 / 64 (k <= 10 / <= 100 / more) cells' worth of vectors (that many times the index's mean cell size), 8 to 96 cells; with plaid candidates (embedctl/search/plaid_budget.py) until they hold ndocs_table(k) / 4 documents (WARP-style cumulative cluster sizes), at least the old table's 1 / 2 / 4 (k <= 10 / <= 100 / more), at most 64. A filter that passes many documents (adaptive keys) ranks every allowed document by centroid interaction instead of probing cells (docs/filters.md); with search.ncells given, a filter multiplies it by 1 / selectivity (at most 8x)."""
    centroid_score_threshold: Optional[float] = None
    """PLAID: stage-3 centroid pruning threshold; null (adaptive) takes the old table's 0.5 / 0.45 / 0.4 by k, lowered to the weakest query token's best centroid score, so that no query token drops out of stage 3 whatever the model's score scale."""
    ndocs: Optional[int] = positive(None)
    """PLAID: candidates kept after pruned centroid interaction (ndocs // 4 are scored exactly); null (adaptive) takes the old table's 256 / 1024 / max(4k, 4096) by k, raised to half the live documents up to 4x the table's figure (a small index's exact stage sees a share of it). The old table: give its three values (e.g. search.ncells=1 search.centroid_score_threshold=0.5 search.ndocs=256 at k=10)."""
    filter: Optional[str] = None
    """Only documents whose fields pass this filter, e.g. `year >= 2015 and journal in ("Nature", "Cell")` (docs/filters.md); k hits whenever k documents pass."""
    mode: str = choice("neural", "neural", "lexical", "hybrid")
    """`neural` (the index's vectors), `lexical` (its BM25 side), `hybrid` (both, fused by `search.fusion`)."""
    fusion: str = choice("score", "rrf", "score")
    """Hybrid fusion: `rrf` (reciprocal rank fusion: sum of weight / (search.rrf_k + rank)) or `score` (each side's scores min-max normalised over its top search.fusion_depth, then weighted and summed)."""
    hybrid_weight: float = between(0.0, 1.0, 0.6)
    """Hybrid: the neural side's weight (the lexical side gets 1 - it). `score` with 0.6 is the best single setting over zero-shot dense, fine-tuned dense and a trained ColBERT on held-out SciFact train queries (docs/filters.md); `rrf` with 0.5 fell below the fine-tuned model alone."""
    rrf_k: int = positive(60)
    """Hybrid `rrf`: the rank constant (60 in the RRF paper)."""
    fusion_depth: int = positive(100)
    """Hybrid: hits taken from each side before fusing (at least k)."""
    exhaustive: bool = False
    """PLAID: skip candidate generation and score every document with exact MaxSim (quality reference)."""
    backend: str = choice("auto", "auto", "native", "reference")
    """PLAID search backend: `native` (C kernels), `reference` (plain numpy/torch, same results, slower); `auto` picks native where the kernels were built. Reported with the index's own backend in `--json`."""
    precision: str = choice("auto", "auto", "fp32", "fp16", "bf16")
    """PLAID final MaxSim (native backend; exhaustive search too): `fp32` sums each similarity's residual part from the packed bytes through a per-query float32 table; `fp16` through that table rounded to float16 (half its bytes, the same float32 sums: a token similarity moves by ~1e-5, at most 2^-11 of the magnitudes it adds; on SciFact the same nDCG@10, the same top 10 in the same order for 99.7-100% of the queries, a search in 0.70-0.91x of fp32's time on one AVX-512 core); `bf16` decodes residuals to bfloat16 for one bfloat16 GEMM (a token similarity moves by at most ~1e-3). `auto`: fp16 where its table runs on AVX-512 (CPUs with AMX tiles included: there bf16 measured 1.4-1.7x slower than fp32 and fp16 for a whole search), fp32 elsewhere. On CPUs with AMX tiles, fp16 and bf16 also compute the query's centroid scores there (three bfloat16 products with float32 sums, two where the centroids are bfloat16 values as k-means now stores them: at most 2.5e-6 from float64 over 300 SciFact queries, against ~2e-7 for the fp32 kernel, which fp32 keeps: the same bits on every CPU), and fp16 the final MaxSim's residual parts in place of its float16 table (~1e-6 a token similarity); on a 2-core AMX host, all 5,183 SciFact documents, a search at k=10 in 0.70-0.77x the time, at k=100 0.69-0.79x (several runs, bench/plaid_search_floor.py)."""
    nprobe: Optional[int] = positive(None)
    """Dense IVF: lists probed per query."""
    hnsw_ef_search: Optional[int] = positive(None)
    """Dense HNSW: search depth."""
    batch_size: int = positive(32)
    """Queries per encoding batch (queries are batched longest first). 32: on 2 CPU cores, 100 SciFact
    queries encode at 4.8-6.7 ms each in batches of 32 against 5.8-8.7 ms in batches of 64 (minilm)."""
    threads: Optional[int] = positive(None)
    """CPU threads for torch and faiss, and the threads that search the queries of one batch on a PLAID index
    (each query on one thread); null leaves the library defaults and searches a PLAID batch on every core."""
    query_threads: Optional[int] = positive(None)
    """PLAID, native backend: threads one query's retrieval splits across when queries are searched one at a time (one query, the Python API, a server's requests): its centroid scores, cell selection (one thread where it reads the centroid kernel's block maxima: ~0.09 ms on an AMX host), WARP scan and exact MaxSim (OpenMP in the C kernels; the same results whatever the count). null: search.threads when set, else one per core this process may use (torch's default for the encoder too); a batch always runs one thread per query, and a server's workers take search.threads each (one per core by default: one thread per query). 1 where the caller already runs queries side by side. Quiet 2-core AVX-512 host, all 5,183 SciFact documents (minilm, queries pre-encoded, bench/plaid_search_floor.py --threads 1,2): k=10 in 1.34 ms p50 on 2 threads against 2.11 on 1 (three rounds: 1.30-1.65 against 2.06-2.17), k=100 in 2.63 against 4.56."""
    snippet_chars: int = at_least(0, 160)
    """Characters of document text shown per hit in the single-query table."""
    metrics: list[str] = default_list()
    """Extra trec_eval measures to report, e.g. [map, P_5]."""

    def problems(self) -> list[tuple[str, str]]:
        """search.centroid_score_threshold and search.ndocs tune PLAID's candidate stages only: with
        search.candidates=warp they would be silently ignored."""
        given = [k for k in ("centroid_score_threshold", "ndocs") if getattr(self, k) is not None]
        if self.candidates != "warp" or not given:
            return []
        return [(given[0], f"search.{' and search.'.join(given)} only tune{'s' if len(given) == 1 else ''} PLAID's "
                           "candidate stages, which "
                           "search.candidates=warp skips; fix: drop them, or set search.candidates=plaid (or auto, "
                           "which takes PLAID's stages when they are given)")]
