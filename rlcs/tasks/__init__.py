"""Synthetic multimodal tasks for the demo and tests: math, OCR, grounding and GUI.

Every generator is deterministic from a seed and has a difficulty knob. ``build_task_data``
writes, for each domain, the RL items (train and held-out splits, in the dataset format of
:mod:`rlcs.data`), a pretraining corpus of image captions, and SFT examples in the
``<think>…</think><answer>…<|begin_of_box|>…<|end_of_box|></answer>`` format.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import random
import re
from collections.abc import Iterable
from pathlib import Path

from rlcs.progress import progress_bar
from rlcs.tasks.base import Example, TaskGenerator
from rlcs.tasks.grounding import GroundingTask
from rlcs.tasks.gui import GuiTask
from rlcs.tasks.math import MathTask
from rlcs.tasks.ocr import OcrTask

GENERATORS: dict[str, type[TaskGenerator]] = {
    "math": MathTask,
    "ocr": OcrTask,
    "grounding": GroundingTask,
    "gui": GuiTask,
}
SPLITS = ("rl_train", "heldout", "sft", "pretrain")
#: Examples per domain of each split, where ``build_task_data``'s ``sizes`` names none.
DEFAULT_SIZES = {"rl_train": 64, "heldout": 32, "sft": 64, "pretrain": 128}
IMAGE_SLOT = "<|begin_of_image|><|image|><|end_of_image|>"
TEXT_DOMAINS = ("math", "ocr")

__all__ = ["GENERATORS", "Example", "TaskGenerator", "build_task_data", "check_ready", "generate"]


def generate(
    domain: str,
    n: int,
    seed: int,
    difficulty: tuple[float, float] = (0.0, 1.0),
    generator: TaskGenerator | None = None,
):
    """Yield ``n`` examples of one domain; the same seed gives the same examples.

    ``generator``: an open generator of that domain to draw with (the caller closes it; the GUI
    one keeps its browser between calls); by default one is made and closed here.

    A bad argument (an unknown domain, a difficulty range outside [0, 1], a generator of
    another domain) is a ValueError here, at the call, not at the first example drawn.
    """
    if domain not in GENERATORS:
        raise ValueError(f"unknown task domain {domain!r}; known: {', '.join(GENERATORS)}")
    lo, hi = _difficulty_range(difficulty)
    if generator is not None and generator.domain != domain:
        raise ValueError(
            f"generator is a {generator.domain!r} generator, and the domain is {domain!r}"
        )
    return _draw(domain, n, seed, lo, hi, generator)


def _draw(
    domain: str, n: int | None, seed: int, lo: float, hi: float, generator: TaskGenerator | None
):
    """``n`` examples (None: without end) from the seed's stream, ``gen.batch`` at a time."""
    rng = random.Random(f"{domain}:{seed}")
    gen = generator if generator is not None else GENERATORS[domain]()
    try:
        left = n
        while left is None or left > 0:
            k = gen.batch if left is None else min(gen.batch, left)
            yield from gen.sample_many(rng, lo, hi, k)
            left = None if left is None else left - k
    finally:
        if generator is None:
            gen.close()


#: ``heldout="apart"``: one task in this many belongs to the held-out split alone
HELDOUT_SHARE = 5
#: how the held-out split is drawn: like the others ("drawn"), or from tasks kept apart
HELDOUT_MODES = ("drawn", "apart")


def held_apart(ex: Example) -> bool:
    """Whether ``ex``'s task (``Example.task``) is one of those the held-out split keeps to
    itself under ``heldout="apart"``: one in ``HELDOUT_SHARE``, by a hash of the domain and the
    task, the same for every seed and split."""
    key = f"{ex.domain}\n{ex.task()}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % HELDOUT_SHARE == 0


