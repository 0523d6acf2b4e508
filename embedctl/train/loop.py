"""`embedctl train`: one loop for every engine (single, ddp, deepspeed), readable top to bottom.

Every rank reads the same global batch, encodes its contiguous slice of queries and documents, gathers
the embeddings (its own slice keeps the gradient) and computes the loss over the global batch; the
engine makes the reduced gradient equal the one-process gradient of that loss.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import warnings
from pathlib import Path

from embedctl.data.batches import BatchStream
from embedctl.errors import EmbedctlError
from embedctl.models.encoder import load_encoder
from embedctl.runinfo import write_run_info
from embedctl.train import checkpoint as ckpt
from embedctl.train.batch_check import check_batches
from embedctl.train.distributed import barrier
from embedctl.train.engines import make_engine
from embedctl.train.evaluation import evaluate, load_eval_set
from embedctl.train.losses import InfoNCELoss, TrainingLoss
from embedctl.train.metrics_log import MetricsLog, progress_info
from embedctl.train.optim import build_optimizer, build_scheduler
from embedctl.train.resume_config import check_resume_config, record_changes
from embedctl.train.run_folder import check_output_dir
from embedctl.train.runtime import autocast_dtype, capture_rng, resolve_device, restore_rng, seed_everything
from embedctl.train.step import grad_cache_step, plain_step, prepare_inputs
from embedctl.util.progress import Progress
from embedctl.util.ranks import RankEnv
from embedctl.util.threads import set_threads


def run_training(loaded) -> dict:
    """Train as configured by ``loaded`` (embedctl.config.LoadedConfig); returns a summary dict."""
    import torch

    cfg = loaded.cfg
    check_config(cfg)
    set_threads(cfg.train.threads)
    check_output_dir(cfg)  # its own folder: never a token cache, batches, an index or an input
    info = RankEnv.from_env()
    device = resolve_device(cfg.train.device, info.local_rank)
    amp_dtype = autocast_dtype(device, cfg.train.precision)
    out_dir = Path(cfg.output.dir)

    # 1. where to start (a fresh run, or a step checkpoint: train.resume); inputs checked before any write
    plan = ckpt.plan_resume(cfg.train.resume, out_dir, cfg.output.overwrite)
    changes = {}  # every training key as the run recorded it, or only those that may change on a resume
    if plan.checkpoint is not None:
        ckpt.verify_checkpoint(plan.checkpoint)  # every file against its sha256, before any is loaded
        changes = check_resume_config(cfg, plan.checkpoint, note=info.is_main)

    stream = BatchStream(cfg.data.path, split_factor=cfg.data.split_factor, shuffle=cfg.data.shuffle,
                         seed=cfg.train.seed, prefetch=cfg.data.prefetch)  # every rank streams the same batches
    model_cfg = cfg.model
    if plan.checkpoint is not None:
        model_cfg = dataclasses.replace(cfg.model, name_or_path=str(plan.checkpoint / "model"))
    check_batches(stream.metadata, cfg.data.path, model_cfg, cfg.train.loss)  # before any write or step
    eval_set = _load_eval_set(cfg, info)
    engine = make_engine(cfg, info, device, amp_dtype)
    barrier()  # every rank has planned before rank 0 touches the folder
    if info.is_main:
        if plan.clear:
            ckpt.clear_previous_run(out_dir)
        if plan.checkpoint is not None:
            record_changes(out_dir, plan.checkpoint, changes)
        write_run_info(out_dir, loaded, "train")

    # 2. model (same seed on every rank: identical initial weights), optimizer, schedule, engine
    seed_everything(cfg.train.seed)
    encoder = load_encoder(model_cfg, device=str(device), train=True)
    encoder.forward_chunk_size = forward_chunk_size(cfg.train.forward_chunk_size, device)
    optimizer = build_optimizer(encoder, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, cfg.train.max_steps)
    engine.setup(encoder, optimizer, scheduler)
    engine.train(True)
    seed_everything(cfg.train.seed + info.rank)  # dropout differs per rank

    # 3. continue a run: optimizer, schedule, RNG and data position
    start = 0
    if plan.checkpoint is not None:
        state = ckpt.load_training_state(plan.checkpoint, engine, info)
        stream.load_state_dict(state["data"])
        start = int(state["step"])

    loss_fn = _loss_fn(cfg, encoder.kind)
    summary = RunSummary(start)
    # 4a. memory planned, not killed: the step's peak estimated; GradCache turned on, or a refusal, if it won't fit
    chunk = _plan_memory(cfg, encoder, stream, info, device, amp_dtype).chunk_size
    log = MetricsLog(out_dir / "metrics.jsonl", enabled=info.is_main, after_step=start)
    skipped_warned = False
    batches = iter(stream)

    # 4. the loop
    # a resumed run counts only the steps it runs, so the rate and the time left stay true
    label = f"train (from step {start})" if start else "train"
    with Progress(cfg.train.max_steps - start, label, unit="steps", enabled=info.is_main) as bar:
        for step in range(start + 1, cfg.train.max_steps + 1):
            t0 = time.perf_counter()
            batch = next(batches)
            inputs = prepare_inputs(batch, encoder.tokenizer, info, device)
            lr = engine.lr()
            if chunk:
                loss, stats = grad_cache_step(engine, loss_fn, inputs, amp_dtype, chunk)
            else:
                loss, stats = plain_step(engine, loss_fn, inputs, amp_dtype)
            check_loss(loss, step, out_dir)  # before the update: a NaN never reaches the weights
            engine.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = max(time.perf_counter() - t0, 1e-9)
            record = {"step": step, "loss": loss, "lr": lr, "examples_per_s": inputs.n_queries / elapsed,
                      "examples": inputs.n_queries, "pairs": stats.rows, "pairs_per_s": stats.rows / elapsed,
                      "step_time_s": elapsed}
            record.update({f"loss/{name}": value for name, value in stats.parts.items()})
            summary.add(record)
            if stats.queries_without_positive:
                record["queries_without_positive"] = stats.queries_without_positive
                if not skipped_warned and info.is_main:
                    warnings.warn(f"step {step}: {stats.queries_without_positive} of {stats.queries} queries have "
                                  "no positive document in their batch and were skipped", stacklevel=1)
                    skipped_warned = True
            # decided from the config, the same on every rank (only rank 0 holds the eval set): every rank
            # enters the phase and its barrier, so the ranks' synchronisation points stay paired
            if cfg.eval.path and _due(step, cfg.eval.every, cfg.train.max_steps):
                record.update(_evaluate(engine, eval_set, cfg, info))
                summary.add_eval(record)
            if step % cfg.train.log_every == 0 or step == cfg.train.max_steps or "eval/nDCG@10" in record:
                log.write(record)
            bar.advance(1, info=progress_info(record))
            if step == cfg.train.max_steps or (cfg.train.save_every and step % cfg.train.save_every == 0):
                _save_checkpoint(out_dir, step, engine, stream.state_dict(), info, cfg.train.keep_checkpoints)

    batches.close()  # stops the prefetch thread

    # 5. the final model
    with engine.gathered_weights():
        if info.is_main:
            _save_final(encoder, out_dir / "final")
        barrier("final model saved")  # no time limit: the other ranks wait for rank 0's save
    engine.close()
    return {"output_dir": str(out_dir), "steps": cfg.train.max_steps, "resumed_from": start or None,
            "is_main": info.is_main, **summary.as_dict(out_dir)}


def _plan_memory(cfg, encoder, stream, info: RankEnv, device, amp_dtype):
    """The memory plan of a step (embedctl.train.memory), the same chunk size on every rank."""
    import torch

    from embedctl.train import memory

    batches = stream.metadata["batches"]
    split = max(1, cfg.data.split_factor)
    shape = memory.StepShape(
        queries=-(-max(b["queries"] for b in batches) // split), documents=-(-max(b["documents"] for b in batches) // split),
        query_length=encoder.model_cfg.query_max_length, doc_length=encoder.model_cfg.doc_max_length,
        world=info.world, local_world=int(os.environ.get("LOCAL_WORLD_SIZE") or info.world))
    available, source = memory.available_bytes(device, cfg.train.max_memory_gb, shape.local_world)
    plan, refused = None, None
    try:
        plan = memory.plan_step_memory(
            shape, memory.ModelShape.of(encoder), resident=memory.resident_bytes(device), available=available,
            limit_source=source, configured_chunk=cfg.train.grad_cache.chunk_size, engine=cfg.engine.name,
            zero_stage=cfg.engine.zero_stage, loss_chunk=cfg.train.loss_chunk_size, amp=amp_dtype is not None)
    except EmbedctlError as err:
        refused = err
    if info.world > 1 and torch.distributed.is_initialized():  # every rank steps the same way, or none steps
        on = device if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
        mine = 1 << 30 if plan is None or not plan.chunk_size else plan.chunk_size
        votes = torch.tensor([1 if refused else 0, 1 if plan is not None and plan.chunk_size else 0, -mine],
                             dtype=torch.long, device=on)
        torch.distributed.all_reduce(votes, op=torch.distributed.ReduceOp.MAX)  # -max(-x) = min(x)
        if votes[0] and refused is None:
            raise EmbedctlError("memory plan: another rank's step does not fit its memory (its message says why)",
                                hint="the refusing rank printed why and what fits (train.grad_cache.chunk_size, train.max_memory_gb)", exit_code=2)
        if plan is not None and votes[1] and plan.chunk_size != int(-votes[2]):
            plan.chunk_size = int(-votes[2])
            plan.note = (plan.note or "memory plan:") + f" (the ranks agreed on train.grad_cache.chunk_size={plan.chunk_size})"
    if refused is not None:
        raise refused
    if info.is_main:
        print(plan.note or f"memory plan: estimated step peak {plan.estimate.describe()} per process, "
              f"{plan.limit / memory.GIB:.2f} GiB {plan.limit_source}", file=sys.stderr, flush=True)
    return plan


def check_loss(loss: float, step: int, out_dir: Path) -> None:
    """Stop the run (exit 1) when the loss is NaN or infinite: every later step would train on garbage and
    every later checkpoint would hold it. The loss is the global batch's, the same on every rank, so every
    rank stops at the same step. Nothing is marked complete; the checkpoints already written stay."""
    if math.isfinite(loss):
        return
    kept = ckpt.list_checkpoints(out_dir)
    where = f"the last checkpoint, {kept[-1]}, is kept" if kept else "no checkpoint was written before it"
    raise EmbedctlError(
        f"step {step}: the loss is {loss} (not a finite number); training stopped before applying that step, "
        f"no final model was written; {where}",
        hint="lower optim.lr (or raise optim.warmup_steps), raise train.temperature, keep train.grad_clip set, "
             "or check the batches (`embedctl data inspect --verify DATA`); then resume with train.resume=auto "
             "or start over in a new output.dir")


def forward_chunk_size(configured: int | None, device) -> int | None:
    """``train.forward_chunk_size``, or its default: 8 texts per pass on CPU (cache-sized), one pass elsewhere."""
    if configured is not None:
        return configured
    return 8 if device.type == "cpu" else None


def _loss_fn(cfg, kind: str):
    """``train.loss`` as configured (kind: the model's own, which a checkpoint's card decides)."""
    t = cfg.train
    infonce = InfoNCELoss(t.temperature, t.in_batch_negatives, t.loss_chunk_size,
                          cfg.model.matryoshka_dims if kind == "biencoder" else (), cfg.model.normalize, t.positives)
    if t.loss == "infonce":
        return infonce
    return TrainingLoss(t.loss, infonce, distill_weight=t.distill_weight,
                        student_temperature=t.distill_temperature, teacher_temperature=t.teacher_temperature)


class RunSummary:
    """What `embedctl train` reports at the end: steps run, time, examples/s, first and last loss, eval."""

    def __init__(self, start: int):
        self.start, self.steps, self.examples, self.time_s = start, 0, 0, 0.0
        self.first_loss = self.last_loss = None
        self.eval: dict = {}

    def add(self, record: dict) -> None:
        self.steps += 1
        self.examples += record["examples"]
        self.time_s += record["step_time_s"]
        self.first_loss = record["loss"] if self.first_loss is None else self.first_loss
        self.last_loss = record["loss"]

    def add_eval(self, record: dict) -> None:
        self.eval = {k: v for k, v in record.items() if k.startswith("eval/")} or self.eval

    def as_dict(self, out_dir: Path) -> dict:
        return {"steps_run": self.steps, "train_time_s": self.time_s, "examples": self.examples,
                "examples_per_s": self.examples / self.time_s if self.time_s else 0.0,
                "first_loss": self.first_loss, "last_loss": self.last_loss, "eval": self.eval,
                "metrics_path": str(out_dir / "metrics.jsonl"), "final_path": str(out_dir / "final")}


def check_config(cfg) -> None:
    if not cfg.data.path:
        raise EmbedctlError("data.path is not set: `embedctl train` needs pre-batched data",
                            hint="run `embedctl prebatch` first, then pass data.path=FOLDER (or --data FOLDER)")
    if cfg.train.max_steps < 1:
        raise EmbedctlError(f"train.max_steps={cfg.train.max_steps}: must be at least 1")


def _due(step: int, every: int, max_steps: int) -> bool:
    return step == max_steps or (every > 0 and step % every == 0)


def _load_eval_set(cfg, info: RankEnv):
    if not cfg.eval.path:
        return None

    zero3 = cfg.engine.name == "deepspeed" and cfg.engine.zero_stage == 3
    return load_eval_set(cfg.eval) if info.is_main or zero3 else None


def _evaluate(engine, eval_set, cfg, info: RankEnv) -> dict:
    """Rank 0 evaluates (every rank under ZeRO-3, whose weights are partitioned); RNG left untouched."""
    metrics: dict = {}
    zero3 = cfg.engine.name == "deepspeed" and cfg.engine.zero_stage == 3
    if info.is_main or zero3:
        rng = capture_rng()
        t0 = time.perf_counter()
        metrics = evaluate(engine.encoder, eval_set, cfg.eval.batch_size)
        metrics["eval_time_s"] = time.perf_counter() - t0
        restore_rng(rng)
    barrier("evaluation done")  # no time limit (distributed.barrier): evaluation may outlast engine.timeout_s
    return metrics if info.is_main else {}


def _save_checkpoint(out_dir: Path, step: int, engine, stream_state: dict, info: RankEnv, keep) -> None:
    """ckpt.save_checkpoint; a save that fails (a full disk) leaves no half-written ``.step_*.tmp`` folder."""
    try:
        ckpt.save_checkpoint(out_dir, step, engine, stream_state, info, keep)
    except BaseException:
        if info.is_main:
            _remove_partial(ckpt.step_dir(out_dir, step).parent / f".{ckpt.step_dir(out_dir, step).name}.tmp")
        raise


def _remove_partial(tmp: Path) -> None:
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


def _save_final(encoder, final: Path) -> None:
    import shutil

    tmp = final.parent / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        encoder.save(str(tmp))
    except BaseException:  # a full disk: no half-written final model left behind
        _remove_partial(tmp)
        raise
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
