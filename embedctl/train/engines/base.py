"""The engine interface the loop talks to, and the single-process engine.

An engine owns the wrapped model, the optimizer step and the gradient scale. Every engine computes the
same thing: the gradient of the loss over the *global* batch. Ranks each back-propagate the global loss
through their own slice only, so the true gradient is the **sum** of the rank-local gradients; DDP and
DeepSpeed average across ranks, so their engines multiply the loss by the world size before backward.
"""

from __future__ import annotations

import contextlib

import torch

from embedctl.util.ranks import RankEnv


class DualEncoder(torch.nn.Module):
    """One module call encodes queries and documents (DDP and DeepSpeed expect one forward per backward).

    forward(q_ids, q_att, d_ids, d_att) -> (query EncoderOutput | None, document EncoderOutput | None);
    pass None for a side to skip it (GradCache encodes one side's chunk at a time).
    """

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, q_ids=None, q_att=None, d_ids=None, d_att=None):
        q_words = d_words = None
        if q_ids is not None and d_ids is not None:  # one word-embedding lookup (and gradient) for both sides
            q_words, d_words = self.encoder.word_embeddings(q_ids, d_ids)
        q = self.encoder(q_ids, q_att, side="query", words=q_words) if q_ids is not None else None
        d = self.encoder(d_ids, d_att, side="document", words=d_words) if d_ids is not None else None
        return q, d


class SingleEngine:
    """One process, CPU or one GPU. Also the base class of the distributed engines."""

    name = "single"

    def __init__(self, info: RankEnv, device: torch.device, grad_clip: float | None, amp_dtype=None):
        self.info, self.device, self.grad_clip = info, device, grad_clip
        self.scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
        self.encoder = self.module = self.optimizer = self.scheduler = None

    @property
    def world_size(self) -> int:
        return self.info.world

    def setup(self, encoder, optimizer, scheduler) -> None:
        self.encoder, self.optimizer, self.scheduler = encoder, optimizer, scheduler
        self.module = DualEncoder(encoder)

    def forward(self, q_ids, q_att, d_ids, d_att):
        return self.module(q_ids, q_att, d_ids, d_att)

    @contextlib.contextmanager
    def sync(self, enabled: bool):
        """Context for forward+backward; ``enabled=False`` defers cross-rank gradient sync (DDP no_sync)."""
        yield

    def backward(self, loss: torch.Tensor) -> None:
        loss = loss * self.grad_scale()
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def grad_scale(self) -> float:
        """Factor applied to the loss before backward so that reduced gradients equal the global gradient."""
        return 1.0

    def step(self) -> None:
        """Clip, optimizer step, scheduler step, zero grads."""
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.encoder.parameters(), self.grad_clip)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ---- checkpoint hooks: model weights are saved through encoder.save by rank 0 -----------------
    def optimizer_state(self) -> dict | None:
        """This rank's optimizer state to save (None: this rank saves none)."""
        return self.optimizer.state_dict() if self.info.is_main else None

    def load_optimizer_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)

    def optimizer_state_is_per_rank(self) -> bool:
        return False

    def gathered_weights(self):
        """Context in which ``self.encoder``'s full weights are materialised (ZeRO-3 partitions them)."""
        return contextlib.nullcontext()

    def train(self, mode: bool = True) -> None:
        self.module.train(mode)

    def close(self) -> None:
        pass
