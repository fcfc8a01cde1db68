"""actors.learner_inputs.ModelInputs on the tiny VLM, without a DeepSpeed engine around it."""

from __future__ import annotations

import pytest
import torch

from actors.learner_batches import pretrain_documents
from actors.learner_inputs import ModelInputs
from actors.learner_model import load_hf_model, load_processors
from tests.actors.learner_helpers import pretrain_batch


@pytest.fixture(scope="module")
def vlm(tiny_vlm):
    model = load_hf_model(tiny_vlm, on_cpu=True).eval()
    tokenizer, processor = load_processors(tiny_vlm)
    # three text documents, then two with an image each
    docs = pretrain_documents(pretrain_batch(), tokenizer, processor, 256)
    assert [d.images is not None for d in docs] == [False] * 3 + [True] * 2
    return model, tokenizer, docs


def test_a_text_only_micro_batch_gets_a_weight_0_blank_image_row_when_the_tower_must_run(vlm):
    model, tokenizer, docs = vlm
    docs = docs[:2]
    every = ModelInputs(model, tokenizer, "sdpa", "cpu", tower_every_pass=True)
    b, order = every.collate(docs, [[0, 1]])
    assert len(order) == 3 and order[:2] == docs and order[2].images is not None
    assert b["input_ids"].shape[0] == 2 and b["weights"][1].abs().sum() == 0
    assert b["image_grid_thw"].tolist() == [[1, 2, 2]]
    with torch.no_grad():
        logits = every.logits(model, b)
    assert logits.shape[:2] == b["input_ids"].shape and torch.isfinite(logits).all()
    # the text row's logits are those of the same batch without the blank row
    alone = ModelInputs(model, tokenizer, "sdpa", "cpu")
    b1, order1 = alone.collate(docs, [[0, 1]])
    assert order1 == docs and "pixel_values" not in b1
    with torch.no_grad():
        plain = alone.logits(model, b1)
    width = b1["input_ids"].shape[1]
    torch.testing.assert_close(logits[0, :width], plain[0], rtol=1e-5, atol=1e-5)


def test_filler_batches_weigh_nothing_and_carry_the_policy_losss_series(vlm):
    model, tokenizer, _ = vlm
    inputs = ModelInputs(model, tokenizer, "sdpa", "cpu")
    policy = inputs.filler_batch("policy", ref_logprobs=True)
    assert {"advantages", "rollout_logprobs", "ref_logprobs"} <= set(policy)
    assert policy["weights"].abs().sum() == 0 and policy["advantages"].abs().sum() == 0
    assert "ref_logprobs" not in inputs.filler_batch("policy")
    sft = inputs.filler_batch("sft")
    assert "advantages" not in sft and sft["weights"].abs().sum() == 0
    assert (sft["input_ids"] == inputs.pad_id).all()


def test_position_ids_are_3d_rope_after_each_documents_own_image(vlm):
    model, tokenizer, docs = vlm
    text, image_doc = docs[0], docs[3]
    n = len(image_doc)
    inputs = ModelInputs(model, tokenizer, "sdpa", "cpu")
    b, _ = inputs.collate([text, image_doc], [[0, 1]])
    pos = inputs.position_ids(b)
    assert pos.shape == (4, 1, len(text) + n)
    # the first plane is the plain per-document positions; the text document's rope is the same
    assert torch.equal(pos[0], b["position_ids"])
    assert (pos[1:, 0, : len(text)] == torch.arange(len(text))).all()
    # the image document's rope is its own, from 0, as if it were alone in its row
    solo, _ = inputs.collate([image_doc], [[0]])
    torch.testing.assert_close(pos[1:, 0, len(text) :], inputs.position_ids(solo)[1:, 0])
    assert pos[1:, 0, len(text)].tolist() == [0, 0, 0]
    # an image's patches share the temporal position and spread over height and width
    img = b["mm_token_type_ids"][0, len(text) :].bool()
    assert pos[1, 0, len(text) :][img].unique().numel() == 1
    assert pos[2, 0, len(text) :][img].unique().numel() > 1
    assert pos[3, 0, len(text) :][img].unique().numel() > 1
