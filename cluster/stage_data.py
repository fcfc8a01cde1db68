"""The run's model and data: where the model comes from, and each stage's examples.

- RL reads items (``rlcs.data``); pretraining reads ``{"text", "images"?}`` rows and SFT
  ``{"prompt", "response", "images"?}`` rows, from JSONL files.
- With ``data.synthetic`` set, the task generators write the data into ``RUN_DIR/data`` first,
  and the stage reads its split (rl_train, pretrain or sft) from there.
- Supervised batches come from a seeded, epoch-by-epoch shuffle, so step ``s`` always sees the
  same examples: resuming at step ``s`` is just starting the stream there.
"""

from __future__ import annotations

import copy
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcs.config import Config, ConfigError, SyntheticDataConfig
from rlcs.data import (
    KNOWN_DOMAINS,
    DatasetError,
    Item,
    as_asked,
    check_row_images,
    load_items,
    read_rows,
)
from rlcs.images import ImageCheck, decode_image, file_exists
from rlcs.vlm_processor import IMAGE_TOKEN, takes_images

log = logging.getLogger(__name__)

SPLIT_OF_STAGE = {"rl": "rl_train", "pretrain": "pretrain", "sft": "sft"}


@dataclass
class StageData:
    items: list[Item] = field(default_factory=list)  # rl
    rows: list[dict[str, Any]] = field(default_factory=list)  # pretrain / sft
    files: list[Path] = field(default_factory=list)  # the files of the rows
    eval_items: list[Item] = field(default_factory=list)

    def by_id(self) -> dict[str, Item]:
        return {it.id: it for it in self.items}


def model_dir_problem(path: Path) -> str | None:
    """Why ``path`` is not a Hugging Face model directory the roles can load (no config.json,
    a config transformers does not know, no weights), or None. Checked in the driver before
    anything starts, so that the mistake is one line instead of an actor's traceback."""
    if not (path / "config.json").is_file():
        return "no config.json; not a Hugging Face model directory"
    weights = [*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin")]
    if not weights:
        return "no weights (*.safetensors or pytorch_model*.bin) beside its config.json"
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path)
    except Exception as e:  # transformers raises ValueError, OSError, KeyError, ... for these
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"its config.json is not one transformers can load ({reason})"
    from rlcs.vlm_processor import processor_config_problem

    return processor_config_problem(path)


def model_takes_images(cfg: Config) -> bool | None:
    """Whether the config's model has a vision tower: a tiny one by its kind, one at
    ``model.path`` by its config.json; None where that file cannot be read (yet)."""
    if cfg.model.path is None:
        return cfg.model.tiny != "text"
    return takes_images(cfg.model.path)  # None: model_dir_problem says what is wrong


def _model_name(cfg: Config) -> str:
    return f"model.path {cfg.model.path}" if cfg.model.path else f"model.tiny={cfg.model.tiny}"


def images_for_text_model(cfg: Config, where: str, what: str) -> str:
    """Why ``what`` at ``where``, which has images, cannot go to the config's text-only model
    (its engines and learner would fail on it at the step that draws it)."""
    fix = (
        "set data.synthetic.text_only=true (math and OCR only)"
        if cfg.data.synthetic is not None
        else "give items without images"
    )
    return (
        f"{where}: {what} has images, but {_model_name(cfg)} is a text-only model (no vision "
        f"tower), which cannot read them: {fix}, or train a vision model (model.tiny=vlm, or a "
        "model.path whose config.json has a vision_config)"
    )


def resolve_model(cfg: Config, run_dir: Path) -> Path:
    """The HF directory the learner and engines load: ``model.path``, or a tiny model built
    once into ``RUN_DIR/model``."""
    if cfg.model.path:
        path = Path(cfg.model.path)
        if problem := model_dir_problem(path):
            raise FileNotFoundError(f"model.path {path}: {problem}")
        return path
    from rlcs.models import build_tiny_text_model, build_tiny_vlm

    path = run_dir / "model"
    if not (path / "config.json").is_file():
        build = build_tiny_text_model if cfg.model.tiny == "text" else build_tiny_vlm
        overrides = copy.deepcopy(cfg.model.tiny_overrides)  # the builder pops sub-configs
        if cfg.model.tiny == "vlm_moe":
            overrides["moe"] = True
        merges = tokenizer_merges(cfg, run_dir)
        build(path, seed=cfg.run.seed, dtype=cfg.model.dtype, merges=merges, **overrides)
    return path


