"""Seeded pseudo-random numbers that depend only on a key, never on call order.

Teacher noise and the train/dev split must not change when the same ids arrive in another order or in
other batches (a resumed run, a different shard layout), so they hash the id instead of drawing from a
shared generator.
"""

from __future__ import annotations

import hashlib

_DRAW_BYTES = 8
_DRAW_SCALE = float(2 ** (8 * _DRAW_BYTES))


def stable_uniforms(key: str, n: int = 1) -> list[float]:
    """`n` floats in [0, 1) determined by `key` alone (blake2b, 8 bytes per draw)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=_DRAW_BYTES * n).digest()
    return [int.from_bytes(digest[i * _DRAW_BYTES : (i + 1) * _DRAW_BYTES], "big") / _DRAW_SCALE
            for i in range(n)]
