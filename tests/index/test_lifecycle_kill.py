"""kill -9 of a real `python -m embedctl index add | delete | compact` in each phase of the change (add both
incremental and re-clustering, embedctl.index.recluster): the previous version stays complete and
searchable, and rerunning the same command ends with the same bytes as an uninterrupted run. The process
kills itself with SIGKILL at the named point (EMBEDCTL_FAILPOINT, embedctl.util.failpoints): a real kill -9,
exactly where the test wants it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.lifecycle import INCREMENTAL, build_base, copy_index, tree_digest, write_tsv

from embedctl.index import add_documents, delete_documents, index_info
from embedctl.index.generations import open_generation
from embedctl.index.update import UpdateOptions
from embedctl.search.plaid import PlaidSearcher
from embedctl.util.failpoints import FAILPOINT_ENV as KILL_ENV

REPO = Path(__file__).resolve().parents[2]
NEW = [("n1", "Sailors on long voyages got scurvy until lemons brought them vitamin C."),
       ("d5", "Document 5 now talks about penguins in the Antarctic."),
       ("n2", "Bees dance to tell each other where the flowers are.")]
PHASES = {
    "add": ["add:encoded", "add:chunk-written", "add:segment-written", "add:committed"],
    # the 40-document index re-clusters on add by default (index.recluster_below_docs)
    "recluster": ["add:recluster-trained", "add:recluster-chunk-written", "add:segment-written", "add:committed"],
    "delete": ["delete:tombstones-written", "delete:committed"],
    "compact": ["compact:chunk-written", "compact:segment-written", "compact:committed"],
    # an add whose new segment and the one before it merge (index.merge_factor=2, embedctl.index.merge): a
    # kill inside the merge leaves the add committed; the rerun (nothing new to encode) makes the merge
    "merge": ["merge:chunk-written", "merge:segment-written", "merge:committed"],
}
EARLIER = [("m1", "Otters float on their backs and crack shells on their chests."),
           ("m2", "Glaciers carve valleys as they slowly move downhill.")]


def _cli(index: Path, command: str, work: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    new = ["--collection", str(work / "new.tsv")]
    args = {"add": [*new, *INCREMENTAL], "recluster": new, "delete": ["--id", "d1", "--id", "d5", "--id", "n1"],
            "compact": [], "merge": [*new, *INCREMENTAL, "index.merge_factor=2"]}[command]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    subcommand = "add" if command in ("recluster", "merge") else command
    return subprocess.run([sys.executable, "-m", "embedctl", "index", subcommand, "--index", str(index), *args],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def prepared(module_tmp):
    """The index each command starts from (add: the build; delete: after an add; compact: after an add and a
    delete), and each command's uninterrupted result."""
    work = module_tmp("kill")
    base = build_base(work)
    write_tsv(work / "new.tsv", NEW)
    starts = {"add": base, "recluster": base}
    starts["delete"] = copy_index(base, work / "start-delete")
    add_documents(starts["delete"], work / "new.tsv", options=UpdateOptions(progress=False, recluster_below_docs=0))
    starts["compact"] = copy_index(starts["delete"], work / "start-compact")
    delete_documents(starts["compact"], ["d2", "d3", "n2"])
    starts["merge"] = copy_index(base, work / "start-merge")  # one small segment beside the base
    add_documents(starts["merge"], write_tsv(work / "earlier.tsv", EARLIER),
                  options=UpdateOptions(progress=False, recluster_below_docs=0))
    references = {}
    for command, start in starts.items():
        ref = copy_index(start, work / f"ref-{command}")
        done = _cli(ref, command, work)
        assert done.returncode == 0, done.stderr
        if command == "merge":  # the add's line says what merged
            assert "merged 2 segments (5 documents) into one" in " ".join((done.stdout + done.stderr).split())
        references[command] = tree_digest(ref)
    return work, starts, references


@pytest.mark.slow
@pytest.mark.parametrize("command,phase", [(c, p) for c, phases in PHASES.items() for p in phases])
def test_kill_9_in_each_phase_then_rerun_is_byte_identical(prepared, tmp_path, command, phase):
    work, starts, references = prepared
    index = copy_index(starts[command], tmp_path / "idx")
    before = open_generation(index).number
    killed = _cli(index, command, work, kill_at=phase)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after = open_generation(index).number
    commits = int(phase.endswith(":committed")) + int(command == "merge")  # an add commits before its merge
    assert after == before + commits  # the commit file is the switch
    assert index_info(index, verify_files=True)["verify"] == []  # that version is complete ...
    PlaidSearcher(index)  # ... and searchable
    rerun = _cli(index, command, work)
    assert rerun.returncode == 0, rerun.stderr
    digest = tree_digest(index)
    assert sorted(digest) == sorted(references[command])
    assert [name for name in digest if digest[name] != references[command][name]] == []
