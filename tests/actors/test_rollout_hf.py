"""RolloutWorker on the transformers engine, in real Ray actors: text and the tiny GLM-4.1V VLM."""

from __future__ import annotations

import base64
import io

import pytest
import torch

THINK, ANSWER = 12, 6
ITEMS = [{"id": "t1", "domain": "math", "prompt": "What is 7*6?"}]


def never_close_think(model, tokenizer) -> None:
    """Edit a model in place so it can never emit ``</think>`` or a stop token (see the vLLM
    test module: a huge hidden dim 0 everywhere, banned output rows pointing against it)."""
    from rlcs.prompts import think_close_id
    from rlcs.tokenizer import stop_token_ids

    banned = [think_close_id(tokenizer), *stop_token_ids(tokenizer)]
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 1000.0
        head = model.get_output_embeddings().weight
        head[banned] = 0.0
        head[banned, 0] = -10.0


def _worker(ray_local, path, **cfg):
    from actors.rollout import RolloutWorker

    base = dict(engine="hf", n=2, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=3)
    w = RolloutWorker.remote(str(path), {**base, **cfg})
    ray_local.get(w.ready.remote())
    return w


@pytest.fixture(scope="module")
def text_worker(ray_local, tiny_text_model):
    w = _worker(ray_local, tiny_text_model)
    yield w
    ray_local.kill(w)


@pytest.fixture(scope="module")
def vlm_worker(ray_local, tiny_vlm):
    w = _worker(ray_local, tiny_vlm)
    yield w
    ray_local.kill(w)


@pytest.fixture(scope="module")
def vlm():
    from transformers import Glm4vForConditionalGeneration

    def load(path):
        return Glm4vForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()

    return load


def _push(worker, model, kind="cpu_bytes"):
    from actors.weights import make_transport

    return make_transport(kind, [worker], bucket_mb=1).push(model.named_parameters())


def test_text_trajectories_have_the_models_logprobs(ray_local, text_worker, tiny_text_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.float32).eval()
    _push(text_worker, model)
    trajs = ray_local.get(text_worker.generate.remote(ITEMS, step=0))
    assert len(trajs) == 2 and trajs[0].token_ids != trajs[1].token_ids
    for t in trajs:
        assert len(t.logprobs) == len(t.token_ids) > 0 and t.finish_reason in {"stop", "length"}
        assert len(t.token_ids) <= THINK + 2 + ANSWER
        ids = torch.tensor([t.prompt_token_ids + t.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_token_ids) - 1 : -1]
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(t.token_ids)[:, None])[:, 0]
        kept = [i for i, lp in enumerate(t.logprobs) if lp != 0.0]
        assert torch.allclose(torch.tensor(t.logprobs)[kept], ref[kept], atol=1e-4)
    again = ray_local.get(text_worker.generate.remote(ITEMS, step=0))
    assert [t.token_ids for t in again] == [t.token_ids for t in trajs]


def test_force_answer_on_hf_text(ray_local, text_worker, tiny_text_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_text_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.float32)
    never_close_think(model, tok)
    _push(text_worker, model, "shm")
    for t in ray_local.get(text_worker.generate.remote(ITEMS, step=1)):
        assert t.forced_answer and t.finish_reason == "length"
        assert tok.decode(t.token_ids[THINK : THINK + 2]) == "</think><answer>"
        assert len(t.token_ids) == THINK + 2 + ANSWER
        assert "</think>" not in tok.decode(t.token_ids[:THINK])
        assert t.logprobs[THINK : THINK + 2] == [0.0, 0.0]
        assert t.forced_positions == [THINK, THINK + 1]


