"""The bad-input matrix: every bad or hostile input, one row each: the arguments, the exit code and a
fragment of the message (or warning). Outputs that could be mixed or damaged, messages and validation
(the first part), and answers that look right and are not (the second part).

Rows run through the typer runner in this process (``CASES``) or as real subprocesses (``SUBPROCESS``,
``S3_CASES``: a moto server on 127.0.0.1, stopped for the endpoint-down row). Each needs only the small
fixtures below: a token cache of six documents and two queries, a qrels file, a ranking, a folder.
Never a traceback; a refused run writes nothing where it was told to write.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.scifact_slice import write_slice

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ws(module_tmp) -> dict[str, Path]:
    """The workspace every row's arguments refer to as {name}."""
    from embedctl.config import load_config
    from embedctl.data.pretokenize import run_pretokenize

    root = module_tmp("bad")
    docs, queries = root / "docs.tsv", root / "queries.tsv"
    docs.write_text("".join(f"d{i}\tdocument number {i} about topic {i % 3}\n" for i in range(6)))
    queries.write_text("q1\ttopic one\nq2\ttopic two\n")
    cache = root / "cache"
    for side, src in (("documents", docs), ("queries", queries)):
        run_pretokenize(load_config(None, [f"pretokenize.input={src}", f"pretokenize.output={cache}",
                                           f"pretokenize.side={side}", "pretokenize.rows_per_chunk=2"]))
    qrels = root / "qrels.tsv"
    qrels.write_text("q1\t0\td1\t1\nq2\t0\td2\t1\n")
    ranking = root / "ranking.tsv"
    ranking.write_text("q1\td1\t1\t9.5\nq2\td2\t1\t8.0\n")
    (root / "folder").mkdir()
    (root / "afile.txt").write_text("not a folder\n")
    (root / "tab.yaml").write_text("train:\n\tmax_steps: 5\n")
    (root / "range.yaml").write_text("train:\n  max_steps: 0\nindex:\n  nbits: 3\n")
    no_chunk = root / "no_chunk"  # a documents chunk deleted
    shutil.copytree(cache, no_chunk)
    (no_chunk / "documents" / "chunks" / "chunk-000001.parquet").unlink()
    no_ids = root / "no_ids"  # an ids chunk deleted
    shutil.copytree(cache, no_ids)
    (no_ids / "documents" / "ids" / "chunk-000002.parquet").unlink()
    damaged = root / "damaged"  # same size, other bytes: only the sha256 tells
    shutil.copytree(cache, damaged)
    victim = damaged / "documents" / "chunks" / "chunk-000000.parquet"
    victim.write_bytes(os.urandom(victim.stat().st_size))
    return {"root": root, "docs": docs, "queries": queries, "cache": cache, "qrels": qrels, "ranking": ranking,
            "folder": root / "folder", "afile": root / "afile.txt", "tab": root / "tab.yaml",
            "range": root / "range.yaml", "no_chunk": no_chunk, "no_ids": no_ids, "damaged": damaged,
            "new": root / "new-output"}


