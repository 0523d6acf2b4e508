"""The environment fails loudly and cleanly: a full disk, a read-only output and a closed pipe, each in a real
subprocess. One message naming the path (or the output) and the fix; no raw OSError / RuntimeError /
SafetensorError, no "unexpected error", no leftover temporary files; a closed pipe exits quietly (141).

Full and read-only disks are small tmpfs mounts the test makes itself in a user + mount namespace
(``unshare -rm``); where the kernel or the sandbox forbids that, those tests skip, saying so. Running as
root makes permission bits no obstacle, so a read-only *mount* is the honest read-only folder."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embedctl.cli.oserrors import environment_error
from embedctl.util.console import PIPE_EXIT

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}
RAW = ("Traceback", "unexpected error", "OSError", "RuntimeError", "SafetensorError", "Errno")


def _can_mount() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    res = subprocess.run(["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                         capture_output=True, text=True, timeout=30)
    return None if res.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {res.stderr.strip()[:200]}"


NO_MOUNT = _can_mount()
needs_mount = pytest.mark.skipif(NO_MOUNT is not None, reason=f"a size-limited file system is needed: {NO_MOUNT}")


def in_small_fs(mnt: Path, size: str, args: list[str], *, read_only: bool = False, cwd: Path | None = None,
                timeout: int = 300) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``embedctl ARGS`` with ``mnt`` a fresh tmpfs of ``size`` (read-only when asked); returns the result
    and every path left in the mount afterwards (listed from inside: the mount goes with the namespace)."""
    mnt.mkdir(parents=True, exist_ok=True)
    script = (f'mount -t tmpfs -o size={size} tmpfs "$1" && mkdir -p "$1/sub" && '
              + ('mount -o remount,ro "$1" && ' if read_only else "")
              + 'shift; "$@"; rc=$?; find "$MNT" -mindepth 1 > "$LISTING"; exit $rc')
    listing = mnt.parent / f"{mnt.name}.listing"
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(mnt), sys.executable, "-m", "embedctl",
                          *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         env={**ENV, "MNT": str(mnt), "LISTING": str(listing)})
    left = [str(Path(p).relative_to(mnt)) for p in listing.read_text().split()] if listing.exists() else []
    return res, left


def _clean(res: subprocess.CompletedProcess) -> None:
    assert not any(word in res.stderr for word in RAW), res.stderr
    assert res.stderr.count("error:") == 1, res.stderr


@pytest.fixture(scope="module")
def texts(module_tmp) -> dict[str, Path]:
    root = module_tmp("env")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"document {i} about scurvy and vitamin c " * 20})
                              + "\n" for i in range(60)))
    queries = root / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(3)))
    return {"root": root, "corpus": corpus, "queries": queries}


@needs_mount
def test_pretokenize_on_a_full_disk_names_the_output(texts, tmp_path):
    out = tmp_path / "mnt" / "sub" / "cache"
    res, left = in_small_fs(tmp_path / "mnt", "12k", ["pretokenize", "--input", str(texts["corpus"]),
                                                      "--output", str(out)])
    assert res.returncode == 1, res.stderr
    _clean(res)
    assert f"writing {out}: no space left on the device" in res.stderr and "free space" in res.stderr
    assert not [p for p in left if p.endswith(".tmp")], left


@needs_mount
def test_pretokenize_into_a_read_only_folder_names_the_path(texts, tmp_path):
    out = tmp_path / "mnt" / "sub" / "cache"
    res, left = in_small_fs(tmp_path / "mnt", "1m", ["pretokenize", "--input", str(texts["corpus"]),
                                                     "--output", str(out)], read_only=True)
    assert res.returncode == 1, res.stderr
    _clean(res)
    assert str(tmp_path / "mnt" / "sub") in res.stderr and "read-only" in res.stderr
    assert "writable disk" in res.stderr
    assert left == ["sub"]


@needs_mount
@pytest.mark.slow
def test_index_build_on_a_full_disk_names_the_output_and_leaves_no_temp_files(texts, tmp_path):
    root = tmp_path / "mnt" / "sub"
    res, left = in_small_fs(tmp_path / "mnt", "64k", ["index", "--collection", str(texts["corpus"]), "--root",
                                                      str(root), "--name", "full", "--kind", "dense"])
    assert res.returncode == 1, res.stderr
    _clean(res)
    assert f"writing {root}/full: no space left on the device" in res.stderr
    # the .building folder is kept on purpose (rerunning resumes there): the message names it, its size and
    # how to give the space back instead
    assert f"stays in {root}/.full.building (" in res.stderr and "MiB): the same command resumes" in res.stderr
    assert "rm -r" in res.stderr
    assert not [p for p in left if p.endswith(".tmp")], left