def _draw_apart(
    domain: str, n: int, seed: int, lo: float, hi: float, gen: TaskGenerator, held: bool
):
    """``n`` examples, drawn as ``_draw`` draws them, of the held-out tasks (``held``) or of
    the others; a ValueError when the draws find too few of them (a difficulty range whose
    tasks are so few that none, or nearly none, falls on that side)."""
    if n == 0:
        return
    made = 0
    for tries, ex in enumerate(_draw(domain, None, seed, lo, hi, gen), start=1):
        if held_apart(ex) == held:
            made += 1
            yield ex
            if made == n:
                return
        elif tries - made > 50 * made + 500:
            side = "held-out" if held else "training"
            raise ValueError(
                f"{domain}: {made} of {n} {side} examples in {tries} draws at difficulty "
                f"[{lo:g}, {hi:g}]: too few of its tasks there fall on the {side} side of "
                f"heldout=apart (one task in {HELDOUT_SHARE} is held out); widen the "
                "difficulty range, or draw the held-out split like the others (heldout=drawn)"
            )


def _difficulty_range(difficulty, where: str = "") -> tuple[float, float]:
    """``difficulty`` as ``(lo, hi)``, or a ValueError saying what a range must be."""
    try:
        lo, hi = difficulty
        ok = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (lo, hi))
    except (TypeError, ValueError):
        ok = False
    if not ok or not 0.0 <= lo <= hi <= 1.0:  # NaN fails the comparison too
        raise ValueError(
            f"difficulty range{where} must be [lo, hi] with 0 <= lo <= hi <= 1, got {difficulty!r}"
        )
    return float(lo), float(hi)


def check_ready(domains: Iterable[str]) -> None:
    """Raise, saying what to install, if a generator of ``domains`` cannot run on this machine
    (``TaskGenerator.check_ready``; the GUI one needs Chromium)."""
    for domain in dict.fromkeys(domains):
        GENERATORS[domain].check_ready()


