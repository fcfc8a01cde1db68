"""RolloutWorker on the vLLM engine (vLLM's CPU build here), in a real Ray actor.

One engine for the whole module (each init costs ~15 s here). Every test first pushes the
weights it needs through the weight-sync transport, so tests do not depend on their order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

THINK, ANSWER = 4, 3


def never_close_think(model, tokenizer) -> None:
    """Edit a causal LM in place so it can never emit ``</think>`` or a stop token.

    Every token embedding gets a huge component on hidden dim 0, so after the final norm the
    hidden state points along dim 0 at every position; the banned tokens' output rows point the
    other way, which puts their logits ~100 below the rest whatever the context.
    """
    from rlcs.prompts import think_close_id
    from rlcs.tokenizer import stop_token_ids

    banned = [think_close_id(tokenizer), *stop_token_ids(tokenizer)]
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 1000.0
        head = model.get_output_embeddings().weight
        head[banned] = 0.0
        head[banned, 0] = -10.0


@pytest.fixture(scope="module")
def worker(ray_local, tiny_text_model):
    from actors.rollout.worker import RolloutWorker, worker_options

    # an explicit KV cache: on CPU a share of gpu_memory_utilization is of a NUMA node's memory
    # and includes the worker's own ~0.6 GiB, so the same share can leave nothing on a VM with
    # a smaller node (test_a_cpu_memory_setting_the_engine_cannot_start_with_is_named)
    cfg = dict(engine="vllm", n=2, max_think_tokens=THINK * 4, max_answer_tokens=ANSWER * 4,
               kv_cache_gib=0.25, seed=7)  # fmt: skip
    w = RolloutWorker.options(**worker_options(cfg)).remote(str(tiny_text_model), cfg)
    ray_local.get(w.ready.remote())
    yield w
    ray_local.kill(w)


@pytest.fixture(scope="module")
def tokenizer(tiny_text_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_text_model)


def learner_model(path, seed: int, scale: float = 0.05):
    """A 'trained' copy of the tiny model: its weights moved away from the engine's."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model


ITEMS = [
    {"id": "q1", "domain": "math", "prompt": "What is 2+3? Put the answer in a box."},
    {"id": "q2", "domain": "math", "prompt": "Solve x^2 = 9."},
]


def forward_logprobs(model, prompt_ids, token_ids):
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(token_ids)[:, None])[:, 0]


def test_trajectories_carry_the_models_own_logprobs(ray_local, worker, tiny_text_model, tokenizer):
    from actors.weights import make_transport
    from rlcs.prompts import render_prompt

    learner = learner_model(tiny_text_model, seed=1)
    make_transport("cpu_bytes", [worker], bucket_mb=1).push(learner.named_parameters())
    trajs = ray_local.get(worker.generate.remote(ITEMS, step=0))
    assert [t.item_id for t in trajs] == ["q1", "q1", "q2", "q2"]
    assert trajs[0].token_ids != trajs[1].token_ids, "the n samples of one prompt must differ"
    for t in trajs:
        assert t.token_ids and len(t.logprobs) == len(t.token_ids)
        assert t.finish_reason in {"stop", "length"}
        item = ITEMS[0] if t.item_id == "q1" else ITEMS[1]
        assert t.prompt_token_ids == tokenizer.encode(render_prompt(item, tokenizer))
        kept = [i for i, lp in enumerate(t.logprobs) if lp != 0.0]
        ref = forward_logprobs(learner, t.prompt_token_ids, t.token_ids)
        got = torch.tensor([t.logprobs[i] for i in kept])
        assert torch.allclose(got, ref[kept], atol=2e-3), (got, ref[kept])
    again = ray_local.get(worker.generate.remote(ITEMS, step=0))
    assert [t.token_ids for t in again] == [t.token_ids for t in trajs], "same step, same seeds"


