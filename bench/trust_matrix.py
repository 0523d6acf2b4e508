"""The hostile matrix of issue 33, re-runnable: every case a real `python -m embedctl ...` subprocess (or a shell
pipeline, or a short-lived `embedctl serve`) against tiny real inputs (bench/trust_matrix_data.py), each
classified by rules, never by hand:

    GOOD  a refusal: the exit code asked for, a message naming the path / key / file:line and saying how to fix
          it, no traceback, no leftover .tmp file, inputs byte for byte as before; or exit 0 where the input is
          legitimately fine (and its output checks pass); into a closed pipe (`| head`): exit 0 or 141 and
          nothing on stderr beyond what the command prints with its stdout open
    POOR  a wrong exit code, a traceback or "unexpected error", a raw library error, a message without the path /
          key or without a fix, a leftover temporary file, a legitimate input refused
    BAD   data deleted or changed outside its place, damaged or mixed data accepted (exit 0 on a corrupted
          input), NaN / Infinity in JSON output

    python bench/trust_matrix.py                        # all cases -> bench/results/<kind>/trust_matrix.json
    python bench/trust_matrix.py --only env,places -j 1 # some classes, one process at a time
    python bench/trust_matrix.py --work /tmp/tm          # keep (and reuse) the fixtures there

At most 2 cases run at once (-j): the host is shared. Cases marked serial (a shared model changed and put back, serve) run one
at a time before the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trust_matrix_data as data  # noqa: E402
from trust_matrix_cases import Case, places  # noqa: E402
from trust_matrix_cases2 import others  # noqa: E402

RAW = ("Traceback", "unexpected error", "Exception ignored", "SafetensorError", "[Errno", "BrokenPipeError",
       "Assertion", "Segmentation fault", "core dumped")
# "fix:" is how a config problem says its fix (ConfigError's one line per problem: "...; fix: set k to ...")
FIX = ("how to fix", "fix:", "expected", "did you mean", "use ", "pass ", "rerun", "set ", "remove ", "choose ")
NAN = re.compile(r"(?<![\w\"])(NaN|-?Infinity)(?![\w\"])")


def _digest(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        if size <= 32 << 20:
            h.update(fh.read())
        else:  # a checkpoint: its size and both ends (a same-size change is made there by the cases)
            h.update(fh.read(1 << 20))
            fh.seek(size - (1 << 20))
            h.update(fh.read())
    return h.hexdigest()


def snapshot(paths: list[Path]) -> dict[str, str]:
    out = {}
    for root in paths:
        if root.is_file():
            out[str(root)] = _digest(root)
        elif root.is_dir():
            for p in root.rglob("*"):
                if p.is_file() and not p.is_symlink() and not p.name.endswith(".lock"):
                    out[str(p)] = _digest(p)
    return out


def temp_files(paths: list[Path]) -> set[str]:
    found = set()
    for root in paths:
        if root.is_dir():
            found |= {str(p) for p in root.rglob("*") if ".tmp" in p.name or p.name.startswith("tmp")}
    return found


def _fill(text: str, names: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: names.get(m.group(1), m.group(0)), text)


def all_cases() -> list[Case]:
    """Every case, the classes interleaved (each class's own order kept: the issue's named cases first), so a
    run cut short by --budget-s has tried every class."""
    cases = places() + others()
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    by_class: dict[str, list[Case]] = {}
    for c in cases:
        by_class.setdefault(c.cls, []).append(c)
    queues = list(by_class.values())
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def run_case(case: Case, fx: dict[str, Path], scratch: Path) -> dict:
    ws = scratch / re.sub(r"[^\w.-]", "_", case.id)
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    names = {k: str(v) for k, v in fx.items()} | {"ws": str(ws), "py": sys.executable,
                                                   "embedctl": f"'{sys.executable}' -m embedctl"}
    extra: dict = {}
    if case.prep:
        extra = case.prep(ws, fx) or {}
    names |= {k: str(v) for k, v in extra.items()}
    argv = [_fill(a, names) for a in case.args] if case.args is not None else None
    shell = _fill(case.shell, names) if case.shell else None
    shown = shell if shell else "embedctl " + " ".join(json.dumps(a) if not re.fullmatch(r"[\w./=:@,+-]*", a) else a
                                                       for a in argv)
    referenced = [p for k, p in fx.items() if str(p) in (shell or " ".join(argv)) and k != "train"]
    referenced += [fx["train"]] if str(fx["train"]) in (shell or " ".join(argv or [])) else []
    guarded = referenced + [ws / p for p in case.protect] + ([ws] if case.expect == "refuse" else [])
    guarded += [fx["victim"]]
    before, tmp_before = snapshot(guarded), temp_files(referenced + [ws])
    env = data.env() | {k: _fill(v, names) for k, v in (case.env or {}).items()}
    t0 = time.time()
    left_in_fs: list[str] = []
    try:
        if case.special:
            rc, out, err = case.special(ws, fx, env)
        elif case.fs:
            rc, out, err, left_in_fs = _in_small_fs(case, ws, argv, env, names)
        elif shell:
            p = subprocess.run(["bash", "-c", "set -o pipefail; " + shell], capture_output=True, env=env,
                               timeout=case.timeout, cwd=_fill(case.cwd, names) if case.cwd else ws)
            rc, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        else:
            p = subprocess.run([sys.executable, "-m", "embedctl", *argv], capture_output=True, env=env,
                               timeout=case.timeout, cwd=_fill(case.cwd, names) if case.cwd else ws)
            rc, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        rc, out = None, (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else ""
        err = (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
    finally:
        if case.after:
            case.after(ws, fx)
    wall = time.time() - t0
    open_err = _stderr_with_stdout_open(shell, env, case, ws) if case.expect == "pipe" and shell else None
    after = snapshot(guarded)
    changed = sorted(k for k in before if before[k] != after.get(k))
    new_tmp = sorted((temp_files(referenced + [ws]) - tmp_before) | {p for p in left_in_fs if ".tmp" in p})
    verdict, why = classify(case, rc, out, err, changed, new_tmp, ws, names, open_err)
    row = {"id": case.id, "class": case.cls, "command": shown, "expect": case.expect, "exit_code": rc,
           "verdict": verdict, "why": why, "wall_s": round(wall, 2),
           "stderr_tail": err[-600:], "stdout_head": out[:300]}
    if verdict == "GOOD" and not case.keep:
        shutil.rmtree(ws, ignore_errors=True)
    return row


def _stderr_with_stdout_open(shell: str, env: dict, case: Case, ws: Path) -> str:
    """The stderr of a pipe case's command with its stdout open (`> /dev/null` instead of `| head`): what it
    prints anyway (a warning about its input, the ranking's summary), which the closed pipe must not add to."""
    command = shell.rsplit("|", 1)[0] + " > /dev/null"
    p = subprocess.run(["bash", "-c", command], capture_output=True, env=env, timeout=case.timeout, cwd=ws)
    return p.stderr.decode("utf-8", "replace")


def _lines(text: str) -> set[str]:
    return {re.sub(r"\d+(\.\d+)?", "#", line).strip() for line in text.splitlines() if line.strip()}


def classify(case: Case, rc, out: str, err: str, changed: list[str], new_tmp: list[str], ws: Path,
             names: dict[str, str], open_err: str | None = None) -> tuple[str, str]:
    fx = {k: Path(v) for k, v in names.items() if k not in ("embedctl", "py")}
    text = (out + err).replace("\n  ", " ")
    if changed:
        return "BAD", f"changed or deleted: {', '.join(changed[:4])}"
    if NAN.search(out) and out.lstrip()[:1] in "{[":
        return "BAD", "NaN or Infinity in JSON output"
    if case.check:
        found = case.check(rc, out, err, ws, fx)
        if found and found[0] == "BAD":
            return found
    if case.expect == "refuse" and rc == 0 and case.bad_if_ok:
        return "BAD", "exit 0 on damaged or mixed input (accepted)"
    if rc is None:
        return ("BAD" if case.bad_if_ok else "POOR"), f"still running after {case.timeout} s (killed)"
    raw = [w for w in RAW if w in text]
    if raw:
        return "POOR", f"raw error in the output: {raw}"
    if new_tmp:
        return "POOR", f"leftover temporary files: {new_tmp[:3]}"
    if case.check:
        found = case.check(rc, out, err, ws, fx)
        if found:
            return found
    if case.expect == "pipe":
        # a Unix tool exits quietly on EPIPE: the closed pipe adds nothing to what the command prints on stderr
        # with its stdout open (its warnings and summaries stay: they are about the input, not the pipe;
        # numbers are masked, timings differ)
        added = sorted(_lines(err) - _lines(open_err or "")) if open_err is not None else err.strip().splitlines()
        if rc in (0, 141) and not added:
            return "GOOD", f"exit {rc}, " + ("quiet" if not err.strip() else "stderr as with stdout open")
        return "POOR", f"exit {rc}, the closed pipe added to stderr {' / '.join(added)[:120]!r}"
    if case.expect == "ok" or (case.expect == "either" and rc == 0):
        if rc != 0:
            return "POOR", f"exit {rc} on a legitimate input: {err.strip()[-200:]!r}"
        missing = [n for n in case.names_ok if _fill(n, names) not in text]
        return ("POOR", f"exit 0 but the output does not say {missing}") if missing else ("GOOD", "exit 0")
    if rc == 0:
        return "POOR", "exit 0: the hostile input was accepted"
    if rc not in case.codes:
        return "POOR", f"exit {rc}, expected one of {case.codes}"
    missing = [n for n in case.names if _fill(n, names) not in text]
    if missing:
        return "POOR", f"the message does not name {missing}"
    if not any(m in text for m in FIX):
        return "POOR", "the message says no fix"
    return "GOOD", f"exit {rc}, names {list(case.names)}, says a fix"


def _in_small_fs(case: Case, ws: Path, argv: list[str], env: dict, names: dict):
    """Run with {ws}/mnt a fresh tmpfs of case.fs['size'] (read-only after case.fs['seed'] is copied in)."""
    mnt = ws / "mnt"
    mnt.mkdir()
    seed = _fill(case.fs.get("seed", ""), names)
    script = (f'mount -t tmpfs -o size={case.fs["size"]} tmpfs "$1" && mkdir -p "$1/sub" && '
              + (f'cp -r "{seed}" "$1/sub/" && ' if seed else "")
              + ('mount -o remount,ro "$1" && ' if case.fs.get("ro") else "")
              + 'shift; "$@"; rc=$?; find "$MNT" -mindepth 1 > "$LISTING"; exit $rc')
    listing = ws / "mnt.listing"
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(mnt), sys.executable, "-m", "embedctl",
                        *argv], capture_output=True, env=env | {"MNT": str(mnt), "LISTING": str(listing)},
                       timeout=case.timeout, cwd=ws)
    left = listing.read_text().split() if listing.exists() else []
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), left