# (id, args with {name} placeholders, exit code, message fragment)
CASES = [
    # section 3: ranges are field constraints checked at load time
    ("config-nbits-3", ["config", "show", "index.nbits=3"], 2, "`index.nbits` (set on the command line): expected one of 1, 2, 4, got 3"),
    ("config-k-0", ["config", "show", "search.k=0"], 2, "`search.k` (set on the command line): expected > 0, got 0"),
    ("config-max-steps-neg", ["config", "show", "train.max_steps=-5"], 2, "`train.max_steps` (set on the command line): expected > 0, got -5"),
    ("config-file-ranges", ["config", "validate", "{range}"], 2, "`index.nbits` (set in {range}): expected one of 1, 2, 4"),
    ("search-k-0", ["search", "a query", "search.k=0"], 2, "fix: set search.k to a value > 0"),
    ("train-max-steps", ["train", "train.max_steps=-5"], 2, "`train.max_steps`"),
    ("index-nbits-3", ["index", "--collection", "{docs}", "index.nbits=3"], 2, "`index.nbits`"),
    ("pretokenize-rows-0", ["pretokenize", "--input", "{docs}", "--output", "{new}", "pretokenize.rows_per_chunk=0"], 2,
     "`pretokenize.rows_per_chunk`"),
    ("interpolation", ["config", "show", "model.name_or_path=${foo.bar}"], 2,
     "`model.name_or_path` (set on the command line): cannot resolve ${foo.bar}: Interpolation key 'foo.bar' not found"),
    ("interpolation-env", ["config", "show", "model.name_or_path=${oc.env:EMBEDCTL_SURELY_UNSET}"], 2,
     "Environment variable 'EMBEDCTL_SURELY_UNSET' not found"),
    ("tab-yaml", ["config", "validate", "{tab}"], 2, "{tab}:2: a tab indents this line"),
    # section 3: raw library errors
    ("evaluate-run-folder", ["evaluate", "--run", "{folder}", "--qrels", "{qrels}"], 1, "{folder}: expected a file, found a folder"),
    ("evaluate-qrels-folder", ["evaluate", "--run", "{ranking}", "--qrels", "{folder}"], 1, "{folder}: expected a file, found a folder"),
    ("pretokenize-output-is-input", ["pretokenize", "--input", "{docs}", "--output", "{docs}"], 2,
     "--output {docs} is the input --input {docs}"),
    ("pretokenize-output-is-a-file", ["pretokenize", "--input", "{docs}", "--output", "{afile}"], 2,
     "--output {afile} is a file; it must be a folder"),
    ("search-output-folder", ["search", "--queries", "{queries}", "--output", "{folder}"], 2,
     "--output {folder} is a folder; it must name a file"),
    ("search-output-under-a-file", ["search", "--queries", "{queries}", "--output", "{afile}/run.tsv"], 2,
     "is a file, not a folder"),
    # section 1: outputs that could be mixed or damaged
    ("prebatch-output-is-cache", ["prebatch", "--input", "{cache}", "--qrels", "{qrels}", "--output", "{cache}", "--overwrite"], 2,
     "--output {cache} is the input --input {cache}"),
    ("prebatch-output-inside-cache", ["prebatch", "--input", "{cache}", "--qrels", "{qrels}", "--output", "{cache}/batches"], 2,
     "is inside the input --input {cache}"),
    ("prebatch-output-is-qrels", ["prebatch", "--input", "{cache}", "--qrels", "{qrels}", "--output", "{qrels}"], 2,
     "--output {qrels} is the input --qrels {qrels}"),
    ("prebatch-output-is-a-file", ["prebatch", "--input", "{cache}", "--qrels", "{qrels}", "--output", "{afile}"], 2,
     "--output {afile} is a file; it must be a folder"),
    ("inspect-missing-chunk", ["data", "inspect", "{no_chunk}"], 1, "{no_chunk}/documents/chunks/chunk-000001.parquet: missing"),
    ("inspect-missing-ids", ["data", "inspect", "{no_ids}"], 1, "{no_ids}/documents/ids/chunk-000002.parquet: missing"),
    ("prebatch-missing-ids", ["prebatch", "--input", "{no_ids}", "--qrels", "{qrels}", "--output", "{new}"], 1,
     "ids/chunk-000002.parquet: missing"),
    ("index-missing-chunk", ["index", "--collection", "{no_chunk}", "--root", "{root}/indexes"], 1,
     "chunks/chunk-000001.parquet: missing"),
    ("inspect-verify-damaged", ["data", "inspect", "--verify", "{damaged}"], 1,
     "{damaged}/documents/chunks/chunk-000000.parquet: content differs from the recorded sha256"),
    ("inspect-verify-ok", ["data", "inspect", "--verify", "{cache}"], 0, "verified: all 6 files match"),
    # already handled before issue 18 (kept here so they stay handled)
    ("pretokenize-no-input", ["pretokenize"], 2, "`pretokenize.input` is not set"),
    ("pretokenize-on-error", ["pretokenize", "--input", "{docs}", "--on-error", "ignore"], 2,
     "expected one of fail, skip"),
    ("pretokenize-missing-input", ["pretokenize", "--input", "{root}/nope.tsv", "--output", "{new}"], 1, "no such file"),
    ("unknown-key", ["config", "show", "train.max_step=5"], 2, "did you mean `train.max_steps`?"),
    ("evaluate-missing-run", ["evaluate", "--run", "{root}/nope.tsv", "--qrels", "{qrels}"], 1, "file not found"),
    ("search-output-is-queries", ["search", "--queries", "{queries}", "--output", "{queries}"], 2, "is the queries file"),
    ("inspect-not-a-cache", ["data", "inspect", "{folder}"], 1, "neither a token cache nor a pre-batched folder"),
]


def _fill(text: str, ws: dict[str, Path]) -> str:
    for name, path in ws.items():
        text = text.replace("{" + name + "}", str(path))
    return text


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_or_output(case, ws, cli, monkeypatch):
    _, args, code, fragment = case
    monkeypatch.chdir(ws["root"])
    monkeypatch.setenv("COLUMNS", "400")  # one line per message: fragments are matched whole
    res = cli(*[_fill(a, ws) for a in args])
    assert res.exit_code == code, res.output
    assert _fill(fragment, ws) in res.output.replace("\n  ", " ") or _fill(fragment, ws) in res.output, res.output
    assert "Traceback" not in res.output
    assert not ws["new"].exists()  # a refused run writes nothing


