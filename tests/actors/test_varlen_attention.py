"""Packed rows under flash-attention's variable-length kernel (``learner.attn_implementation:
flash_attention_2``): the learner lays a micro-batch's rows end to end in one, and transformers
finds each document where its positions restart, so attention stays inside documents at any
micro-batch size (from positions alone it does so only for a single row).

flash-attn needs CUDA; on CPU a reference kernel with flash-attention's contract stands in for
it inside the real model: no mask, the documents found from the positions by transformers' own
flash helpers, exactly as its flash path does. The learner's logits must equal those under
SDPA's block-diagonal mask.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from actors.learner import Learner
from rlcs.config import Config
from rlcs.packing import Document, collate
from tests.actors.learner_helpers import _config, _image

REFERENCE = "rlcs_varlen_reference"


def _reference_varlen(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """Causal attention within each document that transformers' flash path would find (a
    packed single row: from where its positions restart), else within each whole row."""
    from transformers.modeling_flash_attention_utils import (
        _is_packed_sequence,
        prepare_fa_kwargs_from_position_ids,
    )

    b, heads, length, dim = query.shape
    pos = kw.get("position_ids")
    if _is_packed_sequence(pos, b):
        (cu, _), _ = prepare_fa_kwargs_from_position_ids(pos)
    else:
        cu = torch.arange(0, b * length + 1, length)
    q, k, v = (t.transpose(1, 2).reshape(b * length, t.shape[1], dim) for t in (query, key, value))
    out = []
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        qs, ks, vs = (t[s:e].transpose(0, 1)[None] for t in (q, k, v))
        ks, vs = (t.repeat_interleave(heads // t.shape[1], 1) for t in (ks, vs))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scaling)
        out.append(o[0].transpose(0, 1))
    return torch.cat(out).reshape(b, length, heads, dim), None


@pytest.fixture(scope="module")
def learner(tiny_vlm):
    from transformers import AttentionInterface, AttentionMaskInterface

    AttentionInterface.register(REFERENCE, _reference_varlen)
    AttentionMaskInterface.register(REFERENCE, lambda *a, **k: None)
    return Learner.local(_config(tiny_vlm), tiny_vlm)


def _packed_batch(learner) -> dict:
    """Two rows of several documents each (one with an image), the second row padded."""
    proc = learner.processor
    docs = []
    for text, img in (("a red box and more words", _image("red")), ("plain text", None),
                      ("two", None), ("a longer plain text document here", None)):  # fmt: skip
        if img is None:
            ids = learner.tokenizer(text, add_special_tokens=False)["input_ids"]
            docs.append(Document(ids, [1.0] * len(ids)))
            continue
        enc = proc(f"<|begin_of_image|><|image|><|end_of_image|>{text}", [img])
        images = {k: enc[k] for k in ("pixel_values", "image_grid_thw")}
        images["mm_token_type_ids"] = enc["mm_token_type_ids"][0]
        docs.append(Document(enc["input_ids"][0].tolist(), [1.0] * enc["input_ids"].shape[1],
                             images=images))  # fmt: skip
    return collate([[docs[0], docs[1]], [docs[2], docs[3]]], learner.inputs.pad_id)


def test_packed_logits_under_a_varlen_kernel_equal_sdpas(learner):
    b = _packed_batch(learner)
    module = learner.engine.module
    with torch.no_grad():
        dense = learner.inputs.logits(learner.engine, b)
        module.set_attn_implementation({"text_config": REFERENCE})
        try:
            learner.inputs.varlen = True
            varlen = learner.inputs.logits(learner.engine, b)
            learner.inputs.varlen = False  # the kernel on the rows as they are: one document a row
            crossing = learner.inputs.logits(learner.engine, b)
        finally:
            learner.inputs.varlen = False
            module.set_attn_implementation({"text_config": "sdpa"})
    real = b["doc_index"] >= 0
    torch.testing.assert_close(varlen[real], dense[real], rtol=1e-5, atol=1e-5)
    # documents after the first of a row see their row-mates without the lengths
    assert (crossing[real] - dense[real]).abs().max() > 1e-3


def test_flash_attention_is_refused_where_it_cannot_run(tiny_vlm):
    base = {"stage": "rl", "model": {"path": str(tiny_vlm)}}
    with pytest.raises(ValueError, match="needs cluster.device=cuda and learner.precision=bf16"):
        Config.model_validate(base | {"learner": {"attn_implementation": "flash_attention_2"}})
    ok = Config.model_validate(
        base
        | {
            "learner": {"attn_implementation": "flash_attention_2", "precision": "bf16"},
            "cluster": {"device": "cuda"},
        }
    )
    assert ok.learner.attn_implementation == "flash_attention_2"
    from actors.learner_model import load_hf_model

    if importlib.util.find_spec("flash_attn") is not None:
        return  # installed here: the load would go ahead
    with pytest.raises(ImportError, match="needs the flash-attn package"):
        load_hf_model(tiny_vlm, attn_implementation="flash_attention_2")


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn")
def test_flash_attention_2_gives_sdpas_packed_logits_on_a_gpu(tiny_vlm):
    """The real kernel: a bf16 learner with flash_attention_2 against the same one with SDPA."""
    logits = {}
    for impl in ("sdpa", "flash_attention_2"):
        cfg = _config(tiny_vlm, precision="bf16").model_dump()
        cfg["learner"]["attn_implementation"] = impl
        cfg = Config.model_validate(cfg | {"cluster": {"device": "cuda"}})
        one = Learner.local(cfg, tiny_vlm)
        b = _packed_batch(one)
        with torch.no_grad():
            logits[impl] = one.inputs.logits(one.engine, b).float()[b["doc_index"] >= 0]
    torch.testing.assert_close(logits["flash_attention_2"], logits["sdpa"], rtol=2e-2, atol=2e-2)


def test_eager_attention_keeps_packed_documents_apart_like_sdpa(learner):
    """learner.attn_implementation: eager takes the same block-diagonal mask from positions."""
    b = _packed_batch(learner)
    module = learner.engine.module
    with torch.no_grad():
        dense = learner.inputs.logits(learner.engine, b)
        module.set_attn_implementation({"text_config": "eager"})
        try:
            eager = learner.inputs.logits(learner.engine, b)
        finally:
            module.set_attn_implementation({"text_config": "sdpa"})
    real = b["doc_index"] >= 0
    torch.testing.assert_close(eager[real], dense[real], rtol=1e-5, atol=1e-5)
