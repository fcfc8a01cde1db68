"""Learner step time vs a bare PyTorch AdamW loop, on the same model and batch, per ZeRO stage.

The model is a Llama built from config (no hub), >= 20M parameters. Both sides get the same
documents: the bare loop receives them already packed and collated (so it pays nothing for
packing), runs forward, weighted cross-entropy, backward, ``clip_grad_norm_`` and
``AdamW.step``. Ours runs ``Learner.train_step`` (packing, DeepSpeed engine, ZeRO stage).
Steps alternate ours/bare so both see the same CPU contention, after one untimed warm-up step
of each. Per ZeRO stage, a ``zero=`` line gives every step, the ratio of the fastest steps,
and the median process CPU time of each side, which a shared machine disturbs far less than
wall-clock time; a ``stage`` line gives the median wall-clock step of each side.

Ends with one line, ``RESULT params=… ours_step_s=… bare_step_s=… ratio=… zero_stage=…``,
whose values list the stages in ``--stages`` order, comma-separated (ratio: ours over bare).

Also prints tokens/s for each stage (pretrain, SFT, RL incl. the old-logprob pass).

    python benchmarks/learner_step.py [--steps 5] [--stages 0,1,2] [--device cpu|cuda]

``--device cuda`` runs both sides on GPU 0 in bf16 (ours: DeepSpeed's bf16 mode over NCCL; the
bare loop: the model cast to bf16), with the GPU synchronised before each clock is read.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import count  # noqa: E402

MODEL = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=8,
)


def documents(n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(3, 250) for _ in range(length)] for _ in range(n)]


def config(model_dir: Path, zero: int, seq_len: int, micro: int, device: str = "cpu"):
    from rlcs.config import Config

    precision = "bf16" if device == "cuda" else "fp32"
    return Config.model_validate(
        {
            "stage": "pretrain",
            "model": {"path": str(model_dir)},
            "learner": {
                "zero_stage": zero,
                "lr": 1e-4,
                "micro_batch": micro,
                "grad_clip": 1.0,
                "precision": precision,
            },  # fmt: skip
            "data": {"seq_len": seq_len},
            "cluster": {"device": device},
        }
    )


def sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class BareLoop:
    """The reference: plain HF model, torch AdamW, same inputs, same loss, same clipping."""

    def __init__(self, model_dir: Path, lr: float, clip: float, device: str = "cpu"):
        from actors.learner_model import load_hf_model

        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = load_hf_model(model_dir, dtype=dtype).to(device)
        self.device = device
        self.model.config.use_cache = False
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.clip = clip

    def step(self, micro_batches: list[dict]) -> float:
        from rlcs.grpo import token_logprobs

        sync()
        t0 = time.perf_counter()
        for b in micro_batches:
            b = {k: v.to(self.device) for k, v in b.items()}
            logits = self.model(
                input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False
            ).logits
            loss = (b["weights"] * -token_logprobs(logits, b["targets"])).sum()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t0


def bare_inputs(learner, docs: list[list[int]]) -> list[dict]:
    from actors.learner_batches import prepare_step

    step = prepare_step("pretrain", docs, learner.config, learner.tokenizer, None)[0]
    return [learner.inputs.collate(step.docs, rows)[0] for rows in step.minis[0]]


def stage_throughput(learner, steps: int) -> dict[str, float]:
    """Tokens/s of one ``train_step`` per stage, on the same learner."""
    tok = learner.tokenizer
    rng = random.Random(1)
    sft = [
        {
            "prompt": "Add the numbers " + " ".join(str(rng.randint(1, 99)) for _ in range(20)),
            "response": "<think>"
            + "adding step by step " * 8
            + "</think><answer><|begin_of_box|>42<|end_of_box|></answer>",
        }
        for _ in range(8)
    ]
    prompt = tok(
        "[gMASK]<sop><|user|>\nsolve this problem carefully<|assistant|>\n",
        add_special_tokens=False,
    )["input_ids"]
    rl = [
        dict(
            item_id=i // 4,
            prompt_token_ids=prompt,
            token_ids=[rng.randint(3, 250) for _ in range(200)],
            reward=float(rng.random() < 0.5),
        )
        for i in range(8)
    ]
    pre = documents(8, 256, 3)
    out = {}
    for stage, batch in (("pretrain", pre), ("sft", sft), ("rl", rl)):
        learner.train_step(stage, batch)
        times, toks = [], 0
        for _ in range(steps):
            stats = learner.train_step(stage, batch)
            times.append(stats["step_s"])
        from actors.learner_batches import prepare_step

        toks = sum(len(d) for d in prepare_step(stage, batch, learner.config, tok, None)[0].docs)
        out[stage] = toks / statistics.median(times)
    return out


def zero_stages(text: str) -> list[int]:
    """An argparse ``type`` for ``--stages``: ZeRO stages 0 to 3, comma-separated."""
    try:
        stages = [int(z) for z in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give ZeRO stages, e.g. 0,1,2") from None
    if any(z not in (0, 1, 2, 3) for z in stages):
        raise argparse.ArgumentTypeError(f"{text!r}: a ZeRO stage is 0, 1, 2 or 3")
    return stages


def result_line(results: list[tuple[int, float, float, int]]) -> str:
    """The one closing line: (params, ours_s, bare_s, zero stage) of each stage, in order."""
    params = {p for p, _, _, _ in results}
    return (
        f"RESULT params={','.join(str(p) for p in sorted(params))} "
        f"ours_step_s={','.join(f'{o:.4f}' for _, o, _, _ in results)} "
        f"bare_step_s={','.join(f'{b:.4f}' for _, _, b, _ in results)} "
        f"ratio={','.join(f'{o / b:.3f}' for _, o, b, _ in results)} "
        f"zero_stage={','.join(str(z) for _, _, _, z in results)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=count(1), default=5)
    ap.add_argument("--stages", type=zero_stages, default="0,1,2")
    ap.add_argument("--docs", type=count(1), default=8)
    ap.add_argument("--doc-len", type=count(1), default=128)
    ap.add_argument("--seq-len", type=count(1), default=512)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA GPU is visible")

    from actors.learner import Learner
    from rlcs.models import build_tiny_text_model, count_parameters

    tmp = Path(tempfile.mkdtemp(prefix="learner-bench-"))
    model_dir = build_tiny_text_model(tmp / "model", **MODEL)
    docs = documents(args.docs, args.doc_len, seed=0)
    tokens = args.docs * args.doc_len
    results = []
    throughput = None
    for zero in args.stages:
        micro = max(1, tokens // args.seq_len)
        cfg = config(model_dir, zero, args.seq_len, micro, args.device)
        learner = Learner.local(cfg, model_dir)
        bare = BareLoop(model_dir, cfg.learner.lr, cfg.learner.grad_clip, args.device)
        params = count_parameters(bare.model)
        inputs = bare_inputs(learner, docs)
        learner.train_step("pretrain", docs)  # warm-up both
        bare.step(inputs)
        ours, ref, ours_cpu, ref_cpu = [], [], [], []
        for _ in range(args.steps):
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            learner.train_step("pretrain", docs)
            sync()
            ours.append(time.perf_counter() - t0)
            ours_cpu.append(time.process_time() - c0)
            c0 = time.process_time()
            ref.append(bare.step(inputs))
            ref_cpu.append(time.process_time() - c0)
        o, b = statistics.median(ours), statistics.median(ref)
        oc, bc = statistics.median(ours_cpu), statistics.median(ref_cpu)
        print(
            f"zero={zero} wall ours={[round(x, 2) for x in ours]} bare={[round(x, 2) for x in ref]} "
            f"min_ratio={min(ours) / min(ref):.3f} | "
            f"cpu ours={oc:.3f}s bare={bc:.3f}s cpu_ratio={oc / bc:.3f}",
            flush=True,
        )
        results.append((params, o, b, zero))
        if zero == 2:
            throughput = stage_throughput(learner, max(2, args.steps // 2))
        del learner, bare
    if throughput:
        print("tokens_per_s " + " ".join(f"{k}={v:.0f}" for k, v in throughput.items()))
    where = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"batch tokens={tokens} seq_len={args.seq_len} threads={torch.get_num_threads()} "
          f"device={where}")  # fmt: skip
    for params, o, b, zero in results:
        print(f"stage zero_stage={zero} params={params} ours_step_s={o:.4f} bare_step_s={b:.4f} "
              f"ratio={o / b:.3f}")  # fmt: skip
    print(result_line(results))


if __name__ == "__main__":
    main()
