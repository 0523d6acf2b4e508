"""Encode backends: how an :class:`~embedctl.models.encoder.Encoder` runs inference, chosen once per run
(``model.encoder_backend``), as the PLAID backends are (embedctl/index/plaid/backends.py).

- ``reference``: the encoder's own fp32 eager torch forward, the exact path every other one is checked against.
- ``onnx``: the same computation (backbone + projection or pooling + normalisation; masking stays in torch)
  exported once per model into the cache (:mod:`embedctl.models.onnx_graph`) and run by ONNX Runtime,
  fp32, with every graph optimisation. Per-vector cosine >= 0.999 against the reference on SciFact
  documents and queries (tests/models/test_encode_backends.py, bench/bench_encoder.py).
- ``onnx-int8``: that graph with int8 dynamic quantisation (per-channel uint8 weights). It fails the
  fidelity bound (:data:`OFF_BY_DEFAULT` says by how much), so ``auto`` never picks it; asked for, it runs
  and says why it is off by default.
- ``bf16``: the reference's own torch forward under CPU autocast to bfloat16 (:class:`Bf16Runner`), where the
  CPU multiplies bfloat16 natively (AVX512_BF16 or AMX). Quiet 2-core AVX-512 BF16 EPYC (Zen 5), minilm as
  ColBERT: SciFact documents (doc_max_length 180, 2 threads) at 2.5x the reference's docs/s (93 vs 37), a
  32-token query in 6.2 ms against 10.7 (1 thread; 5.4 vs 8.4 with 2; 4.8 and 3.9-4.0 ms since the weights
  are pre-cast and query/key/value fused: :class:`Bf16Runner`; 3.9 and 3.2 ms with the weights packed by
  oneDNN: :class:`PackedBf16Linear`; 0.93x that again, on 1 and 2 threads, with the attention on
  :mod:`embedctl.models.bf16_attention`, bench/bf16_attention.py), per-vector cosine
  >= 0.9998 (mean 0.99997); no export and no per-process cost. bench/bench_encoder.py has the fidelity and
  nDCG figures.

``auto`` (:data:`AUTO`) is ``bf16`` where it can run, else ``onnx``, in a process that will encode at least
:data:`AUTO_MIN_TEXTS` texts, and the reference otherwise (small test indexes and one-query searches stay
exact). Measured with bench/bench_encoder.py on a 2-core AVX-512 EPYC host shared with
other jobs (load average 13-17: bench/results/x86_64-avx512bf16-2c/encoder_loaded.json), paths interleaved:
fp32 ONNX Runtime encodes SciFact documents (doc_max_length 180, 2 threads) at 1.84x today's docs/s
(57.2 vs 31.1) and a 32-token query at 0.58x the reference's p50 with one thread (6.5 vs 11.2 ms), with
per-vector cosine >= 0.9999997 and nDCG@10 equal; a PLAID build of 2,000 documents took 0.70x today's
wall. Its per-process cost, in fresh processes: ``load_encoder`` 0.23 s more than the reference's with the
graph cached (1.4 s more in an earlier run on the same host, more loaded), 1.15 s more when the graph is
exported first (once per model). That is paid back after ~16-80 documents or ~50-280 one-query encodes;
1,000 texts leaves a margin for a loaded host, and keeps a one-query search (0.2-1.4 s to save ~5 ms) on
the reference. Training's evaluation never takes onnx (its weights change between evaluations, so every
evaluation would export again); a large eval set takes bf16 where it can run (:func:`bulk_inference`). Inference only: training's forward and backward always run the torch
model, and a runner whose weights changed since its export (an optimizer step) is re-exported before use.
One query per call encodes fastest with one thread on the 2-core hosts measured (onnx 6.5 ms with one
thread, 7.1 ms with two; the reference likewise on a quiet host): a session takes torch's thread count when
it opens, so a one-query search is best run with ``search.threads=1`` there.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F

from embedctl.errors import ConfigError
from embedctl.models import bf16_attention, bf16_linear, bf16_norm
from embedctl.util.console import stderr_console

BACKEND_NAMES = ("auto", "reference", "onnx", "onnx-int8", "bf16")
FAST_BACKENDS = ("onnx", "onnx-int8")  # the ONNX Runtime paths (an exported graph)

# What ``auto`` stands for: the fast path in a process that encodes at least AUTO_MIN_TEXTS texts (an index
# build or prebatch mining of that many, a search of a queries file that long, a server: LONG_LIVED), where
# its per-process cost (and, the first time a model is seen, its export) is paid back; the reference
# otherwise (a one-query search, a small index, the Python API's Encoder; training's evaluation takes bf16
# alone for a large eval set: bulk_inference). The
# module docstring has the figures behind both numbers.
AUTO = {"bulk": ("bf16", "onnx"), "few": ("reference",)}  # the first that can run here
AUTO_MIN_TEXTS = 1000
LONG_LIVED = 1 << 62  # the ``texts`` of a process with no end in sight (a server)

# Why a backend is off by default: measured against the reference (bench/bench_encoder.py, SciFact).
OFF_BY_DEFAULT = {
    "onnx-int8": ("int8 dynamic quantisation fails the fidelity bound: on SciFact its per-vector cosine vs the "
                  "fp32 reference is 0.92 at worst, 0.988 on average (bound: >= 0.999), and nDCG@10 of "
                  "exhaustive MaxSim on a 300-document slice drops by 0.040 (bound: 0.002), for 1.25x the "
                  "documents/s of fp32 onnx on a 2-core AVX-512 host; use model.encoder_backend=onnx (fp32) or "
                  "reference"),
}


def unavailable_reason(name: str, encoder: Any) -> str | None:
    """Why backend ``name`` cannot run ``encoder`` here, or None when it can."""
    if name == "bf16":
        return _bf16_unavailable(encoder)
    if name not in FAST_BACKENDS:
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime is not installed (pip install onnxruntime)"
    if encoder.device.type != "cpu":
        return f"the ONNX backends run on the CPU, and the encoder is on {encoder.device}"
    from embedctl.models.native_bert import NativeBert

    if not isinstance(encoder.backbone, NativeBert):
        return ("the ONNX export covers embedctl's native BERT forward only, and this model runs on "
                "transformers (not a standard BERT, or model.native_bert=false)")
    if encoder.kind == "biencoder" and encoder.model_cfg.pooling != "mean":
        return f"the ONNX export covers mean pooling and ColBERT, not pooling={encoder.model_cfg.pooling!r}"
    return None


def resolve_backend(name: str, texts: int = 0, encoder: Any = None) -> str:
    """The backend ``name`` stands for; ConfigError for an unknown name. ``auto``: :data:`AUTO` of the
    workload, bulk when this process will encode at least :data:`AUTO_MIN_TEXTS` ``texts``; the reference
    where that backend cannot run ``encoder`` here (None: not checked)."""
    if name not in BACKEND_NAMES:
        raise ConfigError([f"`model.encoder_backend` = {name!r}: expected one of {', '.join(BACKEND_NAMES)}; "
                           "use model.encoder_backend=auto"])
    if name != "auto":
        return name
    for chosen in AUTO["bulk" if texts >= AUTO_MIN_TEXTS else "few"]:
        if chosen == "reference" or encoder is None or unavailable_reason(chosen, encoder) is None:
            return chosen
    return "reference"


def make_runner(name: str, encoder: Any, warn: bool = True, texts: int = 0) -> Any | None:
    """The runner of backend ``name`` for ``encoder`` (None for the reference); ConfigError naming the key
    when it cannot run here (``auto`` never fails: it falls back to the reference). ``warn``: say on stderr
    why a backend that is off by default is so. ``texts``: how many texts this process will encode (``auto``)."""
    resolved = resolve_backend(name, texts, encoder)
    if resolved == "reference":
        return None
    reason = unavailable_reason(resolved, encoder)
    if reason is not None:
        raise ConfigError([f"`model.encoder_backend` = {name}: {reason}; use model.encoder_backend=reference "
                           "(or auto)"])
    if warn and resolved in OFF_BY_DEFAULT:
        stderr_console().print(f"warning: model.encoder_backend={resolved} is off by default: "
                               f"{OFF_BY_DEFAULT[resolved]}", markup=False)
    if resolved == "bf16":
        return Bf16Runner(encoder)
    return OnnxRunner(encoder, quantized=resolved == "onnx-int8")


@contextlib.contextmanager
def bulk_inference(encoder: Any, texts: int):
    """Within it, ``encoder`` (left at ``auto`` and on the reference) encodes on ``bf16`` when ``texts`` make
    bulk work and bf16 can run here: training's evaluation, whose weights change between evaluations, so
    ``onnx`` would export again each time while bf16 runs the live weights. Elsewhere nothing changes."""
    swap = (encoder.backend_asked == "auto" and encoder._runner is None and texts >= AUTO_MIN_TEXTS
            and _bf16_unavailable(encoder) is None)
    if not swap:
        yield encoder.backend_name
        return
    encoder._runner, encoder.backend_name = Bf16Runner(encoder), "bf16"
    try:
        yield "bf16"
    finally:
        encoder._runner, encoder.backend_name = None, "reference"


def threads_in_bits(encoder: Any) -> bool:
    """Whether ``encoder``'s vectors depend on torch's thread count: the bf16 backend on a CPU with AMX tiles,
    where oneDNN splits the sums of some bfloat16 products across threads. Measured at stop 49 on the 16-core
    AMX Xeon of the device machine (docs/scale.md): the feed-forward's 1536 -> 384 product of 32, 180, 720, 1440
    or 2880 rows gave other bits on some of 1, 2, 4, 8, 16 threads (360 and 5760 rows did not), and a PLAID
    build of SciFact on 16 threads agreed with one on 2 in 98.7% of its codes. On AVX512-BF16 without AMX the
    same products gave the same bits on 1-16 threads, and the bf16 and reference encoders the same vectors on 1
    and 2 threads. The reference's float32 products on AMX CPUs were not measured, so nothing is recorded
    for them."""
    if getattr(encoder, "backend_name", None) != "bf16":
        return False
    import torch.cpu

    return bool(torch.cpu._is_amx_tile_supported())


def _bf16_unavailable(encoder: Any) -> str | None:
    if encoder.device.type != "cpu":
        return f"the bf16 backend is CPU autocast, and the encoder is on {encoder.device}"
    import torch.cpu

    if not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        return ("this CPU has no native bfloat16 arithmetic (AVX512_BF16 or AMX): emulated, bf16 is slower than "
                "fp32 here")
    return None


class Bf16Runner:
    """The encoder's own torch forward under CPU autocast to bfloat16 (matrix products in bf16 with fp32
    accumulation, on the CPU's AVX512_BF16 / AMX instructions); the head (projection or pooling, normalisation)
    runs in fp32 on the backbone's states. No export and no per-process cost, and it follows training's weight
    updates as they happen. ``[B, L]`` ids and mask -> embeddings before masking, as :meth:`Encoder._head`.

    The forward runs on a copy of the backbone whose Linear weights and biases are already bfloat16 (every
    other parameter shared with the encoder): autocast would otherwise cast them again on every call, ~1.3 ms
    of a 5.8 ms 32-token query on one thread (4.5 ms pre-cast, the same bits: autocast's cast of an fp32
    weight is the pre-cast weight). In that copy a sequence of up to 512 tokens attends on embedctl's attention
    kernel (native_bert.FusedQKVAttention; within a bfloat16 rounding of the SDPA that autocast runs, so the
    copy gives autocast's bits with it switched off). The copy is made again when training has changed a
    weight since (:class:`WeightsVersion`)."""

    name = "bf16"

    def __init__(self, encoder: Any):
        self.encoder = encoder
        self._weights = WeightsVersion(encoder)
        self._cast = _bf16_linears(encoder.backbone)  # now, not racing on the first call of two threads
        self._stack = Bf16Stack(self._cast)

    def _backbone(self) -> torch.nn.Module:
        if self._weights.changed():
            self._cast = _bf16_linears(self.encoder.backbone)
            self._stack = Bf16Stack(self._cast)
        return self._cast

    # token rows per forward at most: a larger batch runs in slices of whole sequences (documents: 16 of 180
    # tokens), so that each product's output stays near the cache (a SciFact build's encoding 0.95x at 32
    # documents a batch on 2 AMX cores; 4 a slice lost to per-call costs). Rows are independent: the same vectors
    # up to the products' rounding (16 SciFact documents a slice gave the bits of 32; oneDNN may block a product
    # of a few rows otherwise, within the backend's bound)
    slice_tokens = 3072

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        rows = max(1, self.slice_tokens // max(1, int(input_ids.shape[1]))) if input_ids.dim() == 2 else 0
        if 0 < rows < input_ids.shape[0] and not torch.is_grad_enabled():
            return torch.cat([self(input_ids[lo:lo + rows], None if attention_mask is None else
                                   attention_mask[lo:lo + rows]) for lo in range(0, int(input_ids.shape[0]), rows)])
        backbone = self._backbone()
        hidden = self._stack(input_ids, attention_mask)  # the same bits, without the module calls, where it can
        if hidden is None:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.encoder._head(hidden.float(), attention_mask)


class Bf16Stack:
    """The bf16 twin of a native BERT (every projection a :class:`PackedBf16Linear`, every feed-forward's first
    one a fused :class:`PackedBf16GeluLinear`, attention on embedctl's kernel) run layer by layer with the
    torch calls its modules make, without their ``nn.Module`` calls and autocast's dispatch: the twin's output
    bit for bit with ``norm_kernel`` off (tests/models/test_encode_backends.py), a 32-token query's encoding in
    0.92x the time on one thread and 0.90x on two (bench/results/*/bf16_stack.json; that forward is ~70 module
    calls around 24 matrix products of 32 rows; a batch of documents, dominated by its products, 1.02x). The key
    mask is made once for the six layers, not once per layer. With ``norm_kernel`` on (the default) each residual
    LayerNorm and the cast after it run as one pass (:mod:`embedctl.models.bf16_norm`: within a few float32 ulps
    of torch's ops, so no longer the twin's bits; bench/bf16_attention.py --fusion norm). ``__call__`` answers
    None where the twin is anything else, or its attention kernel or fused GELU is switched off, or the kernel
    does not apply to the input, or gradients are on, or ``enabled`` is False (the caller then runs the twin's
    modules under autocast: bench/bf16_attention.py --fusion stack)."""

    def __init__(self, twin: torch.nn.Module):
        from embedctl.models.native_bert import FusedQKVAttention, NativeBert

        self.twin, self.enabled = twin, True
        # the residual LayerNorms on embedctl's one-pass kernel (bf16_norm): within a few float32 ulps of torch's
        # three passes, not their bits; False: torch's ops, and the stack then gives the twin's output bit for bit
        self.norm_kernel = True
        layers = list(twin.encoder.layer) if isinstance(twin, NativeBert) else []
        # a twin the kernel can take: every layer packed, the GELU fused, a head size the kernel has; else no plan
        runs = bool(layers) and all(
            isinstance(layer.attention.self, FusedQKVAttention)
            and isinstance(layer.attention.self.qkv, PackedBf16Linear)
            and isinstance(layer.attention.output.dense, PackedBf16Linear)
            and isinstance(layer.intermediate, PackedBf16GeluLinear)
            and isinstance(layer.output.dense, PackedBf16Linear) for layer in layers) and \
            layers[0].attention.self.qkv.out_features // (3 * layers[0].attention.self.heads) in \
            bf16_attention.HEAD_DIMS
        # each layer's tensors looked up once (a submodule attribute goes through nn.Module.__getattr__: ~150
        # lookups a query); the LayerNorms' parameters are the backbone's own, so training's updates show
        self.plan = [(layer.attention.self, layer.intermediate, layer.attention.self.qkv,
                      _norm_args(layer.attention.output), layer.attention.output.dense, _norm_args(layer.output),
                      layer.output.dense) for layer in layers] if runs else []
        # the LayerNorms' one shape where the one-pass kernel takes every layer's parameters, else None (checked
        # once; each forward checks its residual once, not in each of its twelve calls: ~15 us a check, ~0.17 ms of
        # a query's encoding)
        norms = [norm for _, _, _, n1, _, n2, _ in self.plan for norm in (n1, n2)]
        shapes = {tuple(norm[0]) for norm in norms}
        self.norm_shape = shapes.pop() if len(shapes) == 1 and all(map(bf16_norm.norm_applies, norms)) else None

    def applies(self, input_ids: torch.Tensor) -> bool:
        if not (self.enabled and self.plan) or self.twin.training or torch.is_grad_enabled() or \
                input_ids.dim() != 2 or input_ids.device.type != "cpu":
            return False  # with gradients on, the modules' attention keeps SDPA (the kernel has no backward)
        if not (1 <= input_ids.shape[1] <= bf16_attention.MAX_LEN and bf16_attention.available()):
            return False
        return all(attention.attention_kernel and inner.fused for attention, inner, *_ in self.plan)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The last hidden states float32 [B, L, H], as ``twin(input_ids, attention_mask)`` under autocast, or
        None (see the class)."""
        if not self.applies(input_ids):
            return None
        x = self.twin.embeddings(input_ids)  # float32, as in the twin (its LayerNorm and dropout: eval)
        batch, length, hidden = x.shape
        mask = keep = None
        if attention_mask is not None and not bool(attention_mask.all()):  # as NativeBert.forward
            mask = attention_mask[:, None, None, :].bool()
            keep = bf16_attention.key_bytes(mask, batch, length)
        bf16 = torch.bfloat16
        xb = x.to(bf16)  # each product's input: the residual stream rounded to bfloat16, as autocast casts it
        # the products' outputs are contiguous bfloat16 of x's shape, and x stays the same tensor: one check
        one_pass = self.norm_kernel and self.norm_shape == (hidden,) and bf16_norm.residual_applies(x)
        tiles = bf16_linear.takes_rows(batch * length)  # every product's rows: checked once
        for attention, inner, qkv_proj, norm1, out_proj, norm2, last_proj in self.plan:
            qkv = _product(qkv_proj, xb, tiles)
            mixed = bf16_attention.attend(qkv, attention.heads, keep)
            if mixed is None:  # the kernel declined (a sequence with no key): SDPA, as the twin's module then
                with torch.autocast("cpu", dtype=bf16):
                    q, k, v = qkv.view(batch, length, 3, attention.heads, -1).permute(2, 0, 3, 1, 4)
                    mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(
                        batch, length, hidden)
            # BertSelfOutput / BertOutput: LayerNorm(dense(.) + residual), the residual float32
            x, xb = _residual_norm(_product(out_proj, mixed, tiles), x, norm1, one_pass)
            h = inner.forward(xb, tiles)  # the feed-forward's product and GELU, no module hooks
            x, xb = _residual_norm(_product(last_proj, h, tiles), x, norm2, one_pass)
        return x


def _product(proj: PackedBf16Linear, x: torch.Tensor, tiles: bool | None = None) -> torch.Tensor:
    """``proj``'s product of bfloat16 ``x``: on AMX tiles for a few queries' rows where ``proj`` holds their layout
    (bf16_linear: oneDNN's bits for one query's 32 rows, tests/models/test_bf16_linear.py), else oneDNN's packed
    product. ``tiles``: the caller's own bf16_linear.takes_rows for x (Bf16Stack, once a forward); None: x is
    checked here."""
    y = _on_tiles(x, proj.tiles, proj.bias, tiles)
    return y if y is not None else torch.ops.mkldnn._linear_pointwise(x, proj.packed, proj.bias, "none", [], "")


def _on_tiles(x: torch.Tensor, packed: torch.Tensor | None, bias: torch.Tensor | None, tiles: bool | None,
              gelu: bool = False) -> torch.Tensor | None:
    """bf16_linear's product where the weight has its tiles (``packed``) and ``tiles`` is not False: checked
    (bf16_linear.linear) when ``tiles`` is None, unchecked (bf16_linear.run) when the caller checked its rows;
    None where it does not run (the caller takes oneDNN's)."""
    if packed is None or tiles is False:
        return None
    if tiles is None:
        return bf16_linear.linear(x, packed, bias, gelu=gelu)
    return bf16_linear.run(x, packed, bias, gelu=gelu)


def _residual_norm(y: torch.Tensor, x: torch.Tensor, norm: tuple, one_pass: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(LayerNorm(y + x), its bfloat16 copy): embedctl's one-pass kernel when ``one_pass`` (the caller checked that
    it applies; x is then updated in place: the stack's own residual), else torch's add, layer_norm and cast."""
    if one_pass:
        xb = bf16_norm.run(y, x, norm)
        if xb is not None:
            return x, xb
    x = torch.layer_norm(y + x, *norm)
    return x, x.to(torch.bfloat16)


def _norm_args(dense_norm: torch.nn.Module) -> tuple:
    """``torch.layer_norm``'s arguments after the input for a native BERT's dense + LayerNorm block (what
    ``nn.LayerNorm.forward`` passes, its parameters themselves)."""
    norm = dense_norm.LayerNorm
    return norm.normalized_shape, norm.weight, norm.bias, norm.eps


def _bf16_linears(backbone: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``backbone`` for inference whose ``nn.Linear`` weights and biases are bfloat16 tensors; every
    other parameter and buffer is the original (shared, not copied). In embedctl's native BERT, each layer's
    query, key and value projections are also fused into one (native_bert.fuse_qkv). Each Linear is then a
    :class:`PackedBf16Linear` where oneDNN can pack its weight, and each feed-forward's first product takes its
    GELU into the same oneDNN call (:class:`PackedBf16GeluLinear`) where oneDNN can."""
    import copy

    from embedctl.models.native_bert import NativeBert, _Intermediate, fuse_qkv

    linear = {id(p) for m in backbone.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    memo = {id(t): t for t in [*backbone.parameters(), *backbone.buffers()] if id(t) not in linear}
    with torch.no_grad():
        twin = copy.deepcopy(backbone, memo)
        for module in twin.modules():
            if isinstance(module, torch.nn.Linear):
                for name, param in list(module.named_parameters(recurse=False)):
                    setattr(module, name, torch.nn.Parameter(param.detach().to(torch.bfloat16), requires_grad=False))
        if isinstance(twin, NativeBert):
            fuse_qkv(twin)
        if PackedBf16Linear.available():
            for parent in list(twin.modules()):
                for name, child in list(parent.named_children()):
                    if isinstance(child, torch.nn.Linear):
                        setattr(parent, name, PackedBf16Linear(child))
        if isinstance(twin, NativeBert) and PackedBf16GeluLinear.available():
            for parent in list(twin.modules()):
                for name, child in list(parent.named_children()):
                    if isinstance(child, _Intermediate) and isinstance(child.dense, PackedBf16Linear):
                        setattr(parent, name, PackedBf16GeluLinear(child.dense, child.approximate))
    return twin.eval()


class PackedBf16Linear(torch.nn.Module):
    """A bfloat16 ``nn.Linear`` whose weight oneDNN has laid out once for its matrix product (the prepacked
    weight torch.compile's CPU freezing uses: ``mkldnn._reorder_linear_weight`` / ``_linear_pointwise``), not
    again on every call: the same bits as ``F.linear`` in bfloat16 (tests/models/test_encode_backends.py; on AMX
    tiles oneDNN sums a product over K = 1536 in another order than ``F.linear``: one bfloat16 rounding apart),
    20-40% faster for the few rows of a query (a 32-token query on one core: 92 -> 74 us for the fused
    query/key/value projection, 119 -> 94 us for each feed-forward product), ~7% for a batch of documents.
    The input is cast to bfloat16 first, as autocast casts a Linear's input; the output is bfloat16, as
    autocast's. At most 128 rows (a query, a server's few) run on AMX tiles where they run (``tiles``: the
    weight's layout for embedctl.models.bf16_linear; oneDNN's bits for a query's 32), the weight then held twice
    (~21 MB more for MiniLM). Inference only (the packed weight is no parameter)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().to(torch.bfloat16)
        self.bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        self.tiles = bf16_linear.pack(weight)  # a query's rows on AMX tiles (bf16_linear), or None

    @staticmethod
    def available() -> bool:
        """Whether this torch build packs bfloat16 linear weights with oneDNN (checked once per process)."""
        global _PACKING
        if _PACKING is None:
            try:
                w, x = torch.ones(8, 8, dtype=torch.bfloat16), torch.ones(2, 8, dtype=torch.bfloat16)
                got = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(w), None,
                                                         "none", [], "")
                _PACKING = bool(torch.backends.mkldnn.is_available()) and torch.equal(got, x @ w.t())
            except (RuntimeError, AttributeError, NotImplementedError):
                _PACKING = False
        return _PACKING

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _product(self, x.to(torch.bfloat16))


_PACKING: bool | None = None


class PackedBf16GeluLinear(torch.nn.Module):
    """A native BERT feed-forward's first product and its GELU in one oneDNN call (``_linear_pointwise`` with
    the ``gelu`` post-op, exact or tanh as the model's ``hidden_act``), in the bf16 twin in place of the
    ``_Intermediate`` module: the GELU reads the float32 sums before their one rounding to bfloat16, instead
    of a second pass over the rounded product (a 32 x 180-token batch of documents: 1536 x 5760 values a layer).
    A query's rows (exact GELU) take bf16_linear's tiles instead, the GELU in their epilogue (within the same
    rounding of the exact GELU as oneDNN's post-op, not its bits: tests/models/test_bf16_linear.py).
    SciFact documents at doc_max_length 180 on 2 threads, interleaved: 1.085x the documents/s, vectors within
    cosine 0.99988 of the separate GELU's. ``fused = False``: the packed product then ``F.gelu``, autocast's
    bits (tests)."""

    def __init__(self, dense: PackedBf16Linear, approximate: str):
        super().__init__()
        self.dense, self.approximate, self.fused = dense, approximate, True
        if approximate != "none":
            dense.tiles = None  # the tiles have the exact GELU only: the tanh one stays oneDNN's post-op

    @staticmethod
    def available() -> bool:
        """Whether this torch build's oneDNN linear takes the GELU post-op (checked once per process, against
        the separate GELU)."""
        global _GELU_POST_OP
        if _GELU_POST_OP is None:
            try:
                w = torch.linspace(-1, 1, 64, dtype=torch.float32).reshape(8, 8).to(torch.bfloat16)
                x = torch.linspace(-2, 2, 16, dtype=torch.float32).reshape(2, 8).to(torch.bfloat16)
                packed = torch.ops.mkldnn._reorder_linear_weight(w)
                got = torch.ops.mkldnn._linear_pointwise(x, packed, None, "gelu", [], "none")
                want = F.gelu(x.float() @ w.float().t())
                _GELU_POST_OP = PackedBf16Linear.available() and torch.allclose(got.float(), want, atol=2e-2)
            except (RuntimeError, AttributeError, NotImplementedError):
                _GELU_POST_OP = False
        return _GELU_POST_OP

    def forward(self, x: torch.Tensor, tiles: bool | None = None) -> torch.Tensor:
        """``tiles`` as :func:`_product`'s."""
        if not self.fused:
            return F.gelu(self.dense(x), approximate=self.approximate)
        x = x.to(torch.bfloat16)
        y = _on_tiles(x, self.dense.tiles, self.dense.bias, tiles, gelu=True)  # a few queries' rows: GELU in the epilogue
        if y is not None:
            return y
        return torch.ops.mkldnn._linear_pointwise(x, self.dense.packed, self.dense.bias, "gelu", [], self.approximate)


_GELU_POST_OP: bool | None = None


class WeightsVersion:
    """``changed()``: whether any of ``module``'s parameters was updated in place (an optimizer step, a
    ``load_state_dict``) since the last call. The parameters are listed once: walking the module tree each
    call was ~0.5 ms of a 4.6 ms one-query encode. (A parameter replaced by a new object, which embedctl
    never does, would go unnoticed.)"""

    def __init__(self, module: torch.nn.Module):
        self.params = tuple(module.parameters())
        self.seen = self.now()

    def now(self) -> int:
        return sum(p._version for p in self.params)  # in-place version counters: each update adds one

    def changed(self) -> bool:
        now = self.now()
        if now == self.seen:
            return False
        self.seen = now
        return True


class OnnxRunner:
    """ONNX Runtime session over the encoder's exported graph: ``(input_ids, attention_mask) [B, L] int64 ->
    embeddings`` before masking (ColBERT [B, L, dim], bi-encoder [B, D]), as :meth:`Encoder._head` gives."""

    def __init__(self, encoder: Any, quantized: bool):
        self.encoder, self.quantized = encoder, quantized
        self.name = "onnx-int8" if quantized else "onnx"
        self._open()

    def _open(self) -> None:
        import onnxruntime as ort

        from embedctl.models import onnx_graph

        self._weights = WeightsVersion(self.encoder)
        self.path = onnx_graph.cached_graph(self.encoder, quantized=self.quantized)
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, torch.get_num_threads())
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # worker threads sleep between operators instead of spinning: with 2 threads on the shared 2-core host,
        # 0.86x the time per 32-document batch (queries: the same); with 1 thread there are no workers
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self._weights.changed():  # trained since the export: export these weights
            self._open()
        # session.run with the tensors' own buffers: IO binding measured 1.01x per query, equal per batch
        feed = {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()}
        return torch.from_numpy(self.session.run(None, feed)[0])