#: The fields of a data row whose text a tiny model's tokenizer learns its merges from.
CORPUS_FIELDS = ("text", "prompt", "response")


def tokenizer_merges(cfg: Config, run_dir: Path) -> list[tuple[str, str]]:
    """The BPE merges of a tiny model's tokenizer: ``model.tokenizer_merges`` of them, learnt
    from ``model.tokenizer_corpus`` or the stage's training files; none when that is 0."""
    if not cfg.model.tokenizer_merges:
        return []
    from rlcs.tokenizer import learn_merges

    files = [Path(p) for p in cfg.model.tokenizer_corpus] or data_files(cfg, run_dir)[0]
    texts = []
    for path in files:
        if not path.is_file():
            raise DatasetError(path, None, "model.tokenizer_corpus: file not found")
        texts += [row[k] for _, row in read_rows(path) for k in CORPUS_FIELDS
                  if isinstance(row.get(k), str)]  # fmt: skip
    if not texts:
        raise DatasetError(files[0], None, "model.tokenizer_merges: no text, prompt or response "
                           "fields to learn the tokenizer's merges from")  # fmt: skip
    return learn_merges(texts, cfg.model.tokenizer_merges)


def data_files(cfg: Config, run_dir: Path) -> tuple[list[Path], list[Path]]:
    """(train files, eval files) for the config's stage, building synthetic data if asked."""
    syn = cfg.data.synthetic
    if syn is None:
        if not cfg.data.train:
            raise ConfigError(
                f"data.train is empty and data.synthetic is not set: the {cfg.stage} stage has "
                "no data (give data.train files, or a data.synthetic section)"
            )
        return [Path(p) for p in cfg.data.train], [Path(p) for p in cfg.data.eval]
    out = run_dir / "data"
    marker, building = out / "done.json", out / "building.json"
    want = syn.model_dump(mode="json")
    if not marker.is_file() or json.loads(marker.read_text()) != want:
        if out.is_dir() and any(out.iterdir()) and not (marker.is_file() or building.is_file()):
            raise FileExistsError(
                f"{out} holds files that data.synthetic did not write; move them, or give "
                "them as data.train / data.eval instead of data.synthetic"
            )
        from rlcs.tasks import check_ready

        # a missing tool (the GUI domain's Chromium) stops the build before it writes anything,
        # not once the domains before it are generated
        check_ready(syn.domains)
        out.mkdir(parents=True, exist_ok=True)
        building.write_text(json.dumps(want))  # an interrupted build is ours to redo
        marker.unlink(missing_ok=True)
        build_synthetic(syn, out)
        marker.write_text(json.dumps(want))
        building.unlink()
    return [out / f"{SPLIT_OF_STAGE[cfg.stage]}.jsonl"], [out / "heldout.jsonl"]


def build_synthetic(syn: SyntheticDataConfig, out: Path) -> dict[str, Path]:
    """Write the ``data.synthetic`` section's splits into ``out``; the path of each split."""
    from rlcs.tasks import build_task_data

    domains = tuple(syn.domains)
    return build_task_data(out, sizes=dict(syn.sizes), domains=domains, seed=syn.seed,
                           difficulty={d: syn.difficulty_of(d) for d in domains},
                           text_only=syn.text_only, heldout=syn.heldout)  # fmt: skip


def absolute_images(item: Item, base: Path) -> Item:
    """The item with image paths made absolute, so any worker on any node can open them."""
    if not item.images:
        return item
    refs = [
        str((base / r).resolve()) if not r.startswith("data:") and file_exists(base / r) else r
        for r in item.images
    ]
    return item.model_copy(update={"images": refs})


def check_ground_truths(path: Path, items: list[Item]) -> list[Item]:
    """``items`` (of the file ``path``) if every one's ground truth can be scored by its
    domain's verifier (`rewards.answer_problem`); else a DatasetError naming the items that
    cannot. Such an item would be left out of training as unscorable each time it is drawn."""
    from rewards import answer_problem

    bad = [(it.id, problem) for it in items if (problem := answer_problem(it.domain, it.answer))]
    if bad:
        first_id, first = bad[0]
        more = f" (and {len(bad) - 1} more: {[i for i, _ in bad[1:6]]}" + (
            ", ...)" if len(bad) > 6 else ")"
        )
        raise DatasetError(
            path, None, f"item {first_id!r} has an answer no verifier can score against: "
            f"{first}" + (more if len(bad) > 1 else ""),
        )  # fmt: skip
    return items


