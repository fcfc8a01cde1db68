"""The CPU attention of the HF engine and the learner (actors/cpu_attention.py): grouped heads
left to the kernel, fp32 under a bf16 model, and the learner's logprobs those of transformers'
own "sdpa"."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from actors.cpu_attention import CPU_ATTENTION, sdpa_gqa
from actors.learner import Learner
from tests.actors.learner_helpers import _config, rl_batch, sft_batch


def test_a_bf16_models_attention_is_computed_in_fp32():
    """bf16 queries, keys and values in, bf16 out: the fp32 attention over the grouped heads
    (2 query heads a key head) rounded once, not SDPA's bf16 kernel."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 8, generator=g).bfloat16()
    k, v = (torch.randn(3, 2, 5, 8, generator=g).bfloat16() for _ in range(2))
    mask = torch.ones(3, 1, 5, 5, dtype=torch.bool).tril()
    mask[0, :, :, 0] = False  # a left-padded row
    mask[0, :, 0, 0] = True
    out, _ = sdpa_gqa(SimpleNamespace(is_causal=True), q, k, v, mask, scaling=0.5)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 5, 4, 8)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(),
        k.float().repeat_interleave(2, 1),
        v.float().repeat_interleave(2, 1),
        attn_mask=mask,
        scale=0.5,
    )
    assert torch.equal(out, ref.transpose(1, 2).bfloat16())


def _logprobs(learner: Learner, trajs) -> list[float]:
    from actors.learner_batches import prepare_step

    step = prepare_step("rl", trajs, learner.config, learner.tokenizer, learner.processor)[0]
    learner._fill_logprobs(step, "lp", learner.engine)
    return [lp for d in step.docs for lp, w in zip(d.extras["lp"], d.weights, strict=True) if w > 0]


def test_the_learner_on_cpu_has_sdpas_logprobs_with_it(tiny_vlm):
    """On CPU the learner loads its model with the CPU attention, as the engine does; on the
    RL batch's packed rows (a block-diagonal mask) the logprobs are transformers' "sdpa"'s."""
    learner = Learner.local(_config(tiny_vlm), tiny_vlm)
    model = learner.engine.module
    assert model.config._attn_implementation == CPU_ATTENTION
    trajs = rl_batch(learner)
    ours = torch.tensor(_logprobs(learner, trajs))
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"
    theirs = torch.tensor(_logprobs(learner, trajs))
    assert len(ours) > 20 and torch.allclose(ours, theirs, atol=1e-5)


def test_a_bf16_learner_on_cpu_trains(tiny_vlm):
    """learner.precision=bf16 on CPU: bf16 weights (DeepSpeed keeps fp32 ones for the
    optimizer), the CPU attention, logprobs near the fp32 learner's, and a falling SFT loss."""
    fp32 = Learner.local(_config(tiny_vlm), tiny_vlm)
    bf16 = Learner.local(_config(tiny_vlm, precision="bf16"), tiny_vlm)
    model = bf16.engine.module
    assert model.config._attn_implementation == CPU_ATTENTION
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    trajs = rl_batch(fp32)
    gap = (torch.tensor(_logprobs(bf16, trajs)) - torch.tensor(_logprobs(fp32, trajs))).abs()
    assert 0 < gap.mean() < 0.02, gap.mean()  # bf16's rounding, and no more
    losses = [bf16.train_step("sft", sft_batch())["loss"] for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0], losses


def test_a_bf16_mixed_learner_keeps_fp32_weights_and_logits(tiny_vlm):
    """learner.precision=bf16-mixed: fp32 weights, the matmuls in bf16 under torch.autocast
    (DeepSpeed's torch_autocast), the attention and the output layer in fp32; logprobs near the
    fp32 learner's, a falling SFT loss, and weights that stay fp32 through the steps."""
    fp32 = Learner.local(_config(tiny_vlm), tiny_vlm)
    mixed = Learner.local(_config(tiny_vlm, precision="bf16-mixed"), tiny_vlm)
    model = mixed.engine.module
    assert mixed.engine.torch_autocast_enabled()
    assert model.config._attn_implementation == CPU_ATTENTION
    seen: dict[str, torch.dtype] = {}

    def record(name: str):
        def hook(module, inputs, output) -> None:
            seen.setdefault(name, output.dtype)

        return hook

    hooks = [
        module.register_forward_hook(record(name))
        for name, module in (
            ("head", model.get_output_embeddings()),
            ("mlp", model.model.language_model.layers[0].mlp.down_proj),
        )
    ]
    trajs = rl_batch(fp32)
    lp_mixed = torch.tensor(_logprobs(mixed, trajs))
    for h in hooks:
        h.remove()
    assert seen == {"head": torch.float32, "mlp": torch.bfloat16}
    gap = (lp_mixed - torch.tensor(_logprobs(fp32, trajs))).abs()
    assert 0 < gap.mean() < 0.02, gap.mean()  # the matmuls' bf16 rounding, and no more
    losses = [mixed.train_step("sft", sft_batch())["loss"] for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0], losses
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_an_fp32_checkpoint_loads_into_a_bf16_mixed_learner_and_back(tiny_vlm, tmp_path):
    """The same files either way (fp32 weights and optimizer state), so --resume may switch
    between them: the loaded weights are the saved ones, and the loaded learner steps on."""
    fp32 = Learner.local(_config(tiny_vlm), tiny_vlm)
    fp32.train_step("sft", sft_batch())
    fp32.save_checkpoint(tmp_path, "a")
    mixed = Learner.local(_config(tiny_vlm, precision="bf16-mixed"), tiny_vlm)
    mixed.load_checkpoint(tmp_path, "a")
    for (name, a), (_, b) in zip(fp32.named_weights(), mixed.named_weights(), strict=True):
        assert torch.equal(a, b), name
    assert mixed.train_step("sft", sft_batch())["optimizer_steps"] == 1
    mixed.save_checkpoint(tmp_path, "b")
    fp32.load_checkpoint(tmp_path, "b")
    for (name, a), (_, b) in zip(fp32.named_weights(), mixed.named_weights(), strict=True):
        assert torch.equal(a, b), name
