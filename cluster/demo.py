"""`rlcs demo`: the smallest real run of the platform's stack on this machine.

It builds the tiny text model and tokenizer, starts a vLLM engine (the CPU build on a host
without a GPU), samples think/answer-style completions for a few prompts, and prints what it did.
The full pretrain -> SFT -> RLCS demo replaces this once the training driver lands.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

PROMPTS = [
    "What is 17 + 25?",
    "Read the word in the image: RLCS",
    "Which box holds the red square?",
    "Click the Submit button.",
]


def run(run_dir: Path, max_tokens: int = 64, n: int = 2) -> dict:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    run_dir.mkdir(parents=True, exist_ok=True)
    with console.status("building the tiny model and tokenizer"):
        from rlcs.models import build_tiny_text_model
        from rlcs.tokenizer import stop_token_ids

        t0 = time.perf_counter()
        model_dir = build_tiny_text_model(run_dir / "model")
        build_s = time.perf_counter() - t0
    console.print(f"[green]built[/] tiny text model in {model_dir} ({build_s:.1f}s)")

    with console.status("starting the vLLM engine (about half a minute on 2 CPU cores)"):
        from vllm import LLM, SamplingParams

        t0 = time.perf_counter()
        llm = LLM(
            model=str(model_dir),
            dtype="float32",
            gpu_memory_utilization=0.1,
            max_model_len=512,
            enforce_eager=True,
            seed=0,
        )
        init_s = time.perf_counter() - t0
    console.print(f"[green]started[/] vLLM engine in {init_s:.1f}s")

    tok = llm.get_tokenizer()
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in PROMPTS
    ]
    params = SamplingParams(
        n=n, max_tokens=max_tokens, top_p=1.0, temperature=1.0, logprobs=0,
        stop_token_ids=stop_token_ids(tok), skip_special_tokens=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=True)
    gen_s = time.perf_counter() - t0
    n_tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)

    table = Table(title="sampled completions (random weights: the text is noise until trained)")
    table.add_column("prompt")
    table.add_column("tokens", justify="right")
    table.add_column("mean logprob", justify="right")
    table.add_column("finish")
    samples = []
    for prompt, out in zip(PROMPTS, outputs, strict=True):
        for c in out.outputs:
            mean_lp = sum(next(iter(d.values())).logprob for d in c.logprobs) / max(
                1, len(c.logprobs)
            )
            table.add_row(prompt, str(len(c.token_ids)), f"{mean_lp:.2f}", c.finish_reason)
            samples.append(
                {"prompt": prompt, "response": c.text, "token_ids": list(c.token_ids),
                 "mean_logprob": mean_lp, "finish_reason": c.finish_reason}
            )  # fmt: skip
    console.print(table)
    summary = {
        "model_dir": str(model_dir),
        "build_s": round(build_s, 2),
        "engine_init_s": round(init_s, 2),
        "generate_s": round(gen_s, 3),
        "completions": len(samples),
        "tokens": n_tokens,
        "tokens_per_s": round(n_tokens / gen_s, 1),
    }
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(
        f"generated {n_tokens} tokens in {gen_s:.2f}s ({summary['tokens_per_s']} tokens/s); "
        f"samples in {run_dir / 'samples.jsonl'}"
    )
    print(
        f"RESULT engine_init_s={summary['engine_init_s']} tokens={n_tokens} "
        f"tokens_per_s={summary['tokens_per_s']}"
    )
    return summary


def main(args: argparse.Namespace) -> int:
    run(Path(args.run_dir or "runs/demo"))
    return 0