def build_task_data(
    out_dir: str | Path,
    sizes: dict[str, int] | None = None,
    domains: tuple[str, ...] = tuple(GENERATORS),
    seed: int = 0,
    difficulty: tuple[float, float] | dict[str, tuple[float, float]] = (0.0, 1.0),
    progress: bool = True,
    text_only: bool = False,
    heldout: str = "drawn",
) -> dict[str, Path]:
    """Write ``rl_train.jsonl``, ``heldout.jsonl``, ``sft.jsonl`` and ``pretrain.jsonl`` (with
    their images) under ``out_dir``; return the path of each split.

    ``sizes`` gives the number of examples per domain for each split. ``difficulty`` is one
    [lo, hi] range for every domain, or a range per domain (every domain in ``domains`` named).
    ``text_only`` writes the task into the prompt and no images (for text-only models); only
    math and OCR can do that.

    ``heldout``: "drawn" draws the held-out split like the others, from a seed of its own; at a
    low difficulty the tasks come from small sets, so most held-out tasks then also occur in
    the training splits (and a math or OCR image, drawn the same for the same task, is often
    the very image). "apart" keeps one task in ``HELDOUT_SHARE`` (``held_apart``) to the
    held-out split and the rest to the training splits, which then share no task with it.

    Everything is checked before anything is written: an unknown domain or split is a
    ValueError naming the valid ones, so is a difficulty range outside [0, 1] or a size that
    is not a whole number of at least 0, and a generator that cannot run here (the GUI one
    without Chromium) says so before the first domain is generated.
    """
    if unknown := [d for d in domains if d not in GENERATORS]:
        raise ValueError(
            f"unknown task domain {unknown[0]!r} in domains; the domains: {', '.join(GENERATORS)}"
        )
    if unknown := [k for k in (sizes or {}) if k not in SPLITS]:
        raise ValueError(f"unknown split {unknown[0]!r} in sizes; the splits: {', '.join(SPLITS)}")
    if text_only and (bad := [d for d in domains if d not in TEXT_DOMAINS]):
        raise ValueError(
            f"text_only data can only be built for {', '.join(TEXT_DOMAINS)}, not {bad}"
        )
    if isinstance(difficulty, dict):
        if missing := [d for d in domains if d not in difficulty]:
            raise ValueError(f"no difficulty range for {', '.join(missing)}")
        ranges = {d: _difficulty_range(difficulty[d], f" of {d}") for d in domains}
    else:
        ranges = {d: _difficulty_range(difficulty) for d in domains}
    if heldout not in HELDOUT_MODES:
        raise ValueError(f"heldout must be one of {', '.join(HELDOUT_MODES)}, got {heldout!r}")
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    for split, size in sizes.items():
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 0:
            raise ValueError(f"sizes[{split!r}] must be a whole number of at least 0, got {size!r}")
    check_ready(domains)
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    files = {split: (out / f"{split}.jsonl").open("w", encoding="utf-8") for split in SPLITS}
    total = sum(sizes[s] for s in SPLITS) * len(domains)
    bar = progress_bar(total=total, desc="synthetic tasks", unit="ex", disable=not progress)
    written: set[str] = set()
    try:
        for domain in domains:
            gen = GENERATORS[domain]()  # one per domain: the GUI one's browser serves every split
            try:
                for k, split in enumerate(SPLITS):
                    if heldout == "apart":
                        examples = _draw_apart(domain, sizes[split], seed * 1000 + k,
                                               *ranges[domain], gen, split == "heldout")  # fmt: skip
                    else:
                        examples = generate(domain, sizes[split], seed=seed * 1000 + k,
                                            difficulty=ranges[domain], generator=gen)  # fmt: skip
                    for i, ex in enumerate(examples):
                        item_id = f"{domain}-{split}-{i:05d}"
                        if text_only:
                            row = _text_row(split, item_id, ex)
                        else:
                            rel = f"images/{item_id}.png"
                            ex.image.save(out / rel)
                            written.add(f"{item_id}.png")
                            row = _row(split, item_id, rel, ex)
                        files[split].write(json.dumps(row, ensure_ascii=False) + "\n")
                        bar.update()
            finally:
                gen.close()
    finally:
        bar.close()
        for f in files.values():
            f.close()
    remove_stale_images(out / "images", written)
    return {split: out / f"{split}.jsonl" for split in SPLITS}


#: The name of an image a build writes: ``{domain}-{split}-{index:05d}.png``.
BUILT_IMAGE = re.compile(rf"[a-z_]+-(?:{'|'.join(SPLITS)})-\d{{5}}\.png")


def remove_stale_images(images: Path, written: set[str]) -> int:
    """Delete the images an earlier build wrote into ``images`` that this one did not (a
    smaller size, a domain left out, a text-only build): no split refers to them any more.
    Only names a build writes (``BUILT_IMAGE``) are touched; other files stay. How many went."""
    stale = [p for p in images.iterdir() if BUILT_IMAGE.fullmatch(p.name) and p.name not in written]
    for p in stale:
        p.unlink()
    return len(stale)


def _row(split: str, item_id: str, image: str, ex: Example) -> dict:
    if split == "pretrain":
        # the image placeholder goes where the image sits in the text; the processor expands it
        return {"id": item_id, "text": f"{IMAGE_SLOT}{ex.caption}", "images": [image]}
    row = {"id": item_id, "domain": ex.domain, "prompt": ex.prompt, "images": [image], "answer": ex.answer,
           "meta": ex.meta}  # fmt: skip
    if split == "sft":
        row["response"] = ex.response()
    return row


def _text_row(split: str, item_id: str, ex: Example) -> dict:
    if split == "pretrain":
        return {"id": item_id, "text": f"{ex.text_prompt} {ex.reasoning}"}
    row = {
        "id": item_id,
        "domain": ex.domain,
        "prompt": ex.text_prompt,
        "answer": ex.answer,
        "meta": ex.meta,
    }
    if split == "sft":
        row["response"] = ex.response()
    return row
