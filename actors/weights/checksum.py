"""Per-tensor checksums for weight sync, computed where the tensor lives.

Two algorithms, each giving the same answer on any device:

- ``xxh3``: XXH3-64 of the tensor's bytes (the ``xxhash`` package). It runs at memory speed on a
  host tensor (about 12 GB/s on one core), but a GPU tensor must first be copied to host memory,
  which on an H100 took about half of a 547 MB push's time on each side.
- ``fold``: a position-weighted sum of the tensor's 16-bit halfwords modulo 2^31 - 1, in two
  lanes with different weights, computed with PyTorch integer ops on the tensor's own device. Every
  step is exact integer arithmetic with no overflow, so the CPU and the GPU agree to the bit,
  whatever order the reduction runs in. It catches any change of a single word, and swapped
  words, with a chance of missing a random corruption of about 2^-62; it is a check against
  transport faults and wrong tensors, not a cryptographic hash.

Each transport names its algorithm (``BY_TRANSPORT``): ``fold`` where the tensors stay on GPUs
from end to end (``cuda_ipc``, ``nccl``), ``xxh3`` where they pass through host memory anyway
(``cpu_bytes``, ``shm``). The learner and the engine look it up by the same transport kind, so
both sides always hash alike. A checksum names its algorithm, the tensor's dtype and its shape,
so a cast or a reshape mismatches too.
"""

from __future__ import annotations

import torch
import xxhash

ALGORITHMS = ("xxh3", "fold")
BY_TRANSPORT = {"cpu_bytes": "xxh3", "shm": "xxh3", "cuda_ipc": "fold", "nccl": "fold"}

_P = 2**31 - 1  # a Mersenne prime: every weight and lane value stays below 2^31
# (multiplier, offset) pairs of the position weights, two per lane (low and high 16 bits)
_LANES = (
    ((1_103_515_245, 12_345), (1_664_525, 1_013_904_223)),
    ((2_147_483_587, 97_531), (69_069, 362_436_069)),
)
_CHUNK = 1 << 22  # 32-bit words per step: bounds the temporaries to about 32 MB each


def for_transport(kind: str) -> str:
    """The checksum algorithm that both ends of a ``kind`` transport use."""
    try:
        return BY_TRANSPORT[kind]
    except KeyError:
        raise ValueError(
            f"unknown weight transport {kind!r}; expected one of {sorted(BY_TRANSPORT)}"
        ) from None


def tensor_checksum(t: torch.Tensor, algorithm: str = "xxh3") -> str:
    """``algorithm:digest:dtype:shape`` of a tensor, computed on the tensor's device for ``fold``."""
    flat = t.detach().contiguous().reshape(-1)
    if algorithm == "xxh3":
        if flat.device.type != "cpu":
            flat = flat.cpu()
        value = xxhash.xxh3_64_intdigest(flat.view(torch.uint8).numpy()) if flat.numel() else 0
        digest = f"{value:016x}"
    elif algorithm == "fold":
        digest = _fold(flat.view(torch.uint8))
    else:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    shape = "x".join(str(s) for s in t.shape)
    return f"{algorithm}:{digest}:{str(t.dtype).removeprefix('torch.')}:{shape}"


def _fold(raw: torch.Tensor) -> str:
    n = raw.numel()
    if n == 0:
        return "0" * 16
    if raw.storage_offset() % 4:  # a view into a packed bucket: 32-bit words need alignment
        raw = raw.clone()
    body = n // 4 * 4
    words = raw[:body].view(torch.int32)
    if body < n:  # the last 1-3 bytes, zero-padded into one more word
        tail = torch.zeros(4, dtype=torch.uint8, device=raw.device)
        tail[: n - body] = raw[body:]
        words = torch.cat([words, tail.view(torch.int32)])
    acc = torch.zeros(len(_LANES), dtype=torch.int64, device=raw.device)
    for start in range(0, words.numel(), _CHUNK):
        w = words[start : start + _CHUNK].to(torch.int64) & 0xFFFFFFFF
        lo, hi = w & 0xFFFF, w >> 16
        pos = torch.arange(start, start + w.numel(), dtype=torch.int64, device=raw.device)
        pos &= 0x7FFFFFFF
        for lane, ((ma, oa), (mb, ob)) in enumerate(_LANES):
            # weights in 1..2^15 from the middle bits of an affine map of the position: each
            # term is below 2^31 and a chunk's sum below 2^54, so nothing overflows
            wa = (((pos * ma + oa) >> 16) & 0x7FFF) + 1
            wb = (((pos * mb + ob) >> 16) & 0x7FFF) + 1
            acc[lane] = (acc[lane] + (lo * wa + hi * wb).sum() % _P) % _P
    a, b = (int(v) for v in acc.tolist())
    return f"{a:08x}{b:08x}"