@needs_mount
def test_search_output_on_a_read_only_disk_is_refused_before_searching(texts, tmp_path):
    out = tmp_path / "mnt" / "sub" / "run.tsv"
    res, _ = in_small_fs(tmp_path / "mnt", "1m", ["search", "--index", str(tmp_path / "nowhere"), "-q",
                                                  str(texts["queries"]), "-o", str(out)], read_only=True)
    assert res.returncode == 2, res.stderr
    _clean(res)
    assert f"--output {out}" in res.stderr and "not writable" in res.stderr


@pytest.mark.parametrize("args", [["config", "show"], ["config", "keys"], ["config", "keys", "--markdown"]])
def test_a_closed_pipe_exits_quietly(args):
    """`embedctl ... | head -1` when head has gone: no message, the status any Unix tool gives (141)."""
    proc = subprocess.Popen([sys.executable, "-m", "embedctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    proc.stdout.close()  # the reader goes before anything is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == PIPE_EXIT, err
    assert err.decode() == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full (a device every write to fails with ENOSPC)")
@pytest.mark.parametrize("args", [["config", "show"], ["config", "keys", "--markdown"]])
def test_stdout_on_a_full_disk_is_named_as_stdout(args):
    """`embedctl config show > /dev/full`: the message named no file and told of an index's .building folder
    and a training checkpoint to resume from; stdout is named, with no resume note."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "embedctl", *args], stdout=full, stderr=subprocess.PIPE,
                             text=True, env=ENV, timeout=120)
    assert res.returncode == 1, res.stderr
    assert "error: writing standard output: no space left on the device." in res.stderr, res.stderr
    assert "resumes" not in res.stderr and "how to fix" in res.stderr and "Traceback" not in res.stderr


def test_evaluate_json_into_a_closed_pipe_exits_quietly(tmp_path):
    run, qrels = tmp_path / "run.tsv", tmp_path / "qrels.txt"
    run.write_text("".join(f"q{i}\td{i}\t1\t1.0\n" for i in range(50)))
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(50)))
    res = subprocess.run(f'"{sys.executable}" -m embedctl evaluate --run {run} --qrels {qrels} --json | head -c 0',
                         shell=True, capture_output=True, text=True, env=ENV, timeout=120)
    assert "BrokenPipe" not in res.stderr and "error" not in res.stderr, res.stderr


def test_a_missing_output_parent_is_created_or_named(texts, tmp_path):
    """pretokenize into a folder whose parents do not exist yet: they are made (the output is a new folder)."""
    out = tmp_path / "a" / "b" / "cache"
    res = subprocess.run([sys.executable, "-m", "embedctl", "pretokenize", "--input", str(texts["queries"]),
                          "--output", str(out), "--side", "queries"], capture_output=True, text=True, env=ENV,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert (out / "queries").is_dir()


def test_an_output_under_a_file_is_named(texts, tmp_path):
    (tmp_path / "afile").write_text("x\n")
    out = tmp_path / "afile" / "cache"
    res = subprocess.run([sys.executable, "-m", "embedctl", "pretokenize", "--input", str(texts["queries"]),
                          "--output", str(out), "--side", "queries"], capture_output=True, text=True, env=ENV,
                         timeout=300)
    assert res.returncode != 0
    _clean(res)
    assert str(tmp_path / "afile") in res.stderr


@pytest.mark.parametrize("err,fragment", [
    (OSError(errno.ENOSPC, "No space left on device"), "writing OUT: no space left on the device"),
    (OSError(errno.EROFS, "Read-only file system", "/x/y"), "/x/y: the file system is read-only"),
    (PermissionError(errno.EACCES, "Permission denied", "/x/z"), "/x/z: permission denied"),
    (OSError(errno.EFBIG, "File too large"), "writing OUT: the file grew beyond"),
    (RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
     "writing OUT: no space left on the device"),
    (RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file "
                  "data/0: file write failed"), None),
])
def test_environment_errors_are_recognised_through_their_wrappers(err, fragment):
    mapped = environment_error(err, output="OUT")
    if fragment is None:
        assert mapped is None  # not recognisable as the environment: reported as it is
    else:
        assert mapped is not None and fragment in str(mapped) and "how to fix" in str(mapped)


def test_an_oserror_wrapped_as_a_cause_is_found():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/d/f")
        except OSError as inner:
            raise RuntimeError("save failed") from inner
    except RuntimeError as outer:
        mapped = environment_error(outer)
    assert mapped is not None and "/d/f: no space left on the device" in str(mapped)


def test_a_documents_file_that_fails_to_close_leaves_no_temp_file(tmp_path):
    """A write failing in the documents writer's last step (a full disk in `index add` did; here the fields
    file's place is held by a folder) removes the writer's `.docs.parquet.tmp`, and no docs.parquet appears."""
    from embedctl.index.docs import DocTableWriter
    from embedctl.index.files import FIELDS_FILE

    (tmp_path / FIELDS_FILE).mkdir()
    with pytest.raises(OSError):
        with DocTableWriter(tmp_path / "docs.parquet") as writer:
            writer.add("d1", None, "text", {"year": 2015})
    assert sorted(p.name for p in tmp_path.iterdir()) == [FIELDS_FILE]
