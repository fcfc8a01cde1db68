"""ZeRO-3 on CPU: training works, and weights leave the learner one module at a time."""

from __future__ import annotations

import pytest
import torch

from actors.learner import Learner
from rlcs.config import Config


@pytest.fixture(scope="module")
def zero3_learner(tiny_text_model):
    cfg = Config.model_validate(
        {
            "stage": "pretrain",
            "model": {"path": str(tiny_text_model)},
            "learner": {"zero_stage": 3, "lr": 2e-3, "micro_batch": 2},
            "data": {"seq_len": 64},
        }
    )
    return Learner.local(cfg, tiny_text_model)


class PeakTransport:
    """Records each pushed tensor and how many parameter elements were gathered meanwhile."""

    def __init__(self, model):
        self.model, self.got, self.peak = model, {}, 0

    def push(self, named_tensors):
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

        for name, t in named_tensors:
            self.got[name] = t.clone()
            live = sum(
                p.ds_numel
                for p in self.model.parameters()
                if p.ds_status == ZeroParamStatus.AVAILABLE
            )
            self.peak = max(self.peak, live)
        return len(self.got)


def test_zero3_push_gathers_layer_by_layer(zero3_learner, tiny_text_model):
    from transformers import AutoModelForCausalLM

    module = zero3_learner.engine.module
    transport = PeakTransport(module)
    assert zero3_learner.push_weights(transport) > 0
    reference = AutoModelForCausalLM.from_pretrained(tiny_text_model).state_dict()
    assert set(transport.got) == set(reference)
    for name, t in reference.items():
        assert torch.equal(transport.got[name], t), name
    total = sum(p.ds_numel for p in module.parameters())
    largest = max(sum(p.ds_numel for p in m.parameters(recurse=False)) for m in module.modules())
    assert transport.peak <= largest < total / 2


def test_zero3_pretrain_loss_falls(zero3_learner):
    batch = [{"text": f"zero three keeps shards apart {i}"} for i in range(4)]
    losses = [zero3_learner.train_step("pretrain", batch)["loss"] for _ in range(5)]
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.slow
def test_zero3_export_loads_in_transformers_and_vllm(zero3_learner, tmp_path):
    """The trained ZeRO-3 model, exported (its shards gathered), is the same model in
    transformers (bit for bit) and in vLLM (eager, as the CPU rollout engine runs it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = zero3_learner.export_hf(tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = tok("zero three keeps shards apart 1", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        hf = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
        ours = zero3_learner.engine(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    torch.testing.assert_close(hf, ours, rtol=0, atol=0)
    hf_lp = torch.log_softmax(hf, -1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]

    vllm = pytest.importorskip("vllm")
    # in vLLM's own processes: an engine inside this process would set up torch.distributed
    # beside the in-process learners of the tests after this one, and take it down with it
    llm = vllm.LLM(model=out, dtype="float32", gpu_memory_utilization=0.1, max_model_len=256,
                   enforce_eager=True, seed=0, distributed_executor_backend="mp")  # fmt: skip
    params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
    result = llm.generate([{"prompt_token_ids": ids}], params)[0]
    vllm_lp = [next(iter(d.values())).logprob for d in result.prompt_logprobs[1:]]
    assert len(vllm_lp) == len(ids) - 1
    torch.testing.assert_close(torch.tensor(vllm_lp), hf_lp, rtol=0, atol=1e-3)
    del llm
