"""`embedctl train`: run the training loop, then summarise it and say where the outputs are."""

from __future__ import annotations

import contextlib
from typing import Any

from embedctl.train.loop import run_training
from embedctl.util.console import print_where, stderr_console
from embedctl.util.fs import writer_lock
from embedctl.util.ranks import RankEnv


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The closing summary: steps, time, examples/s, first and last loss, eval metrics when any."""
    steps = summary.get("steps_run", 0)
    resumed = f" (resumed from step {summary['resumed_from']})" if summary.get("resumed_from") else ""
    lines = [f"trained {steps} step{'s' if steps != 1 else ''}{resumed} in {summary.get('train_time_s', 0.0):.1f} s, "
             f"{summary.get('examples_per_s', 0.0):.1f} examples/s ({summary.get('examples', 0):,} queries)"]
    if summary.get("first_loss") is not None:
        lines.append(f"loss: first {summary['first_loss']:.4f}, last {summary['last_loss']:.4f}")
    metrics = {k.removeprefix("eval/"): v for k, v in (summary.get("eval") or {}).items() if k != "eval/eval_time_s"}
    if metrics:
        lines.append("eval: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    return lines


def run(loaded: Any) -> dict[str, Any]:
    """Train as configured; rank 0 prints the summary and where metrics.jsonl and the final model are
    (stderr). Returns the loop's summary."""
    main = RankEnv.from_env().is_main  # one writer per run folder: rank 0 holds its lock (embedctl.util.lock)
    with writer_lock(loaded.cfg.output.dir, "training run") if main else contextlib.nullcontext():
        summary = run_training(loaded)
    if summary.get("is_main", True):
        console = stderr_console()
        for line in summary_lines(summary):
            console.print(line, markup=False)
        print_where("metrics", summary.get("metrics_path", summary["output_dir"] + "/metrics.jsonl"))
        print_where("final model", summary.get("final_path", summary["output_dir"] + "/final"))
    return summary