def _png_b64(img) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_image_prompt_is_expanded_exactly_once(
    ray_local, vlm_worker, tiny_vlm, vlm, shapes_image, tmp_path
):
    from PIL import Image

    from rlcs.tokenizer import build_tokenizer
    from rlcs.vlm_processor import Glm4vImageTextProcessor

    model = vlm(tiny_vlm)
    _push(vlm_worker, model)
    shapes_image.save(tmp_path / "shapes.png")
    blank = Image.new("RGB", (112, 84), "white")
    items = [
        {"id": "v1", "domain": "vqa", "prompt": "What shapes?", "images": ["shapes.png"]},
        {"id": "v2", "domain": "vqa", "prompt": "What shapes?", "images": [_png_b64(blank)]},
    ]
    trajs = ray_local.get(
        vlm_worker.generate.remote(items, n=1, step=0, base_dir=str(tmp_path), temperature=0.0)
    )
    tok = build_tokenizer()
    image_id = tok.convert_tokens_to_ids("<|image|>")
    for t in trajs:
        # 112x84 -> grid 1x6x8 patches -> 48 / merge 2x2 = 12 image tokens, one image block.
        assert t.prompt_token_ids.count(image_id) == 12
        assert t.prompt_token_ids.count(tok.convert_tokens_to_ids("<|begin_of_image|>")) == 1
        assert len(t.logprobs) == len(t.token_ids) > 0
    proc = Glm4vImageTextProcessor.from_pretrained(tiny_vlm)
    enc = proc("[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>What shapes?"
               "<|assistant|>\n", [shapes_image])  # fmt: skip
    assert enc["input_ids"][0].tolist() == trajs[0].prompt_token_ids
    with torch.no_grad():
        first = model(**enc).logits[0, -1].float().log_softmax(-1)
    assert trajs[0].token_ids[0] == int(first.argmax())
    assert trajs[0].logprobs[0] == pytest.approx(float(first.max()), abs=1e-4)
    assert trajs[0].logprobs[0] != pytest.approx(trajs[1].logprobs[0], abs=1e-6), "pixels matter"


def test_pre_expanded_prompt_is_refused(ray_local, vlm_worker):
    import ray

    bad = [{"id": "x", "domain": "vqa", "prompt": "<|image|> what?", "images": []}]
    with pytest.raises(ray.exceptions.RayTaskError, match="already contains"):
        ray_local.get(vlm_worker.generate.remote(bad, n=1))


def test_force_answer_on_hf_vlm_with_image(
    ray_local, vlm_worker, tiny_vlm, vlm, shapes_image, tmp_path
):
    from rlcs.tokenizer import build_tokenizer

    tok = build_tokenizer()
    model = vlm(tiny_vlm)
    never_close_think(model, tok)
    report = _push(vlm_worker, model)
    assert report.checksum_ok and report.verified_readback == report.tensors
    shapes_image.save(tmp_path / "s.png")
    items = [{"id": "v", "domain": "vqa", "prompt": "Count.", "images": ["s.png"]}]
    for t in ray_local.get(vlm_worker.generate.remote(items, step=2, base_dir=str(tmp_path))):
        assert t.forced_answer and len(t.token_ids) == THINK + 2 + ANSWER
        assert tok.decode(t.token_ids[THINK : THINK + 2]) == "</think><answer>"
        assert t.forced_positions == [THINK, THINK + 1]


def test_nothink_mode_answers_directly(ray_local, tiny_text_model):
    w = _worker(ray_local, tiny_text_model, nothink=True, n=1)
    try:
        (t,) = ray_local.get(w.generate.remote(ITEMS))
    finally:
        ray_local.kill(w)
    from rlcs.tokenizer import build_tokenizer

    tok = build_tokenizer()
    prompt = tok.decode(t.prompt_token_ids)
    assert prompt.endswith("/nothink<|assistant|>\n<think></think>")
    assert not t.forced_answer and len(t.token_ids) <= ANSWER and t.forced_positions == []
    # the think block the prompt opened belongs to the response the verifiers read, which
    # must start with <think> in the GLM format
    assert t.response == "<think></think>" + tok.decode(t.token_ids, skip_special_tokens=True)