def can_mount() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                       capture_output=True, text=True, timeout=30)
    return None if p.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {p.stderr.strip()[:200]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="fixtures and case folders (default: a new temp folder, removed at the end)")
    ap.add_argument("--only", help="comma-separated classes or case-id prefixes")
    ap.add_argument("-j", "--jobs", type=int, default=2, choices=(1, 2))
    ap.add_argument("--out", help="result file (default bench/results/<kind>/trust_matrix.json)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="stop starting cases after this many seconds; the rest are recorded as NOT_RUN")
    ap.add_argument("--rerun", help="a earlier result file: run again only its cases that were not GOOD and "
                    "write the whole matrix with those rows replaced (the result says which rows are carried over)")
    args = ap.parse_args(argv)
    cases = all_cases()
    earlier: dict[str, dict] = {}
    if args.rerun:
        earlier = {r["id"]: r for r in json.loads(Path(args.rerun).read_text())["rows"]}
        cases = [c for c in cases if earlier.get(c.id, {}).get("verdict") != "GOOD"]
        # what was found first (POOR, BAD, a harness failure), then what the earlier run did not reach
        cases.sort(key=lambda c: earlier.get(c.id, {}).get("verdict") in (None, "NOT_RUN", "SKIPPED"))
    if args.only:
        keys = args.only.split(",")
        cases = [c for c in cases if c.cls in keys or any(c.id.startswith(k) for k in keys)]
    if args.list:
        for c in cases:
            print(f"{c.cls:10s} {c.id}")
        print(f"{len(cases)} cases")
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="trust_matrix_"))
    print(f"fixtures in {work / 'fixtures'} ...", flush=True)
    fx = data.build(work / "fixtures")
    scratch = work / "cases"
    no_mount = can_mount()
    rows: list[dict] = []
    runnable = []
    for c in cases:
        if c.fs and no_mount:
            rows.append({"id": c.id, "class": c.cls, "command": " ".join(c.args or []), "exit_code": None,
                         "verdict": "SKIPPED", "why": f"a size-limited file system is needed: {no_mount}"})
        else:
            runnable.append(c)

    t0 = time.time()

    def one(c: Case) -> dict:
        if args.budget_s and time.time() - t0 > args.budget_s:
            return {"id": c.id, "class": c.cls, "command": " ".join(c.args or []) or (c.shell or ""),
                    "exit_code": None, "verdict": "NOT_RUN", "why": f"--budget-s {args.budget_s:g} spent"}
        try:
            row = run_case(c, fx, scratch)
        except Exception as exc:  # the harness itself failed: recorded, never counted as a verdict on embedctl
            row = {"id": c.id, "class": c.cls, "command": "", "exit_code": None, "verdict": "HARNESS",
                   "why": f"{type(exc).__name__}: {exc}"}
        print(f"{row['verdict']:7s} {c.cls:9s} {c.id}: {row['why'][:150]}", flush=True)
        return row

    rows += [one(c) for c in runnable if c.serial]  # first: they change shared fixtures (and put them back)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows += list(pool.map(one, [c for c in runnable if not c.serial]))
    carried = []
    if args.rerun:
        fresh = {r["id"] for r in rows}
        carried = [dict(r, carried_over=True) for i, r in earlier.items() if i not in fresh]
        rows += carried
        cases = all_cases()
    order = {c.id: i for i, c in enumerate(cases)}
    rows.sort(key=lambda r: order.get(r["id"], len(order)))
    totals = Counter(r["verdict"] for r in rows)
    per_class: dict[str, Counter] = {}
    for r in rows:
        per_class.setdefault(r["class"], Counter())[r["verdict"]] += 1
    result = {"cases": len(rows), "totals": dict(totals),
              "carried_over": {"from": args.rerun, "rows": len(carried),
                               "note": "GOOD rows of the earlier run, not run again"} if args.rerun else None,
              "per_class": {k: dict(v) for k, v in per_class.items()},
              "wall_s": round(time.time() - t0, 1), "jobs": args.jobs,
              "rules": {"GOOD": "refused with the right exit code, naming the path/key and a fix, no traceback, no "
                        "leftover .tmp, inputs unchanged; or exit 0 on a legitimate input; into a closed pipe: exit 0/141, "
                        "nothing on stderr beyond what it prints with stdout open",
                        "POOR": "wrong exit code, traceback/raw error, message without the path/key or a fix, "
                        "leftover .tmp, legitimate input refused",
                        "BAD": "data changed/deleted outside its place, damaged input accepted, NaN in JSON"},
              "not_good": [r for r in rows if r["verdict"] not in ("GOOD", "SKIPPED", "NOT_RUN")],
              "rows": [{k: r[k] for k in ("id", "class", "command", "exit_code", "verdict", "why", "carried_over")
                        if k in r} for r in rows]}
    from resultfiles import write_result

    write_result("trust_matrix", result, args.out)
    print(json.dumps({"cases": len(rows), "totals": dict(totals)}, indent=None))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def port_in_use() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
