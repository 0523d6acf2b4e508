from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from embedctl.config.fields import at_least, between, choice, default_dict, one_of, positive


@dataclass
class GradCacheConfig:
    """Cached contrastive loss (GradCache): batch size independent of memory."""

    chunk_size: Optional[int] = positive(None)
    """Encode the batch in chunks of this many texts without graph, then re-encode each chunk with graph; null disables."""


@dataclass
class TrainConfig:
    """The training loop."""

    max_steps: int = positive(100)
    """Optimizer steps to run."""
    seed: int = at_least(0, 42)
    """Seed for model init, data order and dropout."""
    temperature: float = positive(0.02)
    """InfoNCE temperature (scores are divided by it)."""
    positives: str = choice("each", "each", "first", "any")
    """InfoNCE rows of a query with several positives in a batch: `each` (a row per positive, the query's other positives masked: Arctic Embed's expansion), `first` (one row, its first positive; others masked: one positive per example, as colbert-ai's and PyLate's triples) or `any` (one row whose numerator holds all its positives)."""
    in_batch_negatives: bool = True
    """Treat unlabelled (relevance 0) query-document pairs of a batch as negatives (InfoNCE), and as candidates of the distillation softmax."""
    loss: str = choice("infonce", "infonce", "distill", "infonce+distill")
    """`infonce` (contrastive), `distill` (KL divergence between the teacher's and the student's softmax over each query's documents; needs batches made with prebatch.teacher) or `infonce+distill` (their sum, the KL weighted by train.distill_weight)."""
    distill_weight: float = at_least(0, 1.0)
    """Weight of the KL term in `infonce+distill`."""
    distill_temperature: float = positive(1.0)
    """Distillation: the student's scores are divided by it before the softmax (1.0 suits ColBERT's MaxSim sums; a cosine bi-encoder wants ~0.05)."""
    teacher_temperature: float = positive(1.0)
    """Distillation: the teacher's scores (TEACHER_SCORE) are divided by it before the softmax (a cosine bi-encoder teacher wants ~0.05)."""
    resume: str = "auto"
    """`auto` (resume from the newest checkpoint in output.dir if any), `must`, `never`, or a step checkpoint folder."""
    save_every: int = at_least(0, 500)
    """Save a step checkpoint every this many steps (and always at the end); 0 saves only at the end."""
    keep_checkpoints: Optional[int] = positive(None)
    """Keep only the newest N step checkpoints; null keeps all."""
    log_every: int = positive(1)
    """Append to metrics.jsonl every this many steps."""
    grad_clip: Optional[float] = positive(1.0)
    """Clip the global gradient norm to this value; null disables."""
    precision: str = choice("fp32", "fp32", "bf16", "fp16")
    """Autocast precision; bf16/fp16 fall back to fp32 (with a warning) where the device does not support them."""
    grad_cache: GradCacheConfig = field(default_factory=GradCacheConfig)
    """GradCache settings."""
    loss_chunk_size: Optional[int] = positive(None)
    """Compute the loss over rows in chunks of this size to bound memory on huge batches; null computes it at once."""
    forward_chunk_size: Optional[int] = positive(None)
    """Texts per encoder pass within a step, every pass keeping its graph (the same loss and gradients as one pass, not GradCache's re-encoding); null: 8 on CPU, where small passes stay in cache (a MiniLM ColBERT step of 16 queries and 46 documents of 180 tokens took 6.25 s instead of 7.88 s on one thread), one pass on GPU."""
    device: str = "auto"
    """`auto` (cuda when present), `cpu` or `cuda`."""
    threads: Optional[int] = positive(None)
    """CPU threads of torch in each training process (torch.set_num_threads); null leaves torch's default (one per core). On a shared machine set it to the cores you may use: oversubscribed threads slowed steps 10-20x."""
    max_memory_gb: Optional[float] = positive(None)
    """Memory (GiB) one training step may use; null: what the machine has available (CPU: psutil's available memory; GPU: the device's free memory). Before the first step the peak is estimated; a step that would not fit turns on GradCache (train.grad_cache.chunk_size) with a note, or is refused naming the keys that fit."""

    RESUME_WORDS = ("auto", "must", "never")

    def problems(self) -> list[tuple[str, str]]:
        """train.resume is a word or a step checkpoint folder: a bare word that is neither (`sometimes`, `yes`,
        `Auto`) is a slip, refused here (`config validate` included) rather than read as a folder name. A value
        that looks like a path (a `/`, a `.`, a URL) is checked by train, where the run's files are."""
        import os

        value = self.resume
        if value in self.RESUME_WORDS or "/" in value or os.sep in value or "." in value or "://" in value:
            return []
        if os.path.isdir(value):  # a checkpoint folder in the current folder, named bare
            return []
        return [("resume", f"expected `auto`, `must`, `never` or a step checkpoint folder (a path such as "
                           f"runs/x/checkpoints/step_00000100), got {value!r}, which is neither a word of these "
                           f"nor a folder here; fix: set train.resume=auto (or must/never), or give the "
                           f"checkpoint's path")]


@dataclass
class OptimConfig:
    """AdamW and the learning-rate schedule."""

    lr: float = positive(2e-5)
    """Peak learning rate."""
    weight_decay: float = at_least(0, 0.01)
    """AdamW weight decay (not applied to biases and norms)."""
    betas: list[float] = between(0, 1, [0.9, 0.999])
    """AdamW betas."""
    eps: float = positive(1e-8)
    """AdamW epsilon."""
    fused: bool = True
    """Use torch's fused AdamW kernel (CPU and CUDA; ~3x faster optimizer step on CPU); false uses the foreach implementation."""
    warmup_steps: int = at_least(0, 0)
    """Linear warmup steps from 0 to optim.lr."""
    schedule: str = choice("linear", "linear", "cosine", "constant")
    """Decay after warmup: `linear` or `cosine` to 0 at train.max_steps, or `constant`."""


@dataclass
class EngineConfig:
    """How the loop runs across processes."""

    name: str = choice("single", "single", "ddp", "deepspeed")
    """`single` (one process), `ddp` (torch.distributed, launch with torchrun) or `deepspeed`."""
    zero_stage: int = one_of(1, 0, 1, 2, 3)
    """DeepSpeed ZeRO stage 0-3."""
    backend: Optional[str] = None
    """torch.distributed backend; null picks nccl with CUDA, gloo otherwise."""
    timeout_s: float = positive(1800.0)
    """Seconds one collective operation (gradient all-reduce, embedding all-gather) may wait for the other ranks before the run fails; the waits for rank 0's own phases (evaluation, saving) have no limit."""
    deepspeed: dict[str, Any] = default_dict()
    """Extra DeepSpeed config entries merged over the generated one (e.g. offload settings)."""


@dataclass
class EvalConfig:
    """Evaluation during training on a BEIR-format folder."""

    path: Optional[str] = None
    """BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) to evaluate on; null disables."""
    split: str = "test"
    """Which qrels/<split>.tsv to use."""
    every: int = at_least(0, 0)
    """Evaluate every this many steps (and at the end); 0 evaluates only at the end when eval.path is set."""
    max_queries: Optional[int] = positive(None)
    """Evaluate on at most this many queries (the first ones, in file order)."""
    batch_size: int = positive(64)
    """Encoding batch size."""