def test_batched_generation_matches_one_request_at_a_time(tiny_vlm, shapes_image, tmp_path):
    """Batches are left-padded and sampled row by row from each request's own generator, so a
    rollout is the same whether it is generated alone or among others (images of two sizes)."""
    from actors.rollout import RolloutWorkerImpl

    shapes_image.save(tmp_path / "a.png")
    shapes_image.resize((84, 56)).save(tmp_path / "b.png")
    items = [
        {"id": "i1", "domain": "vqa", "prompt": "What shapes?", "images": ["a.png"]},
        {"id": "i2", "domain": "vqa", "prompt": "Count them, please.", "images": ["b.png"]},
        {"id": "t1", "domain": "math", "prompt": "What is 7*6?"},
        {"id": "t2", "domain": "math", "prompt": "Add 12 and 30, then halve it."},
    ]
    base = dict(engine="hf", n=3, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=5)
    runs = {}
    for bs in (1, 64):
        worker = RolloutWorkerImpl(str(tiny_vlm), {**base, "hf_batch_size": bs})
        runs[bs] = worker.generate(items, step=4, base_dir=str(tmp_path), temperature=1.0)
    assert len(runs[1]) == len(runs[64]) == 12
    for one, many in zip(runs[1], runs[64], strict=True):
        assert one.item_id == many.item_id and one.prompt_token_ids == many.prompt_token_ids
        assert one.token_ids == many.token_ids
        assert torch.allclose(torch.tensor(one.logprobs), torch.tensor(many.logprobs), atol=1e-4)
    # sampling really happened: the three rollouts of an item differ
    assert len({tuple(t.token_ids) for t in runs[64] if t.item_id == "t2"}) > 1


def test_a_checkpoints_generation_defaults_do_not_bend_the_samples(tiny_text_model, tmp_path):
    """A published checkpoint's generation_config may ask for a repetition penalty or forbid
    repeated n-grams; transformers would apply them to the logits before the engine samples.
    The rollouts must come from the model's own distribution, with its own logprobs (as vLLM
    gives them, with explicit sampling parameters): greedy is the plain argmax."""
    import shutil

    from transformers import AutoModelForCausalLM, GenerationConfig

    from actors.rollout import RolloutWorkerImpl

    path = tmp_path / "model"
    shutil.copytree(tiny_text_model, path)
    gen = GenerationConfig.from_pretrained(path)
    gen.update(repetition_penalty=3.0, no_repeat_ngram_size=1, min_new_tokens=THINK)
    gen.save_pretrained(path)
    base = dict(engine="hf", n=1, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=1)
    items = ITEMS + [{"id": "t2", "domain": "math", "prompt": "Add 12 and 30, then halve it."}]
    trajs = RolloutWorkerImpl(str(path), base).generate(items, step=0, temperature=0.0)
    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.float32).eval()
    for t in trajs:
        ids = torch.tensor([t.prompt_token_ids + t.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_token_ids) - 1 : -1]
        sampled = [i for i in range(len(t.token_ids)) if i not in t.forced_positions]
        assert [t.token_ids[i] for i in sampled] == logits.argmax(-1)[sampled].tolist()
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(t.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(t.logprobs)[sampled], ref[sampled], atol=1e-4)


