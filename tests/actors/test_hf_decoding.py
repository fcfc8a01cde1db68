"""The HF engine's decoding on CPU (actors/rollout/hf_decoding.py): SDPA over grouped key/value
heads and a KV cache that writes into buffers give transformers' own rollouts, to the token."""

from __future__ import annotations

import torch

THINK, ANSWER = 12, 6  # the budgets of test_rollout_hf.py


def _image_and_text(tiny_vlm, shapes_image, tmp_path, seed):
    """An HF-engine worker on the tiny VLM (3 samples an item) and an image item and a text one."""
    from actors.rollout import RolloutWorkerImpl

    shapes_image.save(tmp_path / "a.png")
    items = [
        {"id": "i1", "domain": "vqa", "prompt": "What shapes?", "images": ["a.png"]},
        {"id": "t1", "domain": "math", "prompt": "Add 12 and 30, then halve it."},
    ]
    worker = RolloutWorkerImpl(
        str(tiny_vlm),
        dict(engine="hf", n=3, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=seed),
    )
    return worker, items


def test_cpu_attention_leaves_grouped_heads_to_the_kernel(tiny_vlm, shapes_image, tmp_path):
    """On CPU the engine loads its model with SDPA over the grouped key/value heads as they
    are (the tiny VLM has 4 query heads to 2): the same rollouts as transformers' own "sdpa",
    which copies the heads out first."""
    from actors.cpu_attention import CPU_ATTENTION

    worker, items = _image_and_text(tiny_vlm, shapes_image, tmp_path, seed=7)
    model = worker.engine.model
    assert (
        model.config.text_config.num_key_value_heads < model.config.text_config.num_attention_heads
    )
    assert model.config._attn_implementation == CPU_ATTENTION
    ours = worker.generate(items, step=1, base_dir=str(tmp_path), temperature=1.0)
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"
    theirs = worker.generate(items, step=1, base_dir=str(tmp_path), temperature=1.0)
    assert len(ours) == len(theirs) == 6
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids and a.item_id == b.item_id
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert len({tuple(t.token_ids) for t in ours}) > 2  # sampled, long enough to differ


def test_growing_kv_cache_gives_dynamic_caches_rollouts(
    tiny_vlm, shapes_image, tmp_path, monkeypatch
):
    """The engine's KV cache writes each step into buffers with room to spare: the same tokens
    and logprobs as transformers' DynamicCache, which concatenates, with and without the
    shared prefill (whose batch_select_indices replaces the buffers' views), text and image."""
    from actors.rollout.hf_decoding import GrowingCache
    from actors.rollout.hf_engine import HFEngine

    worker, items = _image_and_text(tiny_vlm, shapes_image, tmp_path, seed=9)
    caches = []
    real = HFEngine._cache

    def recording(self, max_new):
        caches.append(real(self, max_new))
        return caches[-1]

    monkeypatch.setattr(HFEngine, "_cache", recording)
    runs = {}
    for share in (True, False):
        worker.engine.share_prefill = share
        runs[share, "growing"] = worker.generate(items, step=1, base_dir=str(tmp_path))
    assert caches and all(isinstance(c, GrowingCache) for c in caches)
    assert all(layer.buffers is not None for c in caches for layer in c.layers[:1])
    monkeypatch.setattr(HFEngine, "_cache", lambda self, max_new: None)  # transformers' own
    for share in (True, False):
        worker.engine.share_prefill = share
        runs[share, "dynamic"] = worker.generate(items, step=1, base_dir=str(tmp_path))
    for share in (True, False):
        ours, theirs = runs[share, "growing"], runs[share, "dynamic"]
        assert len(ours) == len(theirs) == 6
        for a, b in zip(ours, theirs, strict=True):
            assert a.token_ids == b.token_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert max(len(t.token_ids) for t in runs[True, "growing"]) > 4


def test_a_bf16_engine_keeps_its_kv_cache_in_fp32(tiny_text_model, monkeypatch):
    """model.dtype=bfloat16 on CPU: bf16 weights (their matmuls 3 to 4 times faster), the
    attention in fp32 over a cache held in fp32, and logprobs that are the bf16 model's own."""
    from transformers import AutoModelForCausalLM

    from actors.cpu_attention import CPU_ATTENTION
    from actors.rollout import RolloutWorkerImpl
    from actors.rollout.hf_engine import HFEngine

    caches = []
    real = HFEngine._cache
    monkeypatch.setattr(HFEngine, "_cache", lambda s, m: caches.append(real(s, m)) or caches[-1])
    items = [
        {"id": "t1", "domain": "math", "prompt": "Add 12 and 30, then halve it."},
        {"id": "t2", "domain": "math", "prompt": "What is 7 times 6?"},
    ]
    cfg = dict(engine="hf", n=3, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=3)
    worker = RolloutWorkerImpl(str(tiny_text_model), cfg, dtype="bfloat16")
    model = worker.engine.model
    assert model.config._attn_implementation == CPU_ATTENTION
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    trajs = worker.generate(items, step=0, temperature=1.0)
    assert caches and all(
        buf.dtype == torch.float32 for c in caches for layer in c.layers for buf in layer.buffers
    )
    ref_model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.bfloat16)
    ref_model.set_attn_implementation(CPU_ATTENTION)
    gaps = []
    for t in trajs:
        ids = torch.tensor([t.prompt_token_ids + t.token_ids])
        with torch.no_grad():
            logits = ref_model(ids).logits[0, len(t.prompt_token_ids) - 1 : -1].float()
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(t.token_ids)[:, None])[:, 0]
        sampled = [i for i in range(len(t.token_ids)) if i not in t.forced_positions]
        gaps += (torch.tensor(t.logprobs) - ref).abs()[sampled].tolist()
    assert len(gaps) > 10 and max(gaps) < 0.1 and sum(gaps) / len(gaps) < 0.02, max(gaps)
