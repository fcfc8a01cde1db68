"""Rollout throughput: tokens/s through ``RolloutWorker`` vs bare ``vllm.LLM.generate``.

Both engines serve the same model with the same engine arguments, each in its own Ray actor
(num_cpus=1), and get the same work: the same prompt token ids, and per request the same
``SamplingParams`` (temperature, top_p 1.0, max_tokens, seed, logprobs, stop tokens). The bare
engine returns only a token count, so the worker's extra costs (prompt rendering, trajectories
with logprobs and text, shipping them back through Ray) are all on the worker's side. Rounds
alternate worker/bare so that CPU contention from other processes hits both alike; the figure
is the median round.

The main figure is single-pass work (``nothink``: one generation pass per request, exactly
what the bare engine does). An INFO line also reports thinking mode with force-answering,
where the worker runs a second pass for rollouts that exhaust the thinking budget; the bare
engine there does one pass with the summed budget.

    python benchmarks/rollout_throughput.py [--prompts 64] [--n 4] [--tokens 128] [--rounds 3]

Ends with ``RESULT worker_tok_s=… bare_tok_s=… ratio=…``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import ray
from rounds import count


@ray.remote(num_cpus=1)
class BareVLLM:
    """``vllm.LLM`` with the worker's engine arguments, and nothing around it."""

    def __init__(self, model_path: str, gpu_memory_utilization: float, seed: int):
        from vllm import LLM

        from actors.rollout.vllm_engine import engine_kwargs

        kwargs = engine_kwargs(model_path, seed, "float32", gpu_memory_utilization)
        kwargs.pop("worker_extension_cls")  # bare: nothing of ours inside the engine
        self.llm = LLM(**kwargs)

    def generate(self, prompt_ids: list[list[int]], params: list[dict]) -> int:
        from vllm import SamplingParams

        outs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompt_ids],
            [SamplingParams(**p) for p in params],
            use_tqdm=False,
        )
        return sum(len(o.outputs[0].token_ids) for o in outs)


def items(k: int) -> list[dict]:
    words = ["add", "the", "two", "numbers", "then", "box", "your", "answer", "carefully"]
    return [
        {"id": f"p{i}", "domain": "math", "prompt": " ".join(words[: 3 + i % 7]) + f" {i}"}
        for i in range(k)
    ]


def bare_work(worker_cfg: dict, its: list[dict], tokenizer, step: int, max_tokens: int):
    """The exact requests the worker sends to its engine for one first pass."""
    from actors.rollout.worker import request_seed
    from rlcs.prompts import render_prompt
    from rlcs.tokenizer import stop_token_ids

    prompts, params = [], []
    for it in its:
        ids = tokenizer.encode(
            render_prompt(it, tokenizer, nothink=worker_cfg["nothink"]), add_special_tokens=False
        )
        for k in range(worker_cfg["n"]):
            prompts.append(ids)
            params.append(
                dict(n=1, temperature=worker_cfg["temperature"], top_p=1.0, max_tokens=max_tokens,
                     seed=request_seed(worker_cfg["seed"], step, it["id"], k), logprobs=0,
                     stop_token_ids=stop_token_ids(tokenizer), detokenize=False)
            )  # fmt: skip
    return prompts, params


def measure(worker, bare, cfg, its, tokenizer, rounds, bare_tokens):
    w_rates, b_rates = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        trajs = ray.get(worker.generate.remote(its, step=r))
        w_rates.append(sum(len(t.token_ids) for t in trajs) / (time.perf_counter() - t0))
        prompts, params = bare_work(cfg, its, tokenizer, r, bare_tokens)
        t0 = time.perf_counter()
        n = ray.get(bare.generate.remote(prompts, params))
        b_rates.append(n / (time.perf_counter() - t0))
        forced = sum(t.forced_answer for t in trajs)
        print(f"INFO round {r}: worker {w_rates[-1]:.0f} tok/s (forced {forced}/{len(trajs)}), "
              f"bare {b_rates[-1]:.0f} tok/s", flush=True)  # fmt: skip
    return statistics.median(w_rates), statistics.median(b_rates)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="HF model directory (default: build the tiny text model)")
    ap.add_argument("--prompts", type=count(1), default=64)
    ap.add_argument("--n", type=count(1), default=4)
    ap.add_argument("--tokens", type=count(1), default=128)
    ap.add_argument("--rounds", type=count(1), default=3)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.05)
    ap.add_argument("--skip-think", action="store_true", help="skip the force-answering INFO run")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from actors.rollout.worker import RolloutWorker, worker_options
    from rlcs.models import build_tiny_text_model

    model = args.model or str(build_tiny_text_model(Path(tempfile.mkdtemp()) / "tiny"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    # a GPU each where there are two; where there is one, both engines share it (5% each)
    have = ray.cluster_resources().get("GPU", 0)
    gpus = 1 if have >= 2 else 0.5 if have >= 1 else 0
    base = dict(engine="vllm", n=args.n, temperature=1.0, top_p=1.0, seed=0,
                gpu_memory_utilization=args.gpu_memory_utilization)  # fmt: skip
    single = dict(base, nothink=True, max_answer_tokens=args.tokens, max_think_tokens=args.tokens)
    # both engines run inside their actors' processes, on the allocator the worker's gets
    worker = RolloutWorker.options(**worker_options(single, num_gpus=gpus)).remote(model, single)
    bare = BareVLLM.options(**worker_options(single, num_gpus=gpus)).remote(
        model, args.gpu_memory_utilization, 0
    )
    ray.get([worker.ready.remote(), bare.generate.remote([[1, 2]], [dict(max_tokens=1)])])
    its = items(args.prompts)
    ray.get(worker.generate.remote(its[:4], step=999))  # warm-up, both engines
    ray.get(bare.generate.remote(*bare_work(single, its[:4], tokenizer, 999, args.tokens)))
    w, b = measure(worker, bare, single, its, tokenizer, args.rounds, args.tokens)
    print(
        f"INFO single-pass (nothink, identical requests): worker {w:.0f} tok/s, bare {b:.0f} tok/s, ratio {w / b:.3f}"
    )
    ray.kill(worker)

    if not args.skip_think:
        think = dict(
            base, nothink=False, max_think_tokens=args.tokens, max_answer_tokens=args.tokens // 4
        )
        tw = RolloutWorker.options(**worker_options(think, num_gpus=gpus)).remote(model, think)
        ray.get(tw.generate.remote(its[:4], step=999))
        tw_rate, tb_rate = measure(
            tw, bare, think, its, tokenizer, args.rounds, args.tokens + args.tokens // 4
        )
        print(f"INFO thinking + force-answering (two passes where forced) vs one bare pass of the summed "
              f"budget: worker {tw_rate:.0f} tok/s, bare {tb_rate:.0f} tok/s, ratio {tw_rate / tb_rate:.3f}")  # fmt: skip
        ray.kill(tw)
    ray.shutdown()
    print(f"RESULT worker_tok_s={w:.1f} bare_tok_s={b:.1f} ratio={w / b:.3f}")


if __name__ == "__main__":
    main()