def test_tempered_logprobs_are_of_the_distribution_sampled_from(tiny_text_model):
    """With rollout.logprobs=tempered a sampled token's logprob is that of the logits over the
    temperature (what learner.grpo.old_logprobs=rollout needs); the tokens are the raw mode's."""
    from transformers import AutoModelForCausalLM

    from actors.rollout import RolloutWorkerImpl

    base = dict(engine="hf", n=2, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=4)
    items = ITEMS + [{"id": "t2", "domain": "math", "prompt": "Add 12 and 30, then halve it."}]
    raw = RolloutWorkerImpl(str(tiny_text_model), base).generate(items, step=0, temperature=0.5)
    tempered = RolloutWorkerImpl(str(tiny_text_model), {**base, "logprobs": "tempered"}).generate(
        items, step=0, temperature=0.5
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, dtype=torch.float32).eval()
    for r, t in zip(raw, tempered, strict=True):
        assert r.token_ids == t.token_ids
        ids = torch.tensor([t.prompt_token_ids + t.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_token_ids) - 1 : -1]
        sampled = [i for i in range(len(t.token_ids)) if i not in t.forced_positions]
        pick = torch.tensor(t.token_ids)[:, None]
        for series, temp in ((t.logprobs, 0.5), (r.logprobs, 1.0)):
            ref = torch.log_softmax(logits / temp, -1).gather(1, pick)[:, 0]
            assert torch.allclose(torch.tensor(series)[sampled], ref[sampled], atol=1e-4)
    gaps = [abs(a - b) for r, t in zip(raw, tempered, strict=True)
            for a, b in zip(r.logprobs, t.logprobs, strict=True)]  # fmt: skip
    assert max(gaps) > 1e-3  # the two modes report different numbers


def test_an_items_samples_share_one_prefill(tiny_vlm, shapes_image, tmp_path, monkeypatch):
    """The n samples of an image prompt are prefilled once and continue from copies of its KV
    cache: the same tokens and logprobs as prefilling every row, with fewer prefilled rows."""
    from actors.rollout import RolloutWorkerImpl
    from actors.rollout.hf_engine import HFEngine

    shapes_image.save(tmp_path / "a.png")
    shapes_image.resize((84, 56)).save(tmp_path / "b.png")
    items = [
        {"id": "i1", "domain": "vqa", "prompt": "What shapes?", "images": ["a.png"]},
        {"id": "i2", "domain": "vqa", "prompt": "Count them, please.", "images": ["b.png"]},
        {"id": "i3", "domain": "vqa", "prompt": "Which is larger?", "images": ["a.png"]},
    ]
    worker = RolloutWorkerImpl(
        str(tiny_vlm),
        dict(engine="hf", n=4, max_think_tokens=THINK, max_answer_tokens=ANSWER, seed=5),
    )
    shared_rows = []
    real = HFEngine._prefill_shared

    def counting(self, reqs, *args):
        cache = real(self, reqs, *args)
        shared_rows.append((len(reqs), cache is not None))
        return cache

    monkeypatch.setattr(HFEngine, "_prefill_shared", counting)
    shared = worker.generate(items, step=2, base_dir=str(tmp_path), temperature=1.0)
    assert shared_rows == [(12, True)]  # one batch of 12 rows, prefilled as 3 prompts
    monkeypatch.setattr(HFEngine, "_prefill_shared", lambda *a: None)
    plain = worker.generate(items, step=2, base_dir=str(tmp_path), temperature=1.0)
    assert [t.item_id for t in shared] == [t.item_id for t in plain]
    for a, b in zip(shared, plain, strict=True):
        assert a.token_ids == b.token_ids and a.prompt_token_ids == b.prompt_token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert len({tuple(t.token_ids) for t in shared}) > 3  # sampled, not one answer per item


def _sampler(temps, top_ps=None, suppress=None, seeds=None, stop_ids=(0,), rule=None, steps=4):
    from actors.rollout.engine import GenRequest
    from actors.rollout.hf_engine import _RowSampler

    top_ps = top_ps or [1.0] * len(temps)
    seeds = seeds or list(range(len(temps)))
    reqs = [
        GenRequest([1], steps, seed, temperature=t, top_p=p)
        for t, p, seed in zip(temps, top_ps, seeds, strict=True)
    ]
    return _RowSampler(reqs, suppress, list(stop_ids), steps, rule)


