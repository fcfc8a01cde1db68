"""The rollout worker's own cost per batch, with the engine taken out.

``rollout_throughput.py`` compares the worker with a bare vLLM engine end to end; on a fast GPU
the worker's share of the time grows. This isolates that share: a ``RolloutWorkerImpl`` (in
process, no Ray actor) whose engine is replaced by a stub that returns fixed-length results at
once, so what is timed is only the worker's side: rendering and tokenising prompts, building
requests, decoding and assembling trajectories, and pickling them as Ray does for the reply.

    python benchmarks/worker_overhead.py [--prompts 64] [--n 4] [--tokens 128] [--rounds 5]

Its figures divide into the engine's time for the same batch: at ``T`` tokens/s a batch of
``prompts x n x tokens`` takes ``prompts * n * tokens / T`` seconds in the engine. Ends with
``RESULT per_batch_s=… render_s=… assemble_s=… pickle_s=… trajectories=… tokens=…``
(medians over ``--rounds``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import ray.cloudpickle as cloudpickle
from rounds import count

from actors.rollout.engine import GenRequest, GenResult


class StubEngine:
    """Answers every request at once with ``tokens`` random ids and logprobs."""

    applies_budget = False

    def __init__(self, encode, tokens: int, vocab: int):
        self.encode = encode
        self.tokens = tokens
        self.vocab = vocab

    def generate(self, requests: list[GenRequest], rule=None) -> list[GenResult]:
        rng = random.Random(0)
        return [
            GenResult(
                [rng.randrange(10, self.vocab) for _ in range(self.tokens)],
                [-1.0] * self.tokens,
                "length",
                list(r.prompt_ids),
            )
            for r in requests
        ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=count(1), default=64)
    ap.add_argument("--n", type=count(1), default=4)
    ap.add_argument("--tokens", type=count(1), default=128)
    ap.add_argument("--rounds", type=count(1), default=5)
    args = ap.parse_args()

    from actors.rollout.worker import RolloutWorkerImpl
    from rlcs.models import build_tiny_text_model

    model = build_tiny_text_model(Path(tempfile.mkdtemp()) / "tiny")
    cfg = dict(engine="hf", n=args.n, nothink=True, max_answer_tokens=args.tokens)
    worker = RolloutWorkerImpl(str(model), cfg)
    real = worker.engine
    worker.engine = StubEngine(real.encode, args.tokens, len(worker.tokenizer))
    del real
    # the prompts of rollout_throughput.py
    words = ["add", "the", "two", "numbers", "then", "box", "your", "answer", "carefully"]
    items = [
        {"id": f"p{i}", "domain": "math", "prompt": " ".join(words[: 3 + i % 7]) + f" {i}"}
        for i in range(args.prompts)
    ]
    totals, renders, assembles, pickles = [], [], [], []
    for r in range(args.rounds + 1):  # the first round warms up
        t0 = time.perf_counter()
        trajs = worker.generate(items, step=r)
        t1 = time.perf_counter()
        cloudpickle.loads(cloudpickle.dumps(trajs))
        t2 = time.perf_counter()
        if r == 0:
            continue
        timing = trajs[0].timings
        renders.append(timing["render_s"])
        assembles.append(t1 - t0 - timing["batch_s"])
        pickles.append(t2 - t1)
        totals.append(t2 - t0 - (timing["batch_s"] - timing["render_s"]))
    tokens = sum(len(t.token_ids) for t in trajs)
    print(
        f"INFO {len(trajs)} trajectories of {args.tokens} tokens: render "
        f"{statistics.median(renders) * 1e3:.1f} ms, assemble {statistics.median(assembles) * 1e3:.1f} ms, "
        f"pickle {statistics.median(pickles) * 1e3:.1f} ms (medians of {args.rounds})"
    )
    print(
        f"RESULT per_batch_s={statistics.median(totals):.4f} render_s={statistics.median(renders):.4f} "
        f"assemble_s={statistics.median(assembles):.4f} pickle_s={statistics.median(pickles):.4f} "
        f"trajectories={len(trajs)} tokens={tokens}"
    )


if __name__ == "__main__":
    main()
