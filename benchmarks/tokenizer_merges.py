"""Token counts of a dataset's texts under the byte-level tokenizer and with learnt BPE merges.

``model.tokenizer_merges`` has a tiny model's tokenizer learn BPE merges from the run's texts
(:func:`rlcs.tokenizer.learn_merges`). This learns them the way the demo does (from the
pretraining, SFT and RL splits of a data directory, never the held-out items) and counts, per
domain, the tokens of the pretraining texts, the SFT prompts and responses and the held-out
prompts under both tokenizers. The held-out prompts are the RL prompts' kind, read by texts
the merges were not learnt from. Images add the same tokens either way and are not counted.

    rlcs demo --run-dir runs/demo          # or any directory of the demo's data splits
    python benchmarks/tokenizer_merges.py --data runs/demo/data [--merges 512]

Ends with ``RESULT merges=… pretrain_ratio=… sft_prompt_ratio=… sft_response_ratio=…
heldout_prompt_ratio=…`` (tokens with merges / bytes, over all domains).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

SPLITS = ("pretrain", "sft", "rl_train")
#: (split, field) pairs counted, by the name the table gives them.
COUNTED = {"pretrain": ("pretrain", "text"), "sft prompt": ("sft", "prompt"),
           "sft response": ("sft", "response"), "heldout prompt": ("heldout", "prompt")}  # fmt: skip


def rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise SystemExit(f"{path} not found: --data must hold {', '.join(SPLITS)} and heldout")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def domain_of(row: dict) -> str:
    return row.get("domain") or row.get("id", "?").split("-", 1)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a demo data directory")
    ap.add_argument("--merges", type=int, default=512, help="most merges to learn")
    args = ap.parse_args()

    from rlcs.tokenizer import build_tokenizer, learn_merges

    data = {s: rows(args.data / f"{s}.jsonl") for s in (*SPLITS, "heldout")}
    texts = [r[k] for s in SPLITS for r in data[s] for k in ("text", "prompt", "response")
             if isinstance(r.get(k), str)]  # fmt: skip
    merges = learn_merges(texts, args.merges)
    plain, merged = build_tokenizer(), build_tokenizer(merges)
    print(f"{len(merges)} merges learnt from {len(texts)} texts (at most {args.merges} asked)")

    def count(tok, text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    print(f"{'domain':<10} {'text':<15} {'bytes':>7} {'merges':>7} {'ratio':>6}")
    for name, (split, field) in COUNTED.items():
        by_domain: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in data[split]:
            if isinstance(r.get(field), str):
                by_domain[domain_of(r)].append((count(plain, r[field]), count(merged, r[field])))
        for domain, pairs in sorted(by_domain.items()):
            b = statistics.mean(p[0] for p in pairs)
            m = statistics.mean(p[1] for p in pairs)
            print(f"{domain:<10} {name:<15} {b:>7.1f} {m:>7.1f} {m / b:>6.2f}")
            totals[name][0] += sum(p[0] for p in pairs)
            totals[name][1] += sum(p[1] for p in pairs)
    ratio = {k: v[1] / v[0] for k, v in totals.items() if v[0]}
    print(
        f"RESULT merges={len(merges)} pretrain_ratio={ratio['pretrain']:.3f} "
        f"sft_prompt_ratio={ratio['sft prompt']:.3f} "
        f"sft_response_ratio={ratio['sft response']:.3f} "
        f"heldout_prompt_ratio={ratio['heldout prompt']:.3f}"
    )


if __name__ == "__main__":
    main()
