"""`embedctl train`: contrastive training (runner: embedctl.commands.train)."""

from __future__ import annotations

from typing import Optional

import typer

from embedctl.cli.common import CONFIG_HELP, handle_errors, load


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@handle_errors
def train(
    args: Optional[list[str]] = typer.Argument(None, help=CONFIG_HELP),
    data: Optional[str] = typer.Option(None, "--data", help="data.path: pre-batched training data."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="output.dir: run folder."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="train.max_steps."),
    resume: Optional[str] = typer.Option(None, "--resume", help="train.resume: auto | must | never | PATH."),
    local_rank: Optional[int] = typer.Option(None, "--local_rank", "--local-rank", hidden=True,
                                             help="Set by the deepspeed launcher; LOCAL_RANK is read instead."),
) -> None:
    """Train a bi-encoder or ColBERT model (single process, torchrun DDP or DeepSpeed)."""
    loaded = load(args, {"data.path": data, "output.dir": output, "train.max_steps": max_steps, "train.resume": resume})
    from embedctl.commands import train as command  # here, not at the top: see embedctl.cli.common

    command.run(loaded)
