"""A push to a real vLLM engine (vLLM's CPU build) serving GLM-4.5's mixture of experts.

vLLM serves GLM-4.5V's language model with the same class as text-only GLM-4.5
(``Glm4MoeForCausalLM``, vllm/model_executor/models/glm4_moe.py); vLLM's GLM-4.1V/4.5V module
needs torchvision, which this environment lacks, so the tiny text model stands in for the
VLM here. Its router's ``e_score_correction_bias`` is a buffer in transformers, saved in the
checkpoint, and a parameter in vLLM: the learner must push it, or vLLM's engine reports it
uncovered and every push fails."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow

ITEMS = [{"id": "q1", "domain": "math", "prompt": "What is 2+3?"}]


def tiny_glm45(path):
    from transformers import GenerationConfig, Glm4MoeConfig, Glm4MoeForCausalLM

    from rlcs.models import TINY_VLM_MOE, _special_ids, _vocab_size
    from rlcs.tokenizer import build_tokenizer

    tok = build_tokenizer()
    special = _special_ids(tok)
    cfg = Glm4MoeConfig(vocab_size=_vocab_size(tok), hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                        head_dim=32, **TINY_VLM_MOE, **special)  # fmt: skip
    torch.manual_seed(0)
    model = Glm4MoeForCausalLM(cfg).eval()
    model.generation_config = GenerationConfig(**special)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model


def test_a_push_to_a_glm45_moe_engine_covers_the_router_bias(ray_local, tmp_path):
    from actors.learner_checkpoint import module_weights
    from actors.rollout.worker import RolloutWorker, worker_options
    from actors.weights import make_transport

    model = tiny_glm45(tmp_path / "engine")
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    assert bias in dict(model.named_buffers()) and bias not in dict(model.named_parameters())
    # the learner's router bias differs from the engine's checkpoint (all zeros there)
    with torch.no_grad():
        model.get_buffer(bias).copy_(torch.tensor([4.0, -4.0, 4.0, -4.0]))
    cfg = dict(engine="vllm", n=1, max_think_tokens=8, max_answer_tokens=4, kv_cache_gib=0.25,
               seed=7)  # fmt: skip
    worker = RolloutWorker.options(**worker_options(cfg)).remote(str(tmp_path / "engine"), cfg)
    try:
        ray_local.get(worker.ready.remote())
        pushed = list(module_weights(model, zero3=False, as_saved=True))
        report = make_transport("cpu_bytes", [worker], bucket_mb=1).push(pushed)
        # every tensor's checksum matched, the bias's read back from vLLM's live parameter
        assert report.checksum_ok and report.tensors == len(pushed)
        assert report.verified_readback > 0
        assert ray_local.get(worker.generate.remote(ITEMS, step=0, temperature=0.0))[0].token_ids
    finally:
        ray_local.kill(worker)
