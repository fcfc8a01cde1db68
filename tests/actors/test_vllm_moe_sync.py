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


def test_a_push_to_a_glm45_moe_engine_matches_transformers(ray_local, tmp_path):
    """vLLM CPU prepacks the experts' weights for its MoE kernel after a load; an in-place
    reload must prepack them again: the engine's own weights pushed back leave its outputs as
    they were, and changed experts give what transformers gives on them."""
    from actors.learner_checkpoint import module_weights
    from actors.rollout import RolloutWorkerImpl
    from actors.rollout.worker import RolloutWorker, worker_options
    from actors.weights import make_transport
    from rlcs.tokenizer import build_tokenizer

    model = tiny_glm45(tmp_path / "engine")
    cfg = dict(engine="vllm", n=1, max_think_tokens=8, max_answer_tokens=4, kv_cache_gib=0.25,
               seed=7)  # fmt: skip
    worker = RolloutWorker.options(**worker_options(cfg)).remote(str(tmp_path / "engine"), cfg)

    def push_and_generate():
        pushed = list(module_weights(model, zero3=False, as_saved=True))
        assert make_transport("cpu_bytes", [worker], bucket_mb=1).push(pushed).checksum_ok
        return ray_local.get(worker.generate.remote(ITEMS, step=0, temperature=0.0))[0]

    try:
        ray_local.get(worker.ready.remote())
        before = ray_local.get(worker.generate.remote(ITEMS, step=0, temperature=0.0))[0]
        same = push_and_generate()
        assert list(same.token_ids) == list(before.token_ids)
        assert same.logprobs == pytest.approx(before.logprobs, abs=1e-5)

        torch.manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".experts." in name:
                    p.add_(torch.randn_like(p) * 0.05)
        changed = push_and_generate()
        model.save_pretrained(tmp_path / "learner")
        build_tokenizer().save_pretrained(tmp_path / "learner")
        hf_cfg = dict(cfg, engine="hf")
        hf = RolloutWorkerImpl(str(tmp_path / "learner"), hf_cfg).generate(
            ITEMS, step=0, temperature=0.0
        )[0]
        assert list(changed.token_ids) != list(before.token_ids)  # the experts did change
        assert list(changed.token_ids) == list(hf.token_ids)
        assert changed.logprobs == pytest.approx(hf.logprobs, abs=1e-4)
    finally:
        ray_local.kill(worker)