def test_row_sampler_draws_from_the_tempered_distribution():
    """Inverse-CDF draws from each row's own uniforms: over many seeded rows the frequencies
    are softmax(logits / T); top_p keeps the head only; suppressed tokens never come."""
    rows = 4000
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0]).repeat(rows, 1)
    want = torch.softmax(logits[0] / 0.7, -1)
    picks = torch.tensor([_sampler([0.7] * rows, steps=1)._sample(logits, 0).tolist()]).flatten()
    freq = torch.bincount(picks, minlength=5).float() / rows
    assert torch.allclose(freq, want, atol=0.025), (freq, want)

    # top_p 0.8 at T=1: the head 0.47 + 0.17 < 0.8 <= 0.47 + 0.17 + 0.10 keeps three tokens
    p = torch.softmax(logits[0], -1)
    head = p[:3] / p[:3].sum()
    s = _sampler([1.0] * rows, top_ps=[0.8] * rows, steps=1)
    freq = torch.bincount(s._sample(logits, 0), minlength=5).float() / rows
    assert freq[3:].sum() == 0 and torch.allclose(freq[:3], head, atol=0.025), (freq, head)

    s = _sampler([1.0] * rows, suppress=[0], steps=1)
    masked = logits.clone()
    masked[:, 0] = float("-inf")
    assert 0 not in s._sample(masked, 0).tolist()


def test_row_sampler_rows_do_not_depend_on_their_batch():
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(0))
    together = _sampler([0.9, 0.0, 1.3], seeds=[7, 8, 9])._sample(logits, 2)
    for b, (t, seed) in enumerate(zip([0.9, 0.0, 1.3], [7, 8, 9], strict=True)):
        alone = _sampler([t], seeds=[seed])._sample(logits[b : b + 1], 2)
        assert alone.item() == together[b].item()
    assert together[1].item() == logits[1].argmax().item()


def test_row_sampler_applies_the_budget_rule():
    """The rule's forced tokens get logprob 0.0, and a spent budget ends the row with a stop
    token that ``cut`` marks for removal."""
    from rlcs.prompts import Budget, BudgetRule

    close, answer, stop = 5, 6, 0
    rule = BudgetRule(Budget(2, 1), close, (close, answer))
    s = _sampler([0.0], stop_ids=[stop], rule=rule, steps=rule.max_tokens + 1)
    logits = torch.zeros(1, 8)
    logits[0, 3] = 4.0  # greedy always says 3: it never closes the think
    for _ in range(rule.max_tokens + 1):
        out = s(torch.zeros(1, 1, dtype=torch.long), logits.clone())
        if s.done[0]:
            break
    assert s.tokens[0] == [3, 3, close, answer, 3, stop]
    assert s.cut[0] == 5 and s.forced_at[0] == [2, 3]
    lps = [step[0] for step in s.logprobs]
    assert lps[2:4] == [0.0, 0.0] and all(lp < 0 for lp in lps[:2] + lps[4:5])
    assert out[0].argmax().item() == stop


def test_a_push_with_a_wrongly_shaped_tensor_changes_no_weight(tiny_text_model):
    """A push is refused whole: a tensor of the wrong shape is found before any is copied (the
    loader copies every tensor that fits before it raises), and the staged push is dropped."""
    from actors.rollout.hf_engine import HFEngine
    from rlcs.tokenizer import build_tokenizer, stop_token_ids

    engine = HFEngine(str(tiny_text_model), stop_token_ids(build_tokenizer()))
    live = engine.model.state_dict()
    a, b = list(live)[1:3]
    before = {n: t.clone() for n, t in live.items()}
    wrong = torch.zeros(live[b].shape[0] + 1, *live[b].shape[1:])
    engine._staged.add([(a, torch.full_like(live[a], 0.123)), (b, wrong)], "v1", "cpu_bytes")
    with pytest.raises(ValueError, match=rf"wrong shape: '{b}': \({wrong.shape[0]}, "):
        engine.commit_weights("v1")
    assert all(torch.equal(t, before[n]) for n, t in engine.model.state_dict().items())
    assert engine._staged.version is None