def test_force_answer_when_think_never_closes(ray_local, worker, tiny_text_model, tokenizer):
    from actors.weights import make_transport
    from rlcs.prompts import force_answer_ids

    learner = learner_model(tiny_text_model, seed=2, scale=0.0)
    never_close_think(learner, tokenizer)
    make_transport("shm", [worker], bucket_mb=1).push(learner.named_parameters())
    trajs = ray_local.get(worker.generate.remote(ITEMS, step=1))
    think, answer = THINK * 4, ANSWER * 4
    forced = force_answer_ids(tokenizer)
    for t in trajs:
        assert t.forced_answer
        assert t.token_ids[think : think + 2] == forced
        assert forced[0] not in t.token_ids[:think]
        assert len(t.token_ids) == think + 2 + answer and t.finish_reason == "length"
        assert "</think><answer>" in t.response
        assert t.logprobs[think : think + 2] == [0.0, 0.0]
        assert t.forced_positions == [think, think + 1]
        assert all(lp < 0 for lp in t.logprobs[:think] + t.logprobs[think + 2 :])


def test_greedy_after_sync_equals_transformers(
    ray_local, worker, tiny_text_model, tokenizer, tmp_path
):
    """After a push, the engine generates exactly what transformers does with the learner's
    weights (same rollout logic, HF engine, in-process), and the checksums match."""
    from actors.rollout import RolloutWorkerImpl
    from actors.weights import make_transport

    learner = learner_model(tiny_text_model, seed=3)
    learner.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    hf = RolloutWorkerImpl(
        str(tmp_path), dict(engine="hf", n=1, max_think_tokens=16, max_answer_tokens=12)
    )
    expected = [t.token_ids for t in hf.generate(ITEMS, step=5, temperature=0.0)]

    make_transport("cpu_bytes", [worker], bucket_mb=1).push(
        learner_model(tiny_text_model, seed=9).named_parameters()
    )
    before = ray_local.get(worker.generate.remote(ITEMS, n=1, step=5, temperature=0.0))
    assert [t.token_ids for t in before] != expected, "other weights must give other tokens"

    for kind in ("cpu_bytes", "shm"):
        report = make_transport(kind, [worker], bucket_mb=0.1).push(learner.named_parameters())
        assert report.checksum_ok and report.buckets > 1
        assert report.tensors == len(list(learner.named_parameters()))
        assert report.verified_readback > 0
        after = ray_local.get(worker.generate.remote(ITEMS, n=1, step=5, temperature=0.0))
        assert [t.token_ids for t in after] == expected, kind


def sampled(ray_local, worker) -> list[tuple[list[int], list[float]]]:
    """Greedy tokens and their logprobs: equal only where every layer has the same weights."""
    trajs = ray_local.get(worker.generate.remote(ITEMS, n=1, step=6, temperature=0.0))
    return [(t.token_ids, t.logprobs) for t in trajs]


def test_a_push_of_the_wrong_shape_is_refused_and_the_engine_lives_on(
    ray_local, worker, tiny_text_model
):
    """vLLM's loader would fail on it midway, its layers emptied, and the engine could not
    generate again; the push is refused before anything loads, naming the tensor and the
    shape the model has."""
    from actors.weights import WeightSyncError, make_transport

    learner = learner_model(tiny_text_model, seed=4)
    transport = make_transport("cpu_bytes", [worker], bucket_mb=1)
    transport.push(learner.named_parameters())
    before = sampled(ray_local, worker)
    named = [(n, p.detach()) for n, p in learner_model(tiny_text_model, seed=5).named_parameters()]
    name, t = named[-1]
    with pytest.raises(WeightSyncError) as err:
        transport.push([*named[:-1], (name, t[:5].clone())])
    shapes = f"{(5, *t.shape[1:])} where the model has {tuple(t.shape)}"
    assert f"wrong shape: '{name}': {shapes}" in str(err.value)
    assert sampled(ray_local, worker) == before
    assert transport.push(learner.named_parameters()).checksum_ok


