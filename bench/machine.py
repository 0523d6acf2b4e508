"""The machine kind a benchmark ran on: the one name every bench script files its result under.

    python bench/machine.py            # prints e.g. x86_64-amx-2c, then the details as JSON

A kind is ``<arch>-<cpu tier>-<cores>c[-<gpus>]``, e.g. ``x86_64-avx2-2c``, ``x86_64-amx-16c-h100``:
- cpu tier: the best matrix/vector unit the kernels care about, from the CPU flags (/proc/cpuinfo):
  ``amx`` (AMX tiles, bfloat16), ``avx512bf16``, ``avx512``, ``avx2``, else ``base``; ``sve`` / ``neon`` on ARM.
  PLAID's ``auto`` precisions follow the same split (bfloat16 where AMX or AVX512-BF16, int16 on AVX2);
- cores: the CPUs this process may use (affinity), since that is what the figures scale with;
- gpus: the model of each NVIDIA GPU (nvidia-smi), ``2xh100`` for two; absent without one.
Two machines of one kind give comparable figures; different kinds never share a result file.
``EMBEDCTL_MACHINE_KIND`` overrides the name (a kind this function does not tell apart).
No torch import here: asking the kind must stay cheap.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from functools import lru_cache

# checked in order: the first tier whose flags are all present names the kind
X86_TIERS = (("amx", ("amx_tile", "amx_bf16")), ("avx512bf16", ("avx512_bf16",)), ("avx512", ("avx512f",)),
             ("avx2", ("avx2", "fma")))
ARM_TIERS = (("sve", ("sve",)), ("neon", ("asimd",)))
REPORTED_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile",
                  "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; ('', {}) where there is none (macOS)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return platform.processor() or "", frozenset()
    name = re.search(r"^(?:model name|Hardware|CPU part)\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.M)
    return (name.group(1).strip() if name else platform.processor() or "",
            frozenset(flags.group(1).split()) if flags else frozenset())


def cpu_tier(flags: frozenset[str] | None = None, arch: str | None = None) -> str:
    arch = arch or platform.machine()
    flags = _cpuinfo()[1] if flags is None else flags
    tiers = ARM_TIERS if arch in ("aarch64", "arm64") else X86_TIERS
    for tier, needed in tiers:
        if all(f in flags for f in needed):
            return tier
    return "base"


def has_bf16_matrix_units() -> bool:
    """AMX tiles or AVX512-BF16: where PLAID's `auto` precisions pick bfloat16 (the flags torch.cpu probes)."""
    flags = _cpuinfo()[1]
    return "amx_tile" in flags or "avx512_bf16" in flags


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS: no affinity call
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def gpus() -> tuple[str, ...]:
    """Names of the NVIDIA GPUs nvidia-smi lists (empty without the tool or a GPU)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip())


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA GeForce RTX 4090' -> 'rtx4090' (the model, not the memory)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in ("nvidia", "geforce", "tesla")]
    model = [w for w in words if not re.fullmatch(r"\d+gb|hbm\w*|pcie|sxm\w*|nvl", w)]
    return "".join(model[:2]) or "gpu"


def machine_kind() -> str:
    override = os.environ.get("EMBEDCTL_MACHINE_KIND")
    if override:
        return override
    kind = f"{platform.machine() or 'unknown'}-{cpu_tier()}-{cores()}c"
    names = gpus()
    if names:
        slugs = sorted({gpu_slug(n) for n in names})
        kind += "-" + "-".join(f"{sum(gpu_slug(n) == s for n in names)}x{s}" if len(names) > 1 else s for s in slugs)
    return kind


def describe() -> dict:
    """What a result records about its machine (beside the kind): enough to tell two runs' machines apart."""
    name, flags = _cpuinfo()
    return {"kind": machine_kind(), "cpu": name, "arch": platform.machine(), "cores": cores(),
            "cpu_count": os.cpu_count(), "cpu_flags": sorted(f for f in REPORTED_FLAGS if f in flags),
            "gpus": list(gpus()), "os": platform.platform(), "python": platform.python_version()}


if __name__ == "__main__":
    print(machine_kind())
    print(json.dumps(describe(), indent=1))
