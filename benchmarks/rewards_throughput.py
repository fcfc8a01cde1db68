"""Items per second through ``rewards.score_batch`` per domain, and the same math items through
math-verify's ``parse`` + ``verify`` in this process, side by side in one run.

The math items imitate GRPO scoring: groups of rollouts per prompt, with the answers a model
writes (the right value in several spellings, a few wrong values). ``score_batch`` runs with an
empty cache at the start. math-verify runs with its signal timeouts off (that is its fastest
mode). Prints one line per domain, then ``RESULT ...``.

    python benchmarks/rewards_throughput.py [--prompts 200] [--group 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from rounds import count

GLM = "<think>Working.</think><answer>The answer is <|begin_of_box|>{}<|end_of_box|>.</answer>"


def math_problems(rng: random.Random, n: int) -> list[tuple[str, list[str], list[str]]]:
    """(ground truth, right spellings, wrong answers) for ``n`` problems of mixed kinds."""
    out = []
    for i in range(n):
        kind = i % 8
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        if kind == 0:
            out.append((str(a * b), [str(a * b), f"{a * b}.0"], [str(a * b + 1), str(a + b)]))
        elif kind == 1:
            out.append(
                (
                    f"\\frac{{{a}}}{{{b + 100}}}",
                    [f"{a}/{b + 100}", f"\\dfrac{{{a}}}{{{b + 100}}}"],
                    [f"{a + 1}/{b + 100}"],
                )
            )
        elif kind == 2:
            out.append((f"{a}.{b}", [f"{a}.{b}", f"{a}.{b}0"], [f"{a}.{b + 1}"]))
        elif kind == 3:
            out.append(
                (
                    f"{a}\\sqrt{{2}}",
                    [f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}"],
                    [f"{a}\\sqrt{{3}}"],
                )
            )
        elif kind == 4:
            out.append(
                (
                    f"\\frac{{{a}\\pi}}{{{b}}}",
                    [f"\\frac{{{a}\\pi}}{{{b}}}", f"{a}\\pi/{b}"],
                    [f"\\frac{{{a}\\pi}}{{{b + 1}}}"],
                )
            )
        elif kind == 5:
            out.append(
                (f"[{a}, {a + b})", [f"[{a},{a + b})"], [f"[{a}, {a + b}]", f"({a}, {a + b})"])
            )
        elif kind == 6:
            out.append(
                (
                    f"x^2+{a + b}x+{a * b}",
                    [f"(x+{a})(x+{b})", f"x^2+{a + b}x+{a * b}"],
                    [f"(x+{a})(x-{b})"],
                )
            )
        else:
            out.append((f"\\{{{a}, {b + 100}\\}}", [f"\\{{{b + 100}, {a}\\}}"], [f"\\{{{a}\\}}"]))
    return out


def math_items(rng: random.Random, prompts: int, group: int) -> list[tuple[str, str]]:
    pairs = []
    for gt, right, wrong in math_problems(rng, prompts):
        for _ in range(group):
            pairs.append((rng.choice(right if rng.random() < 0.6 else wrong), gt))
    return pairs


def ocr_items(rng: random.Random, n: int) -> list[dict]:
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "chart",
        "axis",
        "value",
        "total",
        "revenue",
        "2019",
    ]
    items = []
    for _ in range(n):
        gt = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        pred = list(gt)
        for _ in range(rng.randint(0, 4)):
            pred[rng.randrange(len(pred))] = rng.choice("abcdefxyz ")
        items.append({"domain": "ocr", "response": GLM.format("".join(pred)), "answer": gt})
    return items


def _box(rng: random.Random) -> list[int]:
    x, y = rng.randint(0, 800), rng.randint(0, 800)
    return [x, y, x + rng.randint(20, 190), y + rng.randint(20, 190)]


def grounding_items(rng: random.Random, n: int) -> list[dict]:
    items = []
    for _ in range(n):
        gt = [_box(rng) for _ in range(rng.randint(1, 3))]
        pred = [[min(999, max(0, v + rng.randint(-15, 15))) for v in b] for b in gt]
        pred = [b for b in pred if b[0] < b[2] and b[1] < b[3]] or [_box(rng)]
        items.append(
            {"domain": "grounding", "response": GLM.format(json.dumps(pred)), "answer": gt}
        )
    return items


def gui_items(rng: random.Random, n: int) -> list[dict]:
    items = []
    for _ in range(n):
        b = _box(rng)
        kind = rng.randrange(3)
        if kind == 0:
            gt = {"action": "click", "box": b}
            pred = {
                "action": "click",
                "point": [rng.randint(b[0] - 20, b[2] + 20), rng.randint(b[1], b[3])],
            }
        elif kind == 1:
            gt = {"action": "type", "text": "hello world"}
            pred = {"action": "type", "text": rng.choice(["hello world", "hello  world", "Hello"])}
        else:
            gt = {"action": "scroll", "direction": "down"}
            pred = {"action": rng.choice(["scroll", "swipe"]), "direction": "down"}
        items.append({"domain": "gui", "response": GLM.format(json.dumps(pred)), "answer": gt})
    return items


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def run_mathverify(pairs: list[tuple[str, str]]) -> list[bool]:
    from math_verify import parse, verify

    out = []
    for pred, gt in pairs:
        g = parse(f"${gt}$", parsing_timeout=None)
        p = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
        out.append(bool(verify(g, p, timeout_seconds=None)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=count(1), default=200, help="math prompts (x group = items)")
    ap.add_argument("--group", type=count(1), default=8, help="rollouts per math prompt")
    ap.add_argument("--fast-items", type=count(1), default=40_000, help="items per fast domain")
    ap.add_argument("--workers", type=count(1), default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from rewards import RewardScorer

    rng = random.Random(args.seed)
    pairs = math_items(rng, args.prompts, args.group)
    math_batch = [{"domain": "math", "response": GLM.format(p), "answer": g} for p, g in pairs]
    fast = {
        "ocr": ocr_items(rng, args.fast_items),
        "grounding": grounding_items(rng, args.fast_items),
        "gui": gui_items(rng, args.fast_items),
    }
    print(f"cores={os.cpu_count()} workers={args.workers} math_items={len(pairs)}", flush=True)

    scorer = RewardScorer(args.workers, timeout_s=5.0)
    scorer.score_batch(ocr_items(random.Random(1), 200) + grounding_items(random.Random(1), 200))
    scorer.score_batch([{"domain": "math", "response": GLM.format("x^2"), "answer": "x^2+0"}] * 4)

    rates = {}
    for domain, items in fast.items():
        dt, _ = timed(scorer.score_batch, items)
        rates[domain] = len(items) / dt
        print(
            f"{domain:10s} {len(items):7d} items {dt:7.2f} s {rates[domain]:10.0f} items/s",
            flush=True,
        )

    dt, ours = timed(scorer.score_batch, math_batch)
    rates["math"] = len(pairs) / dt
    hits = sum(r.cached for r in ours)
    errors = sum(r.error is not None for r in ours)
    print(f"{'math':10s} {len(pairs):7d} items {dt:7.2f} s {rates['math']:10.0f} items/s "
          f"(cache hits {hits}, errors {errors})", flush=True)  # fmt: skip
    unique = list(dict.fromkeys(pairs))
    fresh = RewardScorer(args.workers, timeout_s=5.0)
    dt_u, _ = timed(
        fresh.score_batch,
        [{"domain": "math", "response": GLM.format(p), "answer": g} for p, g in unique],
    )
    print(f"{'math dist.':10s} {len(unique):7d} items {dt_u:7.2f} s {len(unique) / dt_u:10.0f} items/s "
          "(distinct pairs only, empty cache: the verifier without the cache's help)", flush=True)  # fmt: skip
    fresh.close()
    scorer.close()

    dt_mv, theirs = timed(run_mathverify, pairs)
    mv_rate = len(pairs) / dt_mv
    agree = sum((r.reward == 1.0) == t for r, t in zip(ours, theirs, strict=True))
    print(f"{'mathverify':10s} {len(pairs):7d} items {dt_mv:7.2f} s {mv_rate:10.0f} items/s "
          f"(agrees with ours on {agree}/{len(pairs)})", flush=True)  # fmt: skip
    for (pred, gt), r, t in list(zip(pairs, ours, theirs, strict=True)):
        if (r.reward == 1.0) != t:
            print(f"  disagree: pred={pred!r} gt={gt!r} ours={r.reward} math_verify={t}")
            break

    print(
        f"RESULT math_items_per_s={rates['math']:.0f} mathverify_items_per_s={mv_rate:.0f} "
        f"math_ratio={rates['math'] / mv_rate:.2f} ocr_items_per_s={rates['ocr']:.0f} "
        f"grounding_items_per_s={rates['grounding']:.0f} gui_items_per_s={rates['gui']:.0f}"
    )


if __name__ == "__main__":
    main()