def test_a_push_naming_a_tensor_the_model_lacks_loads_nothing_and_the_next_push_works(
    ray_local, worker, tiny_text_model
):
    """vLLM's loader raises on an unknown name midway through the reload: the layers before it
    had taken the new weights, the rest were left empty, and the engine could not generate
    again, even after a good push (it hung: a restart was the only way out). The push is
    refused before anything loads, naming the tensor; the engine serves the previous weights
    unchanged, and the next push loads."""
    from actors.weights import WeightSyncError, make_transport

    learner = learner_model(tiny_text_model, seed=6)
    transport = make_transport("shm", [worker], bucket_mb=0.1)
    transport.push(learner.named_parameters())
    before = sampled(ray_local, worker)
    named = [(n, p.detach()) for n, p in learner_model(tiny_text_model, seed=7).named_parameters()]
    half = len(named) // 2  # after some layers' tensors, so a loader that ran would mix them
    bogus = "model.layers.1.self_attn.qq_proj.weight"
    with pytest.raises(WeightSyncError) as err:
        transport.push([*named[:half], (bogus, named[half][1].clone()), *named[half:]])
    assert sampled(ray_local, worker) == before
    message = str(err.value)
    assert f"the model does not have: '{bogus}'" in message
    assert "model.layers.1.self_attn.q_proj.weight" in message  # what it has there
    assert "nothing was loaded" in message
    report = transport.push(named)
    assert report.checksum_ok and report.tensors == len(named)
    assert sampled(ray_local, worker) != before
    transport.push(learner.named_parameters())
    assert sampled(ray_local, worker) == before


def test_a_push_that_leaves_tensors_out_loads_nothing_and_the_next_push_works(
    ray_local, worker, tiny_text_model
):
    """Loading the tensors it did send would leave the engine on a mix of the new weights and
    the old: the push is refused as a whole, naming what it left out, as the HF engine refuses
    it, and the engine serves the previous weights unchanged."""
    from actors.weights import WeightSyncError, make_transport

    learner = learner_model(tiny_text_model, seed=8)
    transport = make_transport("cpu_bytes", [worker], bucket_mb=1)
    transport.push(learner.named_parameters())  # a whole push: what every later one must carry
    before = sampled(ray_local, worker)
    named = [(n, p.detach()) for n, p in learner_model(tiny_text_model, seed=9).named_parameters()]
    with pytest.raises(WeightSyncError, match="not covered by the push") as err:
        transport.push(named[:-2])
    assert all(name in str(err.value) for name, _ in named[-2:])
    assert sampled(ray_local, worker) == before
    report = transport.push(named)
    assert report.checksum_ok and report.tensors == len(named)
    assert sampled(ray_local, worker) != before


def test_large_seeded_batch_does_not_kill_the_engine(ray_local, worker):
    """Hundreds of seeded requests at once: vLLM CPU used to die here in chunked prefill."""
    items = [{"id": f"b{i}", "domain": "math", "prompt": "pad " * (20 + i)} for i in range(64)]
    trajs = ray_local.get(worker.generate.remote(items, n=4, step=3))
    assert len(trajs) == 256 and all(len(t.logprobs) == len(t.token_ids) > 0 for t in trajs)


def test_a_cpu_memory_setting_the_engine_cannot_start_with_is_named(ray_local, tiny_text_model):
    """The worker's error names the setting and this machine's memory beside vLLM's own cause
    (a share that leaves the KV cache nothing: a real engine that fails to start)."""
    if torch.cuda.is_available():
        pytest.skip("the CPU engine's memory budget")
    import ray

    from actors.rollout import RolloutWorker

    w = RolloutWorker.remote(str(tiny_text_model), dict(engine="vllm", gpu_memory_utilization=0.01))
    with pytest.raises(ray.exceptions.RayActorError) as err:
        ray_local.get(w.ready.remote())
    assert "rollout.gpu_memory_utilization=0.01" in str(err.value)
    assert "GiB here" in str(err.value)
    assert "kv cache" in str(err.value).lower()  # vLLM's own words, from the engine in the actor


