"""Learner checkpoints that resume exactly, the model's weights module by module (for weight
pushes and the HF export), and the HF export itself.

A checkpoint is ``CKPT_ROOT/<tag>/`` holding DeepSpeed's state (model, optimizer, LR scheduler),
one RNG file per rank, and the driver's data/sampler position. All ranks write into
``CKPT_ROOT/.tmp-<tag>`` and fsyncs it; rank 0 renames it into place only after every rank has
finished, then rewrites ``CKPT_ROOT/latest`` through a temporary file. A crash mid-save leaves the
previous checkpoint and ``latest`` untouched, and a power loss after a save returned cannot leave
its files empty under the curriculum snapshot that points at them (which is fsynced too). What a
crash left in ``.tmp-*`` is removed by the next save.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from actors.learner_model import checkpoint_layout
from rlcs.curriculum.snapshot import fsync_path

_DS_TAG = "state"


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def fsync_tree(path: str | Path) -> None:
    """Flush every file under ``path``, and the folders that name them, to the disk."""
    for folder, _, files in os.walk(path):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def save(engine: Any, root: str | Path, tag: str, rank: int, data_state: Any = None) -> Path:
    """Collective: every rank calls it. Returns the final checkpoint directory."""
    root = Path(root)
    tmp, final = root / f".tmp-{tag}", root / tag
    if rank == 0:
        # no other save of this run is under way: any .tmp-* is what a crash mid-save left
        for stale in root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    engine.save_checkpoint(str(tmp), tag=_DS_TAG, client_state={"data_state": data_state})
    torch.save(rng_state(), tmp / _DS_TAG / f"rng_rank{rank}.pt")
    # each rank flushes what it wrote (and, on one node, finds the others' files mostly flushed)
    fsync_tree(tmp)
    _barrier()
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        latest_tmp = root / "latest.tmp"
        with open(latest_tmp, "w") as f:
            f.write(tag)
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, root / "latest")
        fsync_path(root)
    _barrier()
    return final


def latest_tag(root: str | Path) -> str | None:
    p = Path(root) / "latest"
    return p.read_text().strip() if p.is_file() else None


def load(engine: Any, root: str | Path, tag: str | None, rank: int) -> Any:
    """Collective: restore engine and RNG state; returns the saved data/sampler position."""
    tag = tag or latest_tag(root)
    if tag is None:
        raise FileNotFoundError(f"{root}: no checkpoint (no 'latest' file)")
    path = Path(root) / tag
    if not (path / _DS_TAG).is_dir():
        raise FileNotFoundError(f"{path}: not a learner checkpoint")
    loaded, client = engine.load_checkpoint(str(path), tag=_DS_TAG)
    if loaded is None:
        raise RuntimeError(f"{path}: DeepSpeed could not load the checkpoint")
    rng_file = path / _DS_TAG / f"rng_rank{rank}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return (client or {}).get("data_state")


def copy_tokenizer_files(src: str | Path, dst: str | Path) -> None:
    """Write the source model's tokenizer, and its processor if it has one, next to the weights."""
    src, dst = Path(src), Path(dst)
    if (src / "rlcs_processor.json").is_file():  # this project's layout
        from rlcs.vlm_processor import Glm4vImageTextProcessor

        Glm4vImageTextProcessor.from_pretrained(src).save_pretrained(dst)
        return
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    for name in ("preprocessor_config.json", "processor_config.json",
                 "video_preprocessor_config.json", "chat_template.jinja"):  # fmt: skip
        if (src / name).is_file() and not (dst / name).exists():
            shutil.copy2(src / name, dst / name)


def apply_optimizer_settings(scheduler: Any, base_lrs: list[float], weight_decay: float) -> None:
    """The config's learning rates and weight decay, over those a checkpoint restores (the
    optimizer's parameter groups and the schedule's base rates are saved with it): a resumed
    run may change them, from the step it resumes at on its own schedule."""
    groups = scheduler.optimizer.param_groups
    if len(groups) != len(base_lrs):
        raise RuntimeError(
            f"the checkpoint's optimizer has {len(groups)} parameter groups and this config "
            f"{len(base_lrs)} (learner.lr_groups changed how parameters are grouped)"
        )
    scheduler.base_lrs = list(base_lrs)
    for g, base, factor in zip(groups, base_lrs, scheduler.lr_lambdas, strict=True):
        g["initial_lr"], g["lr"] = base, base * factor(scheduler.last_epoch)
        g["weight_decay"] = weight_decay
    scheduler._last_lr = [g["lr"] for g in groups]


def module_weights(
    module: Any, zero3: bool, as_saved: bool = False
) -> Iterator[tuple[str, torch.Tensor]]:
    """HF-named parameters and persistent buffers (what a checkpoint holds: GLM-4.5V's router
    ``e_score_correction_bias`` is a buffer in transformers and a parameter in vLLM), one module
    at a time; under ZeRO-3 each module is gathered, copied and released before the next (a
    collective: every rank iterates), so the full model is never materialised. With
    ``as_saved``, in the layout of a saved checkpoint (``learner_model.checkpoint_layout``)."""
    import deepspeed

    seen: set[int] = set()
    for mod_name, mod in module.named_modules():
        params = [(n, p) for n, p in mod.named_parameters(recurse=False) if id(p) not in seen]
        # ZeRO-3 partitions parameters only: buffers are whole on every rank
        buffers = [(n, b) for n, b in mod.named_buffers(recurse=False)
                   if n not in mod._non_persistent_buffers_set and id(b) not in seen]  # fmt: skip
        if not params and not buffers:
            continue
        seen.update(id(t) for _, t in params + buffers)
        ctx = deepspeed.zero.GatheredParameters([p for _, p in params]) if zero3 else nullcontext()
        with ctx:
            named = [((f"{mod_name}.{n}" if mod_name else n),
                      p.detach().clone() if zero3 else p.detach()) for n, p in params]  # fmt: skip
            named += [(f"{mod_name}.{n}" if mod_name else n, b.detach()) for n, b in buffers]
            yield from checkpoint_layout(module, named) if as_saved else named


def write_hf_export(
    module: Any, state: dict[str, torch.Tensor], model_path: str | Path, out_dir: str | Path
) -> Path:
    """``save_pretrained`` of ``state`` with the source model's tokenizer and processor, into
    ``out_dir``, replaced whole. What an interrupted export left is discarded, so nothing of it
    is carried over; the model in ``out_dir`` is replaced by a rename and removed only after,
    so a kill at any point leaves the old model or the new one there, whole, never one partly
    deleted."""
    out = Path(out_dir)
    tmp, old = out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")
    for stale in (tmp, old):
        shutil.rmtree(stale, ignore_errors=True)
    module.save_pretrained(tmp, state_dict=state, safe_serialization=True)
    copy_tokenizer_files(model_path, tmp)
    fsync_tree(tmp)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