def run(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embedctl", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", **(env or {})}, timeout=300)


def test_second_writer_is_refused_naming_the_first(ws, tmp_path):
    """A live holder of the output's lock (here a sleeping process) makes a second pretokenize exit 1 naming it."""
    out = tmp_path / "tokens"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from embedctl.util.lock import WriterLock\n"
                               "with WriterLock(sys.argv[1], what='token cache'):\n print('held', flush=True); time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        res = run("pretokenize", "--input", str(ws["docs"]), "--output", str(out))
        assert res.returncode == 1, res.stderr
        assert f"another writer holds {tmp_path}/tokens.lock (pid {holder.pid} on" in res.stderr
        assert "Traceback" not in res.stderr and not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_files_honour_the_umask(ws, tmp_path):
    """Caches, batches and rankings are created as open() would (0644 under umask 022), not mkstemp's 0600."""
    out = tmp_path / "tokens"
    res = subprocess.run(["sh", "-c", f"umask 022 && exec {sys.executable} -m embedctl pretokenize --input {ws['docs']} "
                                      f"--output {out}"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert res.returncode == 0, res.stderr
    modes = {oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()}
    assert modes == {"0o644"}, modes
    from embedctl.eval.io import write_run

    old = os.umask(0o027)
    try:
        write_run(str(tmp_path / "run.tsv"), [("q1", [("d1", 1.0)])])
    finally:
        os.umask(old)
    assert oct((tmp_path / "run.tsv").stat().st_mode & 0o777) == "0o640"


def test_progress_lines_without_a_terminal(ws, tmp_path):
    """stderr is a pipe: plain progress lines, advancing per chunk / per batch, instead of a bar."""
    env = {"EMBEDCTL_PROGRESS_EVERY_S": "0"}
    tokens = tmp_path / "tokens"
    res = run("pretokenize", "--input", str(ws["docs"]), "--output", str(tokens), "pretokenize.rows_per_chunk=2", env=env)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("pretokenize documents: ")]
    assert [ln.split()[2] for ln in lines][:3] == ["2", "4", "6"], res.stderr
    shutil.copytree(ws["cache"] / "queries", tokens / "queries")
    res = run("prebatch", "--input", str(tokens), "--qrels", str(ws["qrels"]), "--output", str(tmp_path / "b"),
              "--queries-per-batch", "1", env=env)
    assert res.returncode == 0, res.stderr
    assert "prebatch: 1/2 batches" in res.stderr and "prebatch: 2/2 batches" in res.stderr


S3_ENV = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def stopped_endpoint():
    """The URL of a moto S3 server on 127.0.0.1 that ran and was stopped (nothing listens there now)."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    server.stop()
    return f"http://{host}:{port}"


S3_CASES = [  # (id, args, credentials?, message fragment); every row exits 1 naming the URL
    ("pretokenize-no-credentials", ["pretokenize", "--input", "s3://bucket/corpus.jsonl", "--output", "{new}"], False,
     "s3://bucket/corpus.jsonl: cannot read this URL: no credentials found (NoCredentialsError"),
    ("evaluate-no-credentials", ["evaluate", "--run", "{ranking}", "--qrels", "s3://bucket/qrels.tsv"], False,
     "s3://bucket/qrels.tsv: cannot read this URL: no credentials found"),
    ("inspect-endpoint-down", ["data", "inspect", "s3://bucket/tokens"], True,
     "s3://bucket/tokens: cannot read this URL: the endpoint cannot be reached"),
    ("pretokenize-endpoint-down", ["pretokenize", "--input", "s3://bucket/corpus.jsonl", "--output", "{new}"], True,
     "s3://bucket/corpus.jsonl: cannot read this URL: the endpoint cannot be reached"),
]


@pytest.mark.parametrize("case", S3_CASES, ids=[c[0] for c in S3_CASES])
def test_object_store_failures_name_the_url(case, ws, stopped_endpoint):
    _, args, credentials, fragment = case
    env = {**S3_ENV, "FSSPEC_S3_ENDPOINT_URL": stopped_endpoint, "AWS_MAX_ATTEMPTS": "1"}
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x")
    else:
        env.update(AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    res = run(*[_fill(a, ws) for a in args], env=env)
    assert res.returncode == 1, res.stderr
    assert fragment in res.stderr and "AWS_ACCESS_KEY_ID" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "unexpected error" not in res.stderr
    assert not ws["new"].exists()


# -- answers that look right and are not: one real dense index of a SciFact slice whose corpus holds an empty
# document, queried by real `python -m embedctl` subprocesses -------------------------------------------------
FAST = ["model.doc_max_length=64"]


def embedctl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", "embedctl", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def work(module_tmp, scifact):
    work = module_tmp("answers")
    paths = write_slice(scifact, work / "data", num_docs=60, num_queries=8)
    with open(paths["corpus"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"_id": "empty-doc", "title": "", "text": ""}) + "\n")
    queries = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    (work / "odd_queries.tsv").write_text(f"{queries[0]['_id']}\t{queries[0]['text']}\nq-empty\t\nq-punct\t?!...\n")
    qrels = [line.split("\t") for line in paths["qrels"].read_text().splitlines()[1:]]
    header = "query-id\tcorpus-id\tscore\n"
    (work / "other_qrels.tsv").write_text(header + "".join(f"{q}\tX{d}\t{s}\n" for q, d, s in qrels))
    (work / "partial_qrels.tsv").write_text(header + "".join(
        f"{q}\t{d if i == 0 else 'X' + d}\t{s}\n" for i, (q, d, s) in enumerate(qrels)))
    res = embedctl(work, "index", "--collection", "data/corpus.jsonl", *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 document(s) of data/corpus.jsonl have no title and no text: indexed as empty texts" in res.stderr
    return work


# (case, arguments, exit code, fragment expected on stderr (or stdout for metrics))
ROWS = [
    ("empty query in a queries file: warned by line, ranked",
     ["search", "--queries", "odd_queries.tsv", "--output", "odd.tsv"], 0,
     "no tokens the model can read: ranked on the special tokens alone"),
    ("punctuation-only query in a queries file: warned by line",
     ["search", "--queries", "odd_queries.tsv", "--output", "odd.tsv"], 0, "'?!...', odd_queries.tsv:3)"),
    ("punctuation-only single query: warned",
     ["search", "?!"], 0, "1 query has only punctuation"),
    ("empty single query: refused, nothing to rank",
     ["search", ""], 1, "the query has no tokens the model can read"),
    ("qrels of another collection (no relevant document in the index): refused",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "other_qrels.tsv"], 1,
     "relevant documents of other_qrels.tsv"),
    ("qrels mostly outside the index: warned with the overlap",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "partial_qrels.tsv"], 0, "warning: qrels: 1 of "),
    ("evaluate: a ranking with none of the qrels' documents: refused",
     ["evaluate", "--run", "odd.tsv", "--qrels", "other_qrels.tsv"], 1, "are in any ranking of odd.tsv"),
    ("--qrels with -k below a measure's depth: the measure is left out, saying so",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "-k", "10"], 0,
     "Recall@100 left out: they read deeper than the 10 hits"),
    ("a model.* override the index's pinned settings ignore: said",
     ["search", "scurvy", "model.query_max_length=16"], 0,
     "model.query_max_length=16 (command line) is ignored: the index"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, args, code, fragment", ROWS, ids=[r[0] for r in ROWS])
def test_answers(work, case, args, code, fragment):
    res = embedctl(work, *args)
    assert res.returncode == code, f"{case}: {res.stderr[-2000:]}"
    assert fragment in res.stderr + res.stdout, f"{case}: {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_empty_and_punctuation_queries_are_ranked(work):
    res = embedctl(work, "search", "--queries", "odd_queries.tsv", "--output", "odd.tsv", "-k", "5")
    assert res.returncode == 0, res.stderr
    ranked = {line.split("\t")[0] for line in (work / "odd.tsv").read_text().splitlines()}
    assert {"q-empty", "q-punct"} <= ranked and len(ranked) == 3


@pytest.mark.slow
def test_qrels_without_k_retrieve_every_reported_depth(work):
    """Without -k, --qrels retrieves as deep as the deepest reported measure (Recall@100): the same metrics
    as an explicit -k 100, and Recall@100 is no longer Recall@10."""
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json")
    assert res.returncode == 0, res.stderr
    auto = json.loads(res.stdout.strip().splitlines()[-1])
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json",
                   "-k", "100")
    assert res.returncode == 0, res.stderr
    explicit = json.loads(res.stdout.strip().splitlines()[-1])
    assert auto == pytest.approx(explicit, abs=1e-9)
    assert auto["Recall@100"] == 1.0  # 61 documents: every relevant one is within 100 hits
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json",
                   "-k", "10")
    assert "Recall@100" not in json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_empty_document_is_searchable(work):
    res = embedctl(work, "search", "--queries", "odd_queries.tsv", "--output", "all.tsv", "-k", "100")
    assert res.returncode == 0, res.stderr
    assert "empty-doc" in {line.split("\t")[1] for line in (work / "all.tsv").read_text().splitlines()}
