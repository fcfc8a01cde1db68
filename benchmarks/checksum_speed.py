"""Weight-sync checksums: GB/s of ``xxh3`` and ``fold`` on a model-sized set of tensors.

Every push hashes the whole model on the learner and again in each engine
(:mod:`actors.weights.checksum`). This times both algorithms over the tensors of the weight-sync
benchmark's 137M-parameter Llama (same shapes, random values), on the CPU and, where there is
one, on the GPU, and checks that each algorithm gives the same digests on both devices.

    python benchmarks/checksum_speed.py [--dtype float32|bfloat16] [--repeats 3]
        [--devices cpu,cuda] [--cpu-fold-mb 64]

``fold`` on the CPU is slow (it is meant for GPU tensors), so it is timed there on the first
``--cpu-fold-mb`` of tensors only. Ends with
``RESULT device=… xxh3_gb_per_s=… fold_gb_per_s=… bytes=… same_digests=1|0``
for the last device of ``--devices`` that is present (the GPU, by default, where there is one).
``same_digests`` compares every device's digests with the CPU's, so it is 0 when ``cpu`` is not
among the devices.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rounds import count  # noqa: E402

from actors.weights.checksum import tensor_checksum  # noqa: E402

# the shapes of weight_sync.py's LARGE Llama: vocab 32000, hidden 1024, 8 layers, GQA 16/4
VOCAB, HIDDEN, INTER, LAYERS, KV = 32000, 1024, 2048, 8, 256


def shapes() -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [(VOCAB, HIDDEN)]
    for _ in range(LAYERS):
        out += [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN)]
        out += [(INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER), (HIDDEN,), (HIDDEN,)]
    return out + [(HIDDEN,), (VOCAB, HIDDEN)]


def timed(tensors: list[torch.Tensor], algorithm: str, repeats: int) -> tuple[float, list[str]]:
    best, digests = [], []
    for _ in range(repeats):
        if tensors[0].is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        digests = [tensor_checksum(t, algorithm) for t in tensors]
        best.append(time.perf_counter() - t0)
    return statistics.median(best), digests


def devices_present(text: str, cuda: bool) -> list[str]:
    """The devices of ``--devices`` to time: ``cuda`` only where there is a GPU. An unknown
    name, or a list left empty, is an ``argparse`` error (a usage line, not a traceback)."""
    names = [d.strip() for d in text.split(",") if d.strip()]
    unknown = [d for d in names if d not in ("cpu", "cuda")]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give cpu, cuda or cpu,cuda")
    present = [d for d in names if d != "cuda" or cuda]
    if not present:
        raise argparse.ArgumentTypeError(f"{text!r}: no CUDA GPU is visible; add cpu")
    return present


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=count(1), default=3)
    ap.add_argument("--devices", default="cpu,cuda", help="comma-separated; cuda if present")
    ap.add_argument("--cpu-fold-mb", type=float, default=64)
    args = ap.parse_args()
    try:
        devices = devices_present(args.devices, torch.cuda.is_available())
    except argparse.ArgumentTypeError as e:
        ap.error(f"--devices {e}")
    g = torch.Generator().manual_seed(0)
    dtype = getattr(torch, args.dtype)
    host = [torch.randn(s, generator=g).to(dtype) for s in shapes()]
    nbytes = sum(t.numel() * t.element_size() for t in host)
    print(f"INFO {len(host)} tensors, {nbytes / 1e6:.0f} MB of {args.dtype}")
    digests: dict[tuple[str, str], list[str]] = {}
    result = None
    for device in devices:
        tensors = host if device == "cpu" else [t.to(device) for t in host]
        line = {}
        for algorithm in ("xxh3", "fold"):
            subset = tensors
            if device == "cpu" and algorithm == "fold":
                budget, subset = args.cpu_fold_mb * 1e6, []
                for t in tensors:
                    if subset and budget < t.numel() * t.element_size():
                        break
                    subset.append(t)
                    budget -= t.numel() * t.element_size()
            size = sum(t.numel() * t.element_size() for t in subset)
            seconds, digests[device, algorithm] = timed(subset, algorithm, args.repeats)
            line[algorithm] = size / seconds / 1e9
            print(
                f"INFO {device} {algorithm}: {size / 1e6:.0f} MB in {seconds:.3f} s "
                f"({line[algorithm]:.2f} GB/s)"
            )
        result = (device, line)
    same = "cpu" in devices and all(
        digests[d, a][:n] == digests["cpu", a][:n]
        for d, a in digests
        for n in [min(len(digests[d, a]), len(digests["cpu", a]))]
    )
    device, line = result
    print(
        f"RESULT device={device} xxh3_gb_per_s={line['xxh3']:.2f} "
        f"fold_gb_per_s={line['fold']:.2f} bytes={nbytes} same_digests={int(same)}"
    )


if __name__ == "__main__":
    main()
