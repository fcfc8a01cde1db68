"""What the learner hands on: its weights pushed to the engines by HF name, an HF export that
reloads to the same logits, and checkpoints and exports flushed to disk before they are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actors.learner import Learner
from tests.actors.learner_helpers import _config


@pytest.fixture(scope="module")
def vlm_learner(tiny_vlm):
    learner = Learner.local(_config(tiny_vlm), tiny_vlm)
    yield learner


class CollectingTransport:
    """Stands in for ``actors.weights`` transports: keeps what it is pushed."""

    def __init__(self):
        self.got: dict[str, torch.Tensor] = {}

    def push(self, named_tensors):
        for name, t in named_tensors:
            assert name not in self.got, f"{name} pushed twice"
            self.got[name] = t.detach().clone()
        return {"tensors": len(self.got)}


def test_push_weights_streams_every_weight_by_hf_name(vlm_learner):
    transport = CollectingTransport()
    report = vlm_learner.push_weights(transport)
    expected = vlm_learner.engine.module.state_dict()
    assert report == {"tensors": len(expected)}
    assert set(transport.got) == set(expected)
    for name, t in expected.items():
        assert torch.equal(transport.got[name], t), name


def test_export_hf_reloads_with_processor_and_same_logits(vlm_learner, tmp_path, shapes_image):
    from transformers import Glm4vForConditionalGeneration

    from rlcs.vlm_processor import Glm4vImageTextProcessor

    out = vlm_learner.export_hf(tmp_path / "hf")
    model = Glm4vForConditionalGeneration.from_pretrained(out).eval()
    proc = Glm4vImageTextProcessor.from_pretrained(out)
    enc = proc("<|begin_of_image|><|image|><|end_of_image|>what is this?", [shapes_image])
    with torch.no_grad():
        reloaded = model(**enc, use_cache=False).logits
        ours = vlm_learner.engine.module(**enc, use_cache=False).logits
    torch.testing.assert_close(reloaded, ours, rtol=0, atol=0)
    assert not (tmp_path / "hf.tmp").exists()
    # again over it, after an export killed part-way (its hf.tmp left with a file cut short,
    # and an hf.old of a replacement): the new export is whole, and nothing stale remains
    (tmp_path / "hf.tmp").mkdir()
    (tmp_path / "hf.tmp" / "preprocessor_config.json").write_text('{"cut')
    (tmp_path / "hf.old").mkdir()
    before = sorted(p.name for p in Path(out).iterdir())
    assert vlm_learner.export_hf(tmp_path / "hf") == out
    assert sorted(p.name for p in Path(out).iterdir()) == before
    assert Glm4vImageTextProcessor.from_pretrained(out) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_a_checkpoint_and_an_export_are_flushed_to_disk_before_they_are_named(
    vlm_learner, tmp_path, monkeypatch
):
    """Every file of a save is fsynced while it is still under its temporary name, so a power
    loss cannot leave files empty under a name that resume (or the curriculum's snapshot,
    itself fsynced) points at."""
    import os

    flushed = []
    real = os.fsync

    def fsync(fd):
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    final = Path(vlm_learner.save_checkpoint(tmp_path / "ckpt", "step-1"))
    out = Path(vlm_learner.export_hf(tmp_path / "hf"))
    monkeypatch.undo()
    for done, tmp in ((final, tmp_path / "ckpt" / ".tmp-step-1"), (out, tmp_path / "hf.tmp")):
        files = [p.relative_to(done) for p in done.rglob("*") if p.is_file()]
        assert files
        for f in files:
            assert str(tmp / f) in flushed, f
    assert str(tmp_path / "ckpt" / "latest.tmp") in flushed
