"""Whether a model copies a looked-up value: the induction head that finding a named thing needs.

The demo's GUI pick and grounding target name one of several things on the image; writing the
right one's place means finding the earlier mention of the name and copying what followed it
(docs/demo.md, "Looking a name up"). This writes text lists of the GUI menu's labels with
three-digit numbers drawn at random, with a lookup or more after a ``;`` (``Save 763, Help 469,
Menu 405; Help 469``: only copying predicts the number), as pretraining rows to put in a run's
``data.train``, and asks a checkpoint to finish fresh lists up to the number, greedy.

    python benchmarks/induction_probe.py write runs/lists.jsonl --lists 2048
    rlcs train runs/demo/pretrain/config.yaml --set run.root=runs/lists --set run.name=pre \\
        --set 'data.train=["runs/lists.jsonl"]' --set learner.steps=2400
    python benchmarks/induction_probe.py probe runs/lists/pre/hf --lists 100

``probe`` ends with ``RESULT lists=… copied=… first_digit=…``: the fractions of the fresh
lists whose number the model wrote exactly, and whose first digit it wrote.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from rounds import count

#: The probe's fresh lists come from a seed of their own, not the written rows' (``--seed``).
PROBE_SEED = 123


def make_list(rng: random.Random, queries: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """A list of 2 to 5 labels, each with a random three-digit number, and lookups of as many
    of its labels (``queries``; by default 1 to 3, drawn): the list's text, no lookup, and the
    (label, number) pairs looked up, in order."""
    from rlcs.tasks.gui import LABELS

    k = rng.randint(2, 5)
    keys = rng.sample(LABELS, k)
    values = [str(rng.randint(100, 999)) for _ in keys]
    listed = ", ".join(f"{a} {b}" for a, b in zip(keys, values, strict=True))
    if queries is None:
        queries = rng.randint(1, min(3, k))
    picks = rng.sample(range(k), min(queries, k))
    return listed, [(keys[i], values[i]) for i in picks]


def write_lists(out: Path, lists: int, seed: int) -> None:
    """Write ``lists`` pretraining rows (``{"id", "text"}``) of 1 to 3 lookups each to ``out``."""
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for i in range(lists):
            listed, looked_up = make_list(rng)
            text = listed + "".join(f"; {k} {v}" for k, v in looked_up)
            f.write(json.dumps({"id": f"lookup-{i:05d}", "text": text}) + "\n")


def check_model(path: Path) -> None:
    """A one-line error, before anything heavy is imported, when ``path`` holds no model."""
    if not (path / "config.json").is_file():
        raise SystemExit(f"{path}: no config.json there; probe takes an HF model directory")


def probe(path: Path, lists: int) -> tuple[float, float]:
    """The fractions of ``lists`` fresh lists whose looked-up number the model at ``path``
    writes exactly, greedy, and whose first digit it writes."""
    check_model(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from rlcs.progress import progress_bar
    from rlcs.vlm_processor import is_vision_model, load_vlm_processor

    if is_vision_model(path):
        tokenizer = load_vlm_processor(path).tokenizer
        model = AutoModelForImageTextToText.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    rng = random.Random(PROBE_SEED)
    exact = first = 0
    for _ in progress_bar(range(lists), desc="lists", unit="list"):
        listed, [(key, value)] = make_list(rng, 1)
        enc = tokenizer(f"{listed}; {key} ", return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        text = tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        digits = re.match(r"\d*", text).group()
        exact += digits == value
        first += digits[:1] == value[0]
    return exact / lists, first / lists


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the lists as pretraining rows (JSONL)")
    w.add_argument("out", type=Path)
    w.add_argument("--lists", type=count(1), default=2048)
    w.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("probe", help="a checkpoint's copies on fresh lists")
    p.add_argument("model", type=Path, help="an HF model directory")
    p.add_argument("--lists", type=count(1), default=100)
    args = ap.parse_args(argv)
    if args.command == "write":
        write_lists(args.out, args.lists, args.seed)
        print(f"{args.lists} lists -> {args.out}")
        return
    copied, first_digit = probe(args.model, args.lists)
    print(f"RESULT lists={args.lists} copied={copied:.3f} first_digit={first_digit:.3f}")


if __name__ == "__main__":
    main()