def register_domains(custom_domains: Mapping[str, str]) -> frozenset[str]:
    """Register ``reward.custom_domains`` (domain -> 'module:Verifier') in this process, so
    that its items load and their ground truths are checked here; returns every domain an
    item may name. A path that does not import is a ValueError naming the domain."""
    from rewards import register

    for domain, path in custom_domains.items():
        try:
            register(domain, path)
        except (ImportError, AttributeError, TypeError, ValueError) as e:
            raise ValueError(
                f"reward.custom_domains: {domain!r}: cannot load {path!r} ({type(e).__name__}: {e})"
            ) from None
    return KNOWN_DOMAINS | frozenset(custom_domains)


def load_rl_items(
    paths: list[Path],
    custom_domains: Mapping[str, str] | None = None,
    tiers: Sequence[str] | None = None,
    image_check: ImageCheck = "decode",
    multiple_choice: str = "fill_in",
) -> list[Item]:
    """The items of ``paths`` as RL, evaluation and grading take them: validated (domains of
    ``reward.custom_domains`` included; a ``difficulty`` tier one of ``tiers`` where given;
    images checked as ``image_check`` says, ``data.image_check``), multiple-choice items asked
    as ``multiple_choice`` says (``rlcs.data.as_asked``), with their ground truths checked and
    their image paths made absolute."""
    domains = register_domains(custom_domains or {})
    out = []
    for p in paths:
        items = [as_asked(it, multiple_choice) for it in load_items(p, domains, image_check, tiers)]
        out += [absolute_images(it, p.parent) for it in check_ground_truths(p, items)]
    return out


def tier_names(cfg: Config) -> tuple[str, ...]:
    """The names an item's ``difficulty`` may give a tier by, under the config's curriculum."""
    from rlcs.curriculum.tiers import UNSEEN, TierScheme

    return tuple(n for n in TierScheme.from_config(cfg.curriculum).names if n != UNSEEN)


def _warn_unweighted(weights: Mapping[str, float], items: Sequence[Item]) -> None:
    """Name the domains that hold RL items but get no share of the batch: left out of a
    ``data.domain_weights`` that names others, or given 0, they are never drawn."""
    if not weights:
        return
    held: dict[str, int] = {}
    for it in items:
        held[it.domain] = held.get(it.domain, 0) + 1
    unweighted = [f"{d} ({n} items)" for d, n in sorted(held.items()) if not weights.get(d)]
    if unweighted:
        log.warning("data.domain_weights gives no share to %s: the sampler never draws them; "
                    "give each a weight to train on it", ", ".join(unweighted))  # fmt: skip


def rollout_row_problem(cfg: Config) -> str | None:
    """Why an RL rollout at its full budget would not fit one of the learner's packed rows
    (``data.seq_len``), before its prompt is even counted; None when it would. Such a rollout
    stops the learner's step with an error when it comes, maybe hours into the run."""
    ro = cfg.rollout
    longest = ro.max_answer_tokens if ro.nothink else ro.max_think_tokens + 2 + ro.max_answer_tokens
    if longest < cfg.data.seq_len:
        return None
    how = ("rollout.max_answer_tokens" if ro.nothink else
           "rollout.max_think_tokens + 2 forced tokens + rollout.max_answer_tokens")  # fmt: skip
    return (
        f"data.seq_len={cfg.data.seq_len} cannot hold a rollout at its full budget ({longest} "
        f"response tokens: {how}), let alone its prompt: one that uses its budget stops the "
        "learner's step; raise data.seq_len or lower the budget"
    )