def test_an_explicit_kv_cache_larger_than_the_node_is_named():
    """The message for the other CPU setting, without starting an engine that fails the same
    way (the start above)."""
    from actors.rollout.vllm_engine import cpu_node_memory, cpu_start_failure

    text = cpu_start_failure(0.5, kv_cache_gib=4096)
    assert "rollout.kv_cache_gib=4096" in text
    assert f"{cpu_node_memory() / 2**30:.2f} GiB in all here" in text


def test_the_engine_runs_in_the_workers_process_on_tcmalloc(ray_local, worker):
    """On CPU the engine is inside the actor (no engine processes of its own to start), and
    ``worker_options`` gave that process tcmalloc from its start (rollout.cpu_allocator)."""
    import psutil

    from actors.rollout.vllm_engine import find_tcmalloc

    pid = ray_local.get(worker.info.remote())["pid"]
    proc = psutil.Process(pid)
    assert not [c for c in proc.children(recursive=True) if c.is_running()], "engine processes"
    if find_tcmalloc() is None:
        pytest.skip("no tcmalloc installed (Debian: libtcmalloc-minimal4)")
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "tcmalloc" in maps


def test_worker_options_preload_tcmalloc_only_for_vllm_on_cpu():
    from actors.rollout.vllm_engine import find_tcmalloc
    from actors.rollout.worker import worker_options

    if find_tcmalloc() is None:
        pytest.skip("no tcmalloc installed (Debian: libtcmalloc-minimal4)")
    base = {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": "2"}}, "num_cpus": 1}
    opts = worker_options({"engine": "vllm"}, **base)
    assert opts["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "2"
    assert "tcmalloc" in opts["runtime_env"]["env_vars"]["LD_PRELOAD"]
    assert base["runtime_env"]["env_vars"] == {"OMP_NUM_THREADS": "2"}  # not changed in place
    assert worker_options({"engine": "hf"}, **base) == base
    assert worker_options({"engine": "vllm", "cpu_allocator": "system"}, **base) == base
    assert worker_options({"engine": "vllm"}, num_gpus=1) == {"num_gpus": 1}


def test_tempered_logprobs_are_vllms_processed_ones(ray_local, tiny_text_model, tokenizer):
    """rollout.logprobs=tempered starts the engine with vLLM's processed_logprobs: a sampled
    token's logprob is then of the logits over the temperature, as the learner's tempered
    policy has it (learner.grpo.old_logprobs=rollout), less the image placeholders the engine
    bans (the untrained tiny model gives them about 2 of its 277 tokens' mass, 0.004 in logprob)."""
    from actors.rollout.worker import RolloutWorker, worker_options

    cfg = dict(engine="vllm", n=2, max_think_tokens=THINK * 4, max_answer_tokens=ANSWER * 4,
               kv_cache_gib=0.25, seed=7, temperature=0.5, logprobs="tempered")  # fmt: skip
    w = RolloutWorker.options(**worker_options(cfg)).remote(str(tiny_text_model), cfg)
    try:
        trajs = ray_local.get(w.generate.remote(ITEMS, step=0))
    finally:
        ray_local.kill(w)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.float32).eval()
    checked = 0
    for t in trajs:
        ids = torch.tensor([t.prompt_token_ids + t.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_token_ids) - 1 : -1].float()
        pick = torch.tensor(t.token_ids)[:, None]
        banned = logits.clone()
        banned[:, tokenizer.convert_tokens_to_ids(["<|image|>", "<|video|>"])] = float("-inf")
        tempered = torch.log_softmax(banned / 0.5, -1).gather(1, pick)[:, 0]
        raw = torch.log_softmax(logits, -1).gather(1, pick)[:, 0]
        kept = [i for i, lp in enumerate(t.logprobs) if lp != 0.0]
        got = torch.tensor([t.logprobs[i] for i in kept])
        assert torch.allclose(got, tempered[kept], atol=2e-3), (got, tempered[kept])
        checked += len(kept)
        assert not torch.allclose(got, raw[kept], atol=2e-3) or len(kept) == 0
    assert checked > 0
