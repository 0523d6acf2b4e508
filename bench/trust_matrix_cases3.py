"""The hostile matrix: outputs, environment, evaluate, ranges and serve (see bench/trust_matrix_cases.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from trust_matrix_cases import OK, Case, R, copy, files, flip, json_no_nan, no_raw_escape

BAD_IDS = {"tab": "a\tb", "newline": "a\nb", "cr": "a\rb", "esc": "d\x1b[31mX", "nul": "x\x00y", "del": "del\x7f",
           "c1": "c1\x9b31m", "osc": "t\x1b]0;PWNED\x07",
           "nel": "n\x85l", "ls": "l\u2028s"}


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def outputs() -> list[Case]:
    c = "outputs"
    out: list[Case] = []
    for tag, bad in BAD_IDS.items():
        corpus = _jsonl([{"_id": "ok", "text": "fine"}, {"_id": bad, "text": "the bad one"}])
        out.append(R(f"outputs/pretokenize-id-{tag}", c, ["pretokenize", "--input", "{bad_jsonl}", "--output",
                                                          "{ws}/cache"], ["{bad_jsonl}:2:"],
                     prep=files(bad_jsonl=corpus), check=no_raw_escape))
        out.append(R(f"outputs/index-id-{tag}", c, ["index", "--collection", "{bad_jsonl}", "--root", "{ws}/ix",
                                                    "--kind", "dense"], ["{bad_jsonl}:2:"],
                     prep=files(bad_jsonl=corpus), check=no_raw_escape))
    for tag in ("tab", "newline", "esc", "nul"):
        bad = BAD_IDS[tag]
        corpus = _jsonl([{"_id": "ok", "text": "fine"}, {"_id": bad, "text": "the bad one"}])
        out.append(R(f"outputs/index-add-id-{tag}", c, ["index", "add", "--index", "{my_dense}", "--collection",
                                                        "{bad_jsonl}"], ["{bad_jsonl}:2:"],
                     prep=lambda ws, fx, corpus=corpus: copy("dense")(ws, fx) | files(bad_jsonl=corpus)(ws, fx)))
        out.append(R(f"outputs/search-query-id-{tag}", c, ["search", "--index", "{dense}", "-q", "{q_jsonl}", "-o",
                                                           "{ws}/run.tsv"], ["{q_jsonl}:2:"],
                     prep=files(q_jsonl=_jsonl([{"_id": "q1", "text": "scurvy"}, {"_id": bad, "text": "x"}]))))
        out.append(R(f"outputs/prebatch-qrels-id-{tag}", c, ["prebatch", "--input", "{cache}", "--qrels",
                                                             "{qrels_tsv}", "--output", "{ws}/b"], ["{qrels_tsv}:"],
                     prep=files(qrels_tsv=f"query-id\tcorpus-id\tscore\n{bad.replace(chr(9), ' ')}\t4983\t1\n")))
        out.append(R(f"outputs/delete-ids-file-{tag}", c, ["index", "delete", "--index", "{my_dense}", "--ids",
                                                           "{ids_txt}"], ["{ids_txt}:"],
                     prep=lambda ws, fx, bad=bad: copy("dense")(ws, fx) | files(ids_txt=f"4983\n{bad}\n")(ws, fx),
                     check=no_raw_escape) if tag not in ("tab", "newline") else
                   Case(f"outputs/delete-ids-file-{tag}", c, ["index", "delete", "--index", "{my_dense}", "--ids",
                                                              "{ids_txt}"], expect="either", names=("{ids_txt}",),
                        prep=lambda ws, fx, bad=bad: copy("dense")(ws, fx) | files(ids_txt=f"4983\n{bad}\n")(ws, fx),
                        check=no_raw_escape))
    parquet = ("parquet", "corpus.parquet")
    out += [
        R("outputs/parquet-id-tab", c, ["pretokenize", "--input", "{ws}/" + parquet[1], "--output", "{ws}/cache"],
          ["{ws}/corpus.parquet:2:"], prep=_parquet_with_bad_id),
        R("outputs/tsv-id-esc", c, ["pretokenize", "--input", "{bad_tsv}", "--output", "{ws}/cache"],
          ["{bad_tsv}:2:"], prep=files(bad_tsv="ok\tfine\nd\x1b[31mX\tbad\n"), check=no_raw_escape),
        R("outputs/queries-tsv-id-esc", c, ["search", "--index", "{dense}", "-q", "{q_tsv}", "-o", "{ws}/r.tsv"],
          ["{q_tsv}:2:"], prep=files(q_tsv="q1\tscurvy\nq\x1b[2J\tx\n"), check=no_raw_escape),
        R("outputs/missing-file-name-with-escape", c, ["pretokenize", "--input", "{ws}/no\x1b]0;PWNED\x07.jsonl",
                                                       "--output", "{ws}/cache"], ["no"], check=no_raw_escape),
        OK("outputs/search-json-no-nan", c, ["search", "--index", "{dense}", "scurvy", "--json"], check=json_no_nan),
        OK("outputs/plaid-search-json-no-nan", c, ["search", "--index", "{plaid}", "scurvy", "--json"],
           check=json_no_nan),
        OK("outputs/info-json-no-nan", c, ["index", "info", "--index", "{grown}", "--json"], check=json_no_nan),
        OK("outputs/evaluate-json-no-nan-unlabelled", c, ["evaluate", "--run", "{run_tsv}", "--qrels", "{unl_txt}",
                                                          "--json"], check=json_no_nan,
           prep=lambda ws, fx: files(unl_txt="".join(
               line.rsplit(" ", 1)[0] + " 0\n" for line in fx["qrels"].read_text().splitlines()))(ws, fx)),
        # no query in common: nothing to measure, so a refusal naming the qrels (and the fix) is as right as a
        # JSON answer without NaN (as evaluate/disjoint-queries)
        Case("outputs/evaluate-json-no-nan-empty-overlap", c, ["evaluate", "--run", "{run_tsv}", "--qrels",
                                                               "{other_txt}", "--json"], expect="either",
             names=("{other_txt}",), check=json_no_nan, prep=files(other_txt="zz 0 d1 1\n")),
        OK("outputs/search-table-escapes-query", c, ["search", "--index", "{dense}", "scurvy \x1b]0;PWNED\x07"],
           check=no_raw_escape, env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}),
        OK("outputs/search-table-escapes-doc-text", c, ["search", "--index", "{ws}/ix/nasty", "scurvy"],
           check=no_raw_escape, env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}, prep=_nasty_index, timeout=600),
        OK("outputs/search-trec-format-parses", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o",
                                                    "{ws}/run.trec", "--format", "trec"], check=_trec_parses),
    ]
    return out


def _parquet_with_bad_id(ws: Path, fx: dict) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"_id": ["ok", "a\tb"], "text": ["fine", "bad"]}), ws / "corpus.parquet")
    return {}


def _nasty_index(ws: Path, fx: dict) -> dict:
    corpus = ws / "nasty.jsonl"
    corpus.write_text(_jsonl([{"_id": "d1", "text": "scurvy \x1b]0;PWNED\x07 evil \x1b[31mRED\x1b[0m [bold]x[/]"},
                              {"_id": "d2", "text": "vitamins"}]))
    subprocess.run([sys.executable, "-m", "embedctl", "index", "--collection", str(corpus), "--root", str(ws / "ix"),
                    "--name", "nasty", "--kind", "dense"], capture_output=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return {}


def _trec_parses(rc, out, err, ws, fx):
    if rc == 0:
        rows = [line.split() for line in (ws / "run.trec").read_text().splitlines()]
        if not rows or any(len(r) != 6 for r in rows):
            return "BAD", "a TREC run line without 6 fields"
    return None


def environment() -> list[Case]:
    c = "env"
    full = {"size": "12k"}
    ro = {"size": "1m", "ro": True}
    sub = "{ws}/mnt/sub"
    out = [
        R("env/full-disk-pretokenize", c, ["pretokenize", "--input", "{corpus}", "--output", sub + "/cache"],
          [sub + "/cache", "no space"], fs=full),
        R("env/full-disk-index", c, ["index", "--collection", "{corpus}", "--root", sub, "--name", "full", "--kind",
                                     "dense"], [sub + "/full", "no space"], fs={"size": "48k"}),
        R("env/full-disk-prebatch", c, ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}", "--output",
                                        sub + "/b"], [sub + "/b", "no space"], fs={"size": "8k"}),
        R("env/full-disk-search-o", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o", sub + "/run.tsv",
                                        "-k", "30"], [sub + "/run.tsv", "no space"], fs={"size": "4k"}),
        R("env/full-disk-index-add", c, ["index", "add", "--index", sub + "/dense", "--collection", "{extra}"],
          [sub + "/dense", "no space"], fs={"size": "140k", "seed": "{dense}"}),
        R("env/full-disk-train", c, ["train", "model.query_max_length=12", "model.doc_max_length=24",
                                     "data.path={batches}", "output.dir=" + sub + "/run", "train.max_steps=1",
                                     "train.save_every=1"], [sub + "/run", "no space"], fs={"size": "2m"},
          timeout=600),
        R("env/read-only-pretokenize", c, ["pretokenize", "--input", "{corpus}", "--output", sub + "/cache"],
          [sub, "read-only"], fs=ro),
        R("env/read-only-index", c, ["index", "--collection", "{corpus}", "--root", sub, "--name", "x", "--kind",
                                     "dense"], [sub, "read-only"], fs=ro),
        R("env/read-only-prebatch", c, ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}", "--output",
                                        sub + "/b"], [sub, "read-only"], fs=ro),
        R("env/read-only-search-o", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o", sub + "/run.tsv"],
          [sub + "/run.tsv"], fs=ro, codes=(2,)),
        R("env/read-only-index-add", c, ["index", "add", "--index", sub + "/dense", "--collection", "{extra}"],
          [sub + "/dense", "read-only"], fs={"size": "1m", "ro": True, "seed": "{dense}"}),
        R("env/read-only-index-delete", c, ["index", "delete", "--index", sub + "/dense", "--id", "4983"],
          [sub + "/dense", "read-only"], fs={"size": "1m", "ro": True, "seed": "{dense}"}),
        R("env/read-only-index-compact", c, ["index", "compact", "--index", sub + "/grown"],
          [sub + "/grown", "read-only"], fs={"size": "1m", "ro": True, "seed": "{grown}"}),
        OK("env/read-only-index-search-ok", c, ["search", "--index", sub + "/dense", "scurvy"],
           fs={"size": "1m", "ro": True, "seed": "{dense}"}),
        OK("env/read-only-index-info-verify-ok", c, ["index", "info", "--verify", "--index", sub + "/dense"],
           fs={"size": "1m", "ro": True, "seed": "{dense}"}),
        R("env/output-under-a-file-pretokenize", c, ["pretokenize", "--input", "{queries}", "--output",
                                                     "{afile}/cache", "--side", "queries"], ["{afile}"],
          prep=files(afile="x\n")),
        R("env/output-under-a-file-search-o", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o",
                                                  "{afile}/run.tsv"], ["{afile}"], prep=files(afile="x\n")),
        R("env/output-under-a-file-index", c, ["index", "--collection", "{corpus}", "--root", "{afile}/ix",
                                               "--kind", "dense"], ["{afile}"], prep=files(afile="x\n")),
        R("env/output-under-a-file-prebatch", c, ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}",
                                                  "--output", "{afile}/b"], ["{afile}"], prep=files(afile="x\n")),
        R("env/missing-input-pretokenize", c, ["pretokenize", "--input", "{ws}/nope.jsonl", "--output",
                                               "{ws}/cache"], ["{ws}/nope.jsonl"]),
        R("env/missing-input-index", c, ["index", "--collection", "{ws}/nope.jsonl", "--root", "{ws}/ix"],
          ["{ws}/nope.jsonl"]),
        R("env/missing-input-prebatch", c, ["prebatch", "--input", "{ws}/nocache", "--qrels", "{qrels_beir}",
                                            "--output", "{ws}/b"], ["{ws}/nocache"]),
        R("env/missing-qrels-prebatch", c, ["prebatch", "--input", "{cache}", "--qrels", "{ws}/no.tsv",
                                            "--output", "{ws}/b"], ["{ws}/no.tsv"]),
        R("env/missing-data-train", c, ["train", "data.path={ws}/nobatches", "output.dir={ws}/run"],
          ["{ws}/nobatches"]),
        R("env/missing-index-search", c, ["search", "--index", "{ws}/noindex", "scurvy"], ["{ws}/noindex"]),
        R("env/missing-queries-search", c, ["search", "--index", "{dense}", "-q", "{ws}/noq.tsv", "-o",
                                            "{ws}/r.tsv"], ["{ws}/noq.tsv"]),
        R("env/missing-run-evaluate", c, ["evaluate", "--run", "{ws}/norun.tsv", "--qrels", "{qrels}"],
          ["{ws}/norun.tsv"]),
        R("env/missing-qrels-evaluate", c, ["evaluate", "--run", "{run_tsv}", "--qrels", "{ws}/noq.txt"],
          ["{ws}/noq.txt"]),
        R("env/missing-index-info", c, ["index", "info", "--index", "{ws}/noindex"], ["{ws}/noindex"]),
        R("env/missing-collection-add", c, ["index", "add", "--index", "{my_dense}", "--collection",
                                            "{ws}/no.jsonl"], ["{ws}/no.jsonl"], prep=copy("dense")),
        R("env/missing-ids-file-delete", c, ["index", "delete", "--index", "{my_dense}", "--ids", "{ws}/no.txt"],
          ["{ws}/no.txt"], prep=copy("dense")),
        R("env/missing-config-file", c, ["config", "show", "{ws}/no.yaml"], ["{ws}/no.yaml"]),
        R("env/missing-data-inspect", c, ["data", "inspect", "{ws}/nothing"], ["{ws}/nothing"]),
        R("env/folder-as-run-evaluate", c, ["evaluate", "--run", "{ws}", "--qrels", "{qrels}"], ["{ws}"]),
        R("env/folder-as-queries-search", c, ["search", "--index", "{dense}", "-q", "{ws}", "-o", "{ws}/r.tsv"],
          ["{ws}"]),
        R("env/empty-folder-pretokenize", c, ["pretokenize", "--input", "{ws}/empty", "--output", "{ws}/cache"],
          ["{ws}/empty"], prep=lambda ws, fx: (ws / "empty").mkdir()),
        R("env/empty-corpus-index", c, ["index", "--collection", "{e_jsonl}", "--root", "{ws}/ix", "--kind",
                                        "dense"], ["{e_jsonl}"], prep=files(e_jsonl="")),
        R("env/binary-corpus-pretokenize", c, ["pretokenize", "--input", "{b_jsonl}", "--output", "{ws}/cache"],
          ["{b_jsonl}"], prep=files(b_jsonl=b"\x00\xff\xfe\x89PNG\r\n" * 50)),
        R("env/config-file-is-a-folder", c, ["config", "show", "{ws}"], ["{ws}"]),
    ]
    pipes = [("config-show", "{embedctl} config show | head -1"),
             ("config-keys", "{embedctl} config keys | head -1"),
             ("config-keys-markdown", "{embedctl} config keys --markdown | head -1"),
             ("evaluate", "{embedctl} evaluate --run {run_tsv} --qrels {qrels} -m P_5 | head -c 0"),
             ("evaluate-json", "{embedctl} evaluate --run {run_tsv} --qrels {qrels} --json | head -c 0"),
             ("info-json", "{embedctl} index info --index {grown} --json | head -c 0"),
             ("info", "{embedctl} index info --index {grown} | head -1"),
             ("search-table", "{embedctl} search --index {dense} scurvy | head -1"),
             ("search-json", "{embedctl} search --index {dense} scurvy --json | head -c 0"),
             ("search-stdout-ranking", "{embedctl} search --index {dense} -q {queries} -o /dev/stdout | head -1"),
             ("data-inspect", "{embedctl} data inspect {cache}/documents | head -1"),
             ("help", "{embedctl} --help | head -1"),
             ("index-help", "{embedctl} index --help | head -1"),
             ("evaluate-compare", "{embedctl} evaluate --run {run_tsv} --run {run_tsv} --qrels {qrels} | head -1"),
             ("search-qrels-metrics", "{embedctl} search --index {dense} -q {queries} --qrels {qrels} | head -c 0"),
             ("info-verify", "{embedctl} index info --verify --index {grown} | head -1"),
             ("config-keys-section", "{embedctl} config keys optim | head -1"),
             ("version", "{embedctl} --version | head -c 0")]
    out += [Case(f"env/closed-pipe-{tag}", c, None, expect="pipe", shell=cmd) for tag, cmd in pipes]
    # stdout redirected onto a full disk (/dev/full: every write fails with ENOSPC): named as stdout, no resume note
    full = [("config-show", "{embedctl} config show > /dev/full"),
            ("evaluate-json", "{embedctl} evaluate --run {run_tsv} --qrels {qrels} --json > /dev/full"),
            ("search-json", "{embedctl} search --index {dense} scurvy --json > /dev/full")]
    if os.path.exists("/dev/full"):
        out += [Case(f"env/stdout-full-{tag}", c, None, shell=cmd, names=("standard output",), codes=(1,))
                for tag, cmd in full]
    return out


def _no_false_lower_bound(rc, out, err, ws, fx):
    if rc == 0 and "lower bound" in err:
        return "POOR", "a ranking of the whole collection called a lower bound"
    return None


def evaluate() -> list[Case]:
    c = "evaluate"
    crashers = ["P_0", "ndcg_cut_0", "ndcg_cut_5,0", "success_0", "map_cut_0", "recall_0", "ndcg_5", "Rndcg_5",
                "relative_P_0", "nDCG@0", "nDCG@99999999999999999999", "P_99999999999999999999", "P_-1", "P_1.5",
                "P_", "foo", "", "P_5,,10", "iprec_at_recall_2", "Rprec_mult_-1", "ndcg_cut_1e3", "recall_0x10"]
    ev = ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{tq_txt}"]
    tiny = files(tiny_tsv="q1\td1\t1\t2.0\nq1\td2\t2\t1.0\nq2\td3\t1\t1.0\n", tq_txt="q1 0 d1 1\nq2 0 d3 1\n")
    out = [R(f"evaluate/measure-{m or 'empty'}", c, [*ev, "-m", m], [repr(m)[1:-1] or "measure"], prep=tiny)
           for m in crashers]
    out += [
        OK("evaluate/deeper-than-run", c, [*ev, "-m", "ndcg_cut_100"], ["deeper than"], prep=tiny),
        OK("evaluate/no-relevant-label", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{u_txt}", "--json"],
           ["no relevant document"], prep=files(tiny_tsv="q1\td1\t1\t2.0\nq2\td3\t1\t1.0\n",
                                                u_txt="q1 0 d1 1\nq2 0 d3 0\n"), check=json_no_nan),
        OK("evaluate/fewer-hits-than-k", c, ["evaluate", "--run", "{deep_tsv}", "--qrels", "{tq_txt}", "-m", "P_5"],
           ["fewer than 10 hits"], prep=files(deep_tsv="".join(f"q1\tx{i}\t{i + 1}\t{20 - i}\n" for i in range(12))
                                              + "q2\td3\t1\t1.0\n", tq_txt="q1 0 d1 1\nq2 0 d3 1\n")),
        Case("evaluate/disjoint-queries", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{o_txt}"],
             expect="either", names=("{o_txt}",), names_ok=("judged",),
             prep=files(tiny_tsv="q1\td1\t1\t2.0\n", o_txt="q9 0 d1 1\n")),
        OK("evaluate/all-negative-labels-json", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{n_txt}",
                                                    "--json"], ["no relevant"],
           prep=files(tiny_tsv="q1\td1\t1\t2.0\n", n_txt="q1 0 d1 -1\n"), check=json_no_nan),
        R("evaluate/nan-score", c, ["evaluate", "--run", "{n_tsv}", "--qrels", "{tq_txt}", "--json"],
          ["{n_tsv}:1"], prep=files(n_tsv="q1\td1\t1\tnan\n", tq_txt="q1 0 d1 1\n"), check=json_no_nan),
        R("evaluate/inf-score", c, ["evaluate", "--run", "{n_tsv}", "--qrels", "{tq_txt}", "--json"],
          ["{n_tsv}:1"], prep=files(n_tsv="q1\td1\t1\tinf\n", tq_txt="q1 0 d1 1\n"), check=json_no_nan),
        R("evaluate/duplicate-doc-in-run", c, ["evaluate", "--run", "{d_tsv}", "--qrels", "{tq_txt}"],
          ["{d_tsv}:2"], prep=files(d_tsv="q1\td1\t1\t2.0\nq1\td1\t2\t1.0\n", tq_txt="q1 0 d1 1\n")),
        R("evaluate/empty-run", c, ["evaluate", "--run", "{e_tsv}", "--qrels", "{tq_txt}"], ["{e_tsv}"],
          prep=files(e_tsv="", tq_txt="q1 0 d1 1\n")),
        R("evaluate/empty-qrels", c, ["evaluate", "--run", "{run_tsv}", "--qrels", "{e_txt}"], ["{e_txt}"],
          prep=files(e_txt="")),
        R("evaluate/run-three-columns", c, ["evaluate", "--run", "{r_tsv}", "--qrels", "{tq_txt}"], ["{r_tsv}:2"],
          prep=files(r_tsv="q1\td1\t1\t2.0\nq1\td2\t2\n", tq_txt="q1 0 d1 1\n")),
        R("evaluate/run-rank-not-a-number", c, ["evaluate", "--run", "{r_tsv}", "--qrels", "{tq_txt}"],
          ["{r_tsv}:1"], prep=files(r_tsv="q1\td1\tfirst\t2.0\n", tq_txt="q1 0 d1 1\n")),
        R("evaluate/qrels-label-not-a-number", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{x_txt}"],
          ["{x_txt}:2"], prep=files(tiny_tsv="q1\td1\t1\t2.0\n", x_txt="q1 0 d1 1\nq1 0 d2 high\n")),
        R("evaluate/qrels-two-columns", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{x_txt}"],
          ["{x_txt}:1"], prep=files(tiny_tsv="q1\td1\t1\t2.0\n", x_txt="q1 d1\n")),
        R("evaluate/binary-run", c, ["evaluate", "--run", "{b_tsv}", "--qrels", "{tq_txt}"], ["{b_tsv}"],
          prep=files(b_tsv=b"\x00\x01\x02\xff\xfe" * 40, tq_txt="q1 0 d1 1\n")),
        R("evaluate/qrels-fractional-label", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{x_txt}"],
          ["{x_txt}:1"], prep=files(tiny_tsv="q1\td1\t1\t2.0\n", x_txt="q1 0 d1 0.5\n")),
        OK("evaluate/compare-two-runs-json", c, ["evaluate", "--run", "{run_tsv}", "--run", "{run_tsv}", "--qrels",
                                                 "{qrels}", "--json"], check=json_no_nan),
        OK("evaluate/beir-qrels-with-header", c, ["evaluate", "--run", "{run_tsv}", "--qrels", "{qrels_beir}"]),
        # a ranking of the whole (32-document) collection misses nothing: Recall@100 is exact, not a lower bound
        OK("evaluate/search-qrels-whole-collection", c, ["search", "--index", "{dense}", "-q", "{queries}",
                                                         "--qrels", "{qrels}"], check=_no_false_lower_bound),
        R("evaluate/qrels-conflicting-labels", c, ["evaluate", "--run", "{tiny_tsv}", "--qrels", "{c_txt}"],
          ["{c_txt}:2"], prep=files(tiny_tsv="q1\td1\t1\t2.0\n", c_txt="q1 0 d1 1\nq1 0 d1 0\n")),
        R("evaluate/run-header-row", c, ["evaluate", "--run", "{h_tsv}", "--qrels", "{tq_txt}"], ["{h_tsv}:1"],
          prep=files(h_tsv="qid\tpid\trank\tscore\nq1\td1\t1\t2.0\n", tq_txt="q1 0 d1 1\n")),
    ]
    return out


def ranges() -> list[Case]:
    c = "ranges"
    out = []
    overrides = [
        ("search", ["search", "--index", "{dense}", "scurvy"], ["engine.timeout_s=-5", "engine.timeout_s=0",
                                                               "search.k=0", "search.k=-1", "engine.timeout_s=.nan",
                                                               "search.centroid_score_threshold=.nan",
                                                               "search.metrics={a: 1", "search.k=[1,2",
                                                               "search.k=ten", "search.kk=10", "serch.k=10"]),
        ("index", ["index", "--collection", "{corpus}", "--root", "{ws}/ix"],
         ["index.lock_wait_s=-1", "index.drift_threshold=0", "index.drift_threshold=-1.5", "index.nbits=3",
          "index.name='unclosed", "index.batch_size=0", "index.kind=sparse", "model.doc_max_length=0",
          "model.doc_max_length=100000", "index.seed=-1"]),
        ("add", ["index", "add", "--index", "{dense}", "--collection", "{extra}"], ["index.lock_wait_s=-1",
                                                                                   "index.lock_wait_s=.inf"]),
        ("train", ["train", "data.path={batches}", "output.dir={ws}/run"],
         ["ranks.wait_s=-1", "optim.lr=.nan", "train.max_steps=[1,2"]),
        # the same validation as every command's (load_config), through the cheap one: a train process takes
        # minutes to start on a loaded host
        ("config-validate", ["config", "show"],
         ["ranks.dead_s=0", "optim.lr=.inf", "optim.lr=-1", "train.temperature=-.inf", "train.max_steps=-1",
          "train.save_every=-1", "train.log_every=0", "model.dropout=1.5", "optim.betas=[0.9,.nan]",
          "optim.betas=[0.9,1.5]", "train.resume=sometimes", "optm.lr=1e-4", "optim.lrr=1e-4", "optim.lr"]),
        ("pretokenize", ["pretokenize", "--input", "{corpus}", "--output", "{ws}/cache"],
         ["pretokenize.workers=0", "pretokenize.workers=-1", "pretokenize.num_shards=0",
          "pretokenize.side=both", "pretokenize.on_error=ignore"]),
        ("prebatch", ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}", "--output", "{ws}/b"],
         ["prebatch.queries_per_batch=0", "prebatch.negatives_per_query=-1", "prebatch.seed=-1",
          "prebatch.on_error=maybe"]),
        ("serve", ["serve", "--index", "{dense}"], ["engine.timeout_s=-1", "serve.port=-1",
                                                                   "serve.port=70000"]),
        ("config-show", ["config", "show"], ["train.max_steps=[1,2", "engine.timeout_s=-5", "optim.lr=.nan",
                                             "a.b.c=1", "=1", "optim.lr=${nope}"]),
    ]
    for tag, base, keys in overrides:
        for ov in keys:
            key = ov.split("=")[0] or "="
            if key.split(".")[0] in ("serch", "optm", "a"):  # an unknown section: the message names the section
                key = key.split(".")[0]
            out.append(R(f"ranges/{tag}-{ov}", c, [*base, ov], [key], codes=(2,),
                         serial=tag == "serve", timeout=120 if tag == "serve" else 300))
    flags = [
        ("search-k-zero", ["search", "--index", "{dense}", "scurvy", "-k", "0"], "search.k"),
        ("search-k-negative", ["search", "--index", "{dense}", "scurvy", "-k", "-3"], "search.k"),
        ("search-format", ["search", "--index", "{dense}", "-q", "{queries}", "-o", "{ws}/r", "--format", "xml"],
         "search.format"),
        ("search-mode", ["search", "--index", "{dense}", "scurvy", "--mode", "magic"], "search.mode"),
        ("search-filter-syntax", ["search", "--index", "{dense}", "scurvy", "--filter", "year >> 2"],
         "search.filter"),
        ("search-filter-unknown-field", ["search", "--index", "{dense}", "scurvy", "--filter", "nofield = 1"],
         "nofield"),
        ("index-nbits", ["index", "--collection", "{corpus}", "--root", "{ws}/ix", "--nbits", "3",
                         "model.kind=colbert"], "index.nbits"),
        ("index-kind", ["index", "--collection", "{corpus}", "--root", "{ws}/ix", "--kind", "sparse"],
         "index.kind"),
        ("pretokenize-workers", ["pretokenize", "--input", "{corpus}", "--output", "{ws}/c", "--workers", "-2"],
         "pretokenize.workers"),
        ("pretokenize-shard-index", ["pretokenize", "--input", "{corpus}", "--output", "{ws}/c", "--num-shards",
                                     "2", "--shard-index", "5"], "pretokenize.shard_index"),
        ("pretokenize-max-length", ["pretokenize", "--input", "{corpus}", "--output", "{ws}/c", "--max-length",
                                    "0"], "model.doc_max_length"),
        ("pretokenize-side", ["pretokenize", "--input", "{corpus}", "--output", "{ws}/c", "--side", "both"],
         "pretokenize.side"),
        ("prebatch-qpb", ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}", "--output", "{ws}/b",
                          "--queries-per-batch", "0"], "prebatch.queries_per_batch"),
        ("prebatch-negatives", ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}", "--output", "{ws}/b",
                                "--negatives", "-1"], "prebatch.negatives_per_query"),
        ("train-resume", ["train", "--data", "{batches}", "-o", "{ws}/run", "--resume", "later"], "train.resume"),
        ("serve-port", ["serve", "--index", "{dense}", "--port", "-1"], "serve.port"),
        ("config-keys-unknown-section", ["config", "keys", "optm"], "optm"),
        ("config-keys-unknown-key", ["config", "keys", "optim.lrr"], "optim.lrr"),
    ]
    out += [R(f"ranges/{tag}", c, a, [k], codes=(2,), serial=tag.startswith("serve"), timeout=120)
            for tag, a, k in flags]
    out += [
        R("ranges/yaml-file-syntax-error", c, ["config", "show", "{bad_yaml}"], ["{bad_yaml}:"], codes=(2,),
          prep=files(bad_yaml="train:\n  max_steps: [1, 2\noptim:\n  lr: 1e-4\n")),
        R("ranges/yaml-file-tab", c, ["config", "show", "{bad_yaml}"], ["{bad_yaml}:", "tab"], codes=(2,),
          prep=files(bad_yaml="train:\n\tmax_steps: 3\n")),
        R("ranges/yaml-file-unknown-key", c, ["config", "validate", "{bad_yaml}"], ["{bad_yaml}", "optim.lrr"],
          codes=(2,), prep=files(bad_yaml="optim:\n  lrr: 1e-4\n")),
        R("ranges/yaml-file-negative-timeout", c, ["config", "validate", "{bad_yaml}"],
          ["{bad_yaml}", "engine.timeout_s"], codes=(2,), prep=files(bad_yaml="engine:\n  timeout_s: -3\n")),
        R("ranges/yaml-file-duplicate-key", c, ["config", "validate", "{bad_yaml}"], ["{bad_yaml}:3", "lr"],
          codes=(2,), prep=files(bad_yaml="optim:\n  lr: 1e-4\n  lr: 2e-4\n")),
        R("ranges/yaml-file-bad-indent", c, ["config", "show", "{bad_yaml}"], ["{bad_yaml}:3"], codes=(2,),
          prep=files(bad_yaml="optim:\n  lr: 1e-4\n   warmup_steps: 3\n")),
        R("ranges/yaml-file-missing-layer", c, ["config", "show", "{bad_yaml}"], ["nope.yaml"], codes=(2,),
          prep=files(bad_yaml="defaults: [nope.yaml]\n")),
        R("ranges/config-validate-override-resume", c, ["config", "validate", "train.resume=sometimes"],
          ["train.resume"], codes=(2,)),
        R("ranges/search-filter-syntax-in-file", c, ["search", "--index", "{dense}", "scurvy", "{f_yaml}"],
          ["search.filter", "{f_yaml}"], codes=(2,), prep=files(f_yaml='search:\n  filter: "year >> 2"\n')),
        R("ranges/yaml-file-a-list", c, ["config", "show", "{bad_yaml}"], ["{bad_yaml}"], codes=(2,),
          prep=files(bad_yaml="- 1\n- 2\n")),
        OK("ranges/config-keys-section-ok", c, ["config", "keys", "optim"], ["optim.lr"]),
        OK("ranges/config-show-ok", c, ["config", "show", "optim.lr=2e-5"], ["2.0e-05"]),
    ]
    return out


def _serve_ok(ws: Path, fx: dict, env: dict):
    """A real server on an ephemeral port: /health answers, then it is stopped."""
    import httpx

    port_file = ws / "port"
    p = subprocess.Popen([sys.executable, "-m", "embedctl", "serve", "--index", str(fx["dense"]), "--port", "0",
                          "--port-file", str(port_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (port_file.exists() and port_file.read_text().strip()):
            if p.poll() is not None:
                break
            time.sleep(0.5)
        if not port_file.exists():
            p.kill()
            out, err = p.communicate(timeout=30)
            return p.returncode or 1, out.decode(), err.decode()
        port = int(port_file.read_text().strip())
        while time.time() < deadline:  # the port is bound before the index is loaded: wait for /readyz
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        r = httpx.post(f"http://127.0.0.1:{port}/search", json={"query": "scurvy", "k": 3}, timeout=60)
        ok = r.status_code == 200 and "NaN" not in r.text
        p.terminate()
        out, err = p.communicate(timeout=60)
        return (0 if ok else 1), f"HTTP {r.status_code} {r.text[:300]}", err.decode()
    finally:
        if p.poll() is None:
            p.kill()


def _serve_port_taken(ws: Path, fx: dict, env: dict):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    (ws / "taken").write_text(str(port))
    try:
        p = subprocess.run([sys.executable, "-m", "embedctl", "serve", "--index", str(fx["dense"]), "--port",
                            str(port)], capture_output=True, text=True, env=env, timeout=120)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "still serving"
    finally:
        s.close()


def serve() -> list[Case]:
    c = "serve"
    return [
        Case("serve/search-ok", c, [], expect="ok", special=_serve_ok, serial=True),
        Case("serve/port-in-use", c, [], names=("port",), special=_serve_port_taken, serial=True),
        R("serve/user-folder", c, ["serve", "--index", "{victim}", "--port", "0"], ["{victim}"], serial=True,
          timeout=120),
        R("serve/missing-index", c, ["serve", "--index", "{ws}/none", "--port", "0"], ["{ws}/none"], serial=True,
          timeout=120),
        R("serve/corrupted-index", c, ["serve", "--index", "{ws}/dense", "--port", "0"], ["dense.faiss"],
          prep=copy("dense", then=flip("dense/dense.faiss", 0.97)),
          bad_if_ok=True, serial=True, timeout=120),
        R("serve/bad-host", c, ["serve", "--index", "{dense}", "--host", "not a host!", "--port", "0"],
          ["serve.host"], serial=True, timeout=120),
        R("serve/port-file-under-a-file", c, ["serve", "--index", "{dense}", "--port", "0", "--port-file",
                                              "{afile}/port"], ["{afile}"], prep=files(afile="x\n"), serial=True,
          timeout=120),
        R("serve/read-only-port-file", c, ["serve", "--index", "{dense}", "--port", "0", "--port-file",
                                           "{ws}/mnt/sub/port"], ["{ws}/mnt/sub"], fs={"size": "1m", "ro": True},
          serial=True, timeout=120),
    ]
