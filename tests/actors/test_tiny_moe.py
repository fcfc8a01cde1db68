"""The GLM-4.5V architecture (``Glm4vMoeForConditionalGeneration``: routed and shared experts
after a dense layer) through the learner's three stages and the HF rollout engine, on the tiny
``model.tiny: vlm_moe`` model."""

from __future__ import annotations

import json

import pytest
import torch

from actors.learner import Learner
from rlcs.config import Config
from tests.actors.learner_helpers import _config, _image, pretrain_batch, rl_batch, sft_batch


def test_the_tiny_moe_model_has_glm45vs_layout(tiny_vlm_moe):
    cfg = json.loads((tiny_vlm_moe / "config.json").read_text())
    assert cfg["architectures"] == ["Glm4vMoeForConditionalGeneration"]
    text = cfg["text_config"]
    assert (text["n_routed_experts"], text["num_experts_per_tok"], text["n_shared_experts"]) == (
        4, 2, 1)  # fmt: skip
    assert text["first_k_dense_replace"] == 1


def test_the_learner_trains_experts_and_tower_in_every_stage(tiny_vlm_moe, tmp_path):
    from transformers import AutoModelForImageTextToText

    learner = Learner.local(_config(tiny_vlm_moe, lr=1e-3), tiny_vlm_moe)
    module = learner.engine.module
    experts = "model.language_model.layers.1.mlp.experts.gate_up_proj"
    watched = (experts, "model.language_model.layers.1.mlp.gate.weight",
               "model.visual.blocks.0.attn.qkv.weight")  # fmt: skip
    params = dict(module.named_parameters())
    for stage, batch in (("pretrain", pretrain_batch()), ("sft", sft_batch()),
                         ("rl", rl_batch(learner))):  # fmt: skip
        before = {n: params[n].detach().clone() for n in watched}
        stats = learner.train_step(stage, batch)
        assert stats["grad_norm"] > 0 and torch.isfinite(torch.tensor(stats["loss"])), stage
        for n in watched:
            assert not torch.equal(before[n], params[n].detach()), (stage, n)
    out = learner.export_hf(tmp_path / "hf")
    reloaded = AutoModelForImageTextToText.from_pretrained(out).eval()
    assert type(reloaded).__name__ == "Glm4vMoeForConditionalGeneration"
    enc = learner.processor("<|begin_of_image|><|image|><|end_of_image|>a box", [_image("red")])
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(**enc).logits, module(**enc, use_cache=False).logits, rtol=0, atol=0
        )


def test_the_hf_engine_samples_the_moe_model(tiny_vlm_moe):
    from transformers import AutoModelForImageTextToText

    from actors.rollout.engine import GenRequest
    from actors.rollout.hf_engine import HFEngine
    from rlcs.tokenizer import build_tokenizer

    engine = HFEngine(str(tiny_vlm_moe), stop_ids=[build_tokenizer().eos_token_id], device="cpu")
    assert type(engine.model).__name__ == "Glm4vMoeForConditionalGeneration"
    text = "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>Colour?<|assistant|>\n"
    ids, mm = engine.encode(text, [_image("blue")])
    req = GenRequest(ids, max_tokens=4, seed=0, prompt_text=text, images=[_image("blue")],
                     mm_inputs=mm, temperature=0.0)  # fmt: skip
    result = engine.generate([req])[0]
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_moe).eval()
    with torch.no_grad():
        first = model(**engine.processor(text, [_image("blue")])).logits[0, -1].log_softmax(-1)
    assert result.token_ids[0] == int(first.argmax())
    assert result.logprobs[0] == pytest.approx(float(first.max()), abs=1e-4)
    # two samples of one prompt: prefilled once (the shared path), the same greedy answer
    calls = []
    real = engine._prefill_shared
    engine._prefill_shared = lambda *a: calls.append(real(*a)) or calls[-1]
    for twin in engine.generate([req, req]):
        assert twin.token_ids == result.token_ids
        assert twin.logprobs == pytest.approx(result.logprobs, abs=1e-4)
    assert len(calls) == 1 and calls[0] is not None


class _Collect:
    def push(self, named):
        self.got = {n: t.detach().clone() for n, t in named}
        return len(self.got)


def test_vllm_engines_get_the_checkpoints_layout_and_the_hf_engine_its_own(tiny_vlm_moe):
    """vLLM's loader reads a GLM-4.5V checkpoint's per-expert weights; transformers holds each
    layer's experts fused in memory. The push gives each engine the layout it loads."""
    from safetensors.torch import load_file

    saved = load_file(tiny_vlm_moe / "model.safetensors")
    for engine in ("vllm", "hf"):
        cfg = _config(tiny_vlm_moe).model_dump()
        cfg["rollout"]["engine"] = engine
        learner = Learner.local(Config.model_validate(cfg), tiny_vlm_moe)
        sink = _Collect()
        learner.push_weights(sink)
        # the router's score correction is a buffer in transformers, saved in the checkpoint,
        # and a parameter in vLLM, whose push is refused if it leaves one out: it is pushed
        bias = "model.language_model.layers.1.mlp.gate.e_score_correction_bias"
        assert bias in dict(learner.engine.module.named_buffers()) and bias in saved
        assert bias in sink.got
        if engine == "vllm":
            assert set(sink.got) == set(saved)
            assert "model.language_model.layers.1.mlp.experts.3.up_proj.weight" in sink.got
            for name, t in sink.got.items():
                assert torch.equal(t, saved[name]), name
        else:
            assert set(sink.got) == set(learner.engine.module.state_dict())
            assert "model.language_model.layers.1.mlp.experts.gate_up_proj" in sink.got