def load_stage_data(cfg: Config, run_dir: Path) -> StageData:
    train, evals = data_files(cfg, run_dir)
    images = cfg.data.image_check
    if cfg.stage == "rl":
        custom = cfg.reward.custom_domains
        # the sampler reads difficulty: an item's tier must be one of the curriculum's
        asked = cfg.data.multiple_choice
        items = load_rl_items(train, custom, tier_names(cfg), images, asked)
        if not items:
            raise DatasetError(train[0], None, "no rl items")
        absent = sorted(set(cfg.data.domain_weights) - {it.domain for it in items})
        if absent:  # a weight for a domain no item has: its share would be sampled from nothing
            have = ", ".join(sorted({it.domain for it in items}))
            raise ValueError(f"data.domain_weights names {', '.join(map(repr, absent))}, which no "
                             f"RL item has (the items' domains: {have})")  # fmt: skip
        _warn_unweighted(cfg.data.domain_weights, items)
        eval_items = load_rl_items(evals, custom, None, images, asked)
        if model_takes_images(cfg) is False:
            for files, its in ((train, items), (evals, eval_items)):
                if first := next((it for it in its if it.images), None):
                    where = ", ".join(map(str, files))
                    raise ValueError(images_for_text_model(cfg, where, f"item {first.id!r}"))
        if cfg.run.eval_every and not eval_items:
            log.warning("run.eval_every=%d asks for a held-out evaluation, but data.eval holds no "
                        "items: the run makes none; give data.eval files, or set "
                        "run.eval_every=0", cfg.run.eval_every)  # fmt: skip
        return StageData(items=items, eval_items=eval_items)
    missing = [p for p in train if not p.is_file()]
    if missing:
        raise DatasetError(missing[0], None, "dataset file not found")
    rows, with_images = [], []
    for p in train:
        rows += _read_rows(p, cfg.stage, with_images)
    if not rows:
        raise DatasetError(train[0], None, f"no {cfg.stage} examples")
    if with_images and model_takes_images(cfg) is False:
        path, line, _ = with_images[0]
        raise ValueError(images_for_text_model(cfg, f"{path}:{line}", f"this {cfg.stage} row"))
    # else opened at its step, far into the run, unnamed; checked after every cheaper check
    check_row_images(with_images, images)
    return StageData(rows=rows, files=train)


def _read_rows(
    path: Path, stage: str, with_images: list[tuple[Path, int, list[str]]]
) -> list[dict[str, Any]]:
    """The pretraining or SFT rows of ``path``; (path, line, images) of each row with images
    is added to ``with_images``, for their check."""
    need = ("text",) if stage == "pretrain" else ("prompt", "response")
    rows = []
    for lineno, row in read_rows(path):
        missing = [k for k in need if not isinstance(row.get(k), str)]
        if missing:
            raise DatasetError(path, lineno, f"a {stage} row needs {', '.join(missing)}")
        images = row.get("images", [])
        bad = (
            [r for r in images if not isinstance(r, str)] if isinstance(images, list) else [images]
        )
        if bad:  # a lone path string would otherwise be read letter by letter
            raise DatasetError(path, lineno, "images: expected a list of paths or base64 "
                               f"strings, got {bad[0]!r:.60}")  # fmt: skip
        if stage == "sft":
            _check_sft_response(path, lineno, row)
        elif (found := row["text"].count(IMAGE_TOKEN)) != len(images):
            # the learner puts each image where its placeholder is, at the step that draws it
            raise DatasetError(path, lineno, f"text: {found} {IMAGE_TOKEN} placeholders for "
                               f"{len(images)} images; put one where each image goes")  # fmt: skip
        if images:
            with_images.append((path, lineno, images))
        row["_base"] = str(path.parent)
        rows.append(row)
    return rows


def _check_sft_response(path: Path, lineno: int, row: dict[str, Any]) -> None:
    """Refuse, at load, an SFT row the learner would refuse at the step that draws it: a
    response not in the recipe's format (``rlcs.sft.check_response``), or a ``thinking`` flag
    that is no boolean."""
    from rlcs.sft import check_response

    thinking = row.get("thinking", True)
    if not isinstance(thinking, bool):
        raise DatasetError(path, lineno, f"thinking: expected true or false, got {thinking!r:.60}")
    try:
        check_response(row["response"], thinking)
    except ValueError as e:
        raise DatasetError(path, lineno, f"response: {e} (got {row['response']!r:.80})") from None


def supervised_batch(rows: list[dict[str, Any]], step: int, batch: int, seed: int) -> list[dict]:
    """Rows of step ``step`` (0-based) with their images opened; epoch-wise seeded shuffle."""
    n = len(rows)
    orders: dict[int, list[int]] = {}
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, pos = divmod(k, n)
        if epoch not in orders:
            orders[epoch] = list(range(n))
            random.Random(seed * 100_003 + epoch).shuffle(orders[epoch])
        row = rows[orders[epoch][pos]]
        base = Path(row["_base"])
        ex = {k: v for k, v in row.items() if not k.startswith("_") and k != "images"}
        ex["images"] = [decode_image(ref, base) for ref in row.get("images", [])]
        out.append(ex)
    return out
