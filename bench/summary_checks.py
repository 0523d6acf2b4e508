"""bench/RESULTS.md rows of bench_read_checks.py (the cost of the checks on read); summarize.py imports them."""

from __future__ import annotations

from summary_common import Row, dig


def _ab(x: dict | None) -> str | None:
    return x and f"{x['checked_median_s']:.3f} / {x['unchecked_median_s']:.3f} s ({x['ratio_median']:.2f}x)"


def read_checks_rows() -> list[Row]:
    return [
        ("GB/s in memory: sha256 / crc32 / blake2b",
         lambda r, o: " / ".join(str(dig(r, "hash_gb_per_s", h)) for h in ("sha256", "crc32", "blake2b"))),
        ("prebatch over the SciFact token cache: checked / unchecked (docs/s)",
         lambda r, o: (p := r.get("prebatch")) and f"{_ab(p)}; {p['checked_docs_per_s']:.0f} / "
                                                   f"{p['unchecked_docs_per_s']:.0f} docs/s"),
        ("PLAID index open: checked / unchecked (index MB)",
         lambda r, o: (s := r.get("search_open")) and f"{_ab(s['index_open'])}; {s['index_bytes'] / 1e6:.1f} MB"),
        ("search open with the encoder: after / before",
         lambda r, o: (s := r.get("search_open")) and f"{s['open_total_checked_s']:.2f} / {s['open_total_before_s']:.2f} s"),
        ("model identity: old signature / full sha256 uncached / cached",
         lambda r, o: (w := dig(r, "search_open", "weights_identity")) and
         f"{w['legacy_signature_s'] * 1e3:.1f} / {w['full_uncached_s'] * 1e3:.0f} / {w['full_cached_s'] * 1e3:.1f} ms"),
        ("resume read (model + optimizer): checked / unchecked (checkpoint MB)",
         lambda r, o: (x := r.get("resume")) and f"{_ab(x)}; {x['checkpoint_bytes'] / 1e6:.0f} MB"),
        ("conditions", lambda r, o: r.get("note")),
    ]
