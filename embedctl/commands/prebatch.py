"""`embedctl prebatch`: token cache + relevance labels -> pre-batched folder."""

from __future__ import annotations

from typing import Any

from embedctl.prebatch.build import run_prebatch
from embedctl.util.fs import refuse_output_in_inputs, writer_lock
from embedctl.util.ranks import Ranks
from embedctl.util.threads import set_threads


def run(loaded: Any) -> dict:
    """Write the pre-batched folder (one writer at a time: embedctl.util.lock); returns the metadata written.

    An output that is one of the inputs or inside one (e.g. the token cache) is refused before any work.
    """
    p = loaded.cfg.prebatch
    set_threads(p.threads)
    if not p.output:
        return run_prebatch(loaded)  # says which flags are missing
    refuse_output_in_inputs(p.output, "--output", {"--input": p.input, "--qrels": p.qrels})
    # torchrun / srun: the ranks share the mining (rank 0 writes)
    timing = loaded.cfg.ranks  # the ranks' timeouts
    with Ranks.from_env("prebatch", dead_s=timing.dead_s, wait_s=timing.wait_s) as ranks:
        if not ranks.is_lead:
            return run_prebatch(loaded, ranks=ranks)
        with writer_lock(p.output, "batch folder"):
            return run_prebatch(loaded, ranks=ranks)
