"""Learner ranks as Ray actors in one gloo group: 2 ranks equal 1 rank, and exact resume."""

from __future__ import annotations

import random
import time

import pytest
import torch

from rlcs.config import Config

ray = pytest.importorskip("ray")

from actors.learner_group import LearnerGroup  # noqa: E402
from actors.rank_calls import RanksStuck, gather_ranks  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local():
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1,  # declared only, for the colocated share below: no rank here uses CUDA
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    yield
    ray.shutdown()


def _config(model, ranks: int, micro: int, zero: int = 2, stage="pretrain", **grpo) -> Config:
    learner = {"num_ranks": ranks, "micro_batch": micro, "zero_stage": zero, "lr": 1e-3}
    return Config.model_validate(
        {
            "stage": stage,
            "model": {"path": str(model)},
            "learner": {**learner, "grpo": grpo},
            "data": {"seq_len": 48},
        }
    )


def text_batch(step: int) -> list[dict]:
    rng = random.Random(step)
    words = [
        "the",
        "a",
        "red",
        "blue",
        "box",
        "circle",
        "left",
        "right",
        "above",
        "below",
        "of",
        "is",
    ]
    return [
        {"text": " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))} for _ in range(6)
    ]


def rl_batch(tok, seed: int = 7, items: str = "pq", lengths=range(4, 21)) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for item in items:
        prompt = tok(
            f"[gMASK]<sop><|user|>\nquestion {item}<|assistant|>\n", add_special_tokens=False
        )["input_ids"]
        for _ in range(4):
            resp = [rng.randint(3, 250) for _ in range(rng.choice(lengths))]
            out.append(
                dict(
                    item_id=item,
                    prompt_token_ids=prompt,
                    token_ids=resp,
                    reward=float(rng.random() < 0.5),
                )
            )
    return out


def _grads(group: LearnerGroup) -> torch.Tensor:
    """The optimizer's gradient over all ranks: ZeRO-2 partitions, in rank order."""
    return torch.cat(group.call("recorded_grads"))


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    n = min(a.numel(), b.numel())
    assert a[n:].abs().sum() == 0 and b[n:].abs().sum() == 0  # alignment padding only
    return ((a[:n] - b[:n]).norm() / b[:n].norm()).item()


def test_two_ranks_equal_one_rank_with_twice_the_micro_batch(ray_local, tiny_text_model):
    results = {}
    for name, ranks, micro in (("one", 1, 2), ("two", 2, 1)):
        group = LearnerGroup(_config(tiny_text_model, ranks=ranks, micro=micro), tiny_text_model)
        try:
            rl = rl_batch(group.tokenizer)
            # group "p" all right: its samples (advantage 0) are left out of the passes
            one_flat = [dict(t, reward=1.0) if t["item_id"] == "p" else t for t in rl]
            out = []
            for stage, batch in (("pretrain", text_batch(0)), ("rl", rl), ("rl", one_flat)):
                group.call("record_optimizer_grads")
                stats = group.train_step(stage, batch)
                out.append((stats, _grads(group)))
            # no signal at all: every rank runs a zero-weight micro-batch and steps
            results[name + "-flat"] = group.train_step("rl", [dict(t, reward=0.0) for t in rl])
            results[name] = out
        finally:
            group.shutdown()
    assert results["one"][2][0]["zero_advantage_samples"] == 4
    for (s1, g1), (s2, g2) in zip(results["one"], results["two"], strict=True):
        assert s2["loss"] == pytest.approx(s1["loss"], rel=1e-5, abs=1e-7)
        assert s2["grad_norm"] == pytest.approx(s1["grad_norm"], rel=1e-5)
        assert _close(g2, g1) < 1e-5
    for name in ("one", "two"):
        flat = results[name + "-flat"]
        assert flat["optimizer_steps"] == 1 and flat["tokens"] == 0 and flat["grad_norm"] == 0
    # the second rank really did work: tokens were balanced across both ranks
    pre_two = results["two"][0][0]["rank_tokens"]
    assert min(pre_two) > 0 and max(pre_two) - min(pre_two) <= 12


def test_two_bf16_mixed_ranks_reduce_fp32_gradients(ray_local, tiny_text_model):
    """learner.precision=bf16-mixed over two gloo ranks: DeepSpeed's torch_autocast in each
    rank's passes, the gradients reduced in fp32, and the step one rank with twice the
    micro-batch takes, to within the matmuls' bf16 rounding."""
    results = {}
    for name, ranks, micro in (("one", 1, 2), ("two", 2, 1)):
        cfg = _config(tiny_text_model, ranks=ranks, micro=micro)
        mixed = cfg.learner.model_copy(update={"precision": "bf16-mixed"})
        cfg = cfg.model_copy(update={"learner": mixed})
        group = LearnerGroup(cfg, tiny_text_model)
        try:
            out = []
            for stage, batch in (("pretrain", text_batch(0)), ("rl", rl_batch(group.tokenizer))):
                group.call("record_optimizer_grads")
                out.append((group.train_step(stage, batch), _grads(group)))
            results[name] = out
        finally:
            group.shutdown()
    for (s1, g1), (s2, g2) in zip(results["one"], results["two"], strict=True):
        assert g1.dtype == torch.float32 and g2.dtype == torch.float32
        assert s2["loss"] == pytest.approx(s1["loss"], rel=2e-2, abs=1e-3)
        assert _close(g2, g1) < 2e-2  # 0.1 to 0.5% measured


def test_resume_continues_exactly_after_restart(ray_local, tiny_text_model, tmp_path):
    """4 steps straight equal 2 steps, save, a fresh group (new processes) loading, 2 more.
    The fresh group is started with ``wait=False``, as the driver does to start the other
    roles while the ranks start: it refuses work until waited for, then is used as any."""
    straight = LearnerGroup(_config(tiny_text_model, ranks=2, micro=1), tiny_text_model)
    try:
        losses = [straight.train_step("pretrain", text_batch(k))["loss"] for k in range(2)]
        # what a save killed midway left behind, which the next save removes
        (tmp_path / "ckpt" / ".tmp-step-9" / "state").mkdir(parents=True)
        path = straight.save_checkpoint(tmp_path / "ckpt", "step-2", data_state={"next_batch": 2})
        losses += [straight.train_step("pretrain", text_batch(k))["loss"] for k in range(2, 4)]
        final = dict(straight.call("named_weights_list")[0])
    finally:
        straight.shutdown()
    with pytest.raises(RuntimeError, match="shut down: shutdown.. was called"):
        straight.train_step("pretrain", text_batch(0))
    assert path.endswith("step-2") and (tmp_path / "ckpt" / "latest").read_text() == "step-2"
    assert not list((tmp_path / "ckpt").glob(".tmp-*"))

    resumed = LearnerGroup(_config(tiny_text_model, ranks=2, micro=1), tiny_text_model, wait=False)
    try:
        with pytest.raises(RuntimeError, match="call wait_ready"):
            resumed.train_step(None, text_batch(0))
        with pytest.raises(RuntimeError, match="call wait_ready"):
            resumed.export_hf("/nonexistent")
        resumed.wait_ready()
        resumed.wait_ready()  # once ready, it stays so
        state = resumed.load_checkpoint(tmp_path / "ckpt")
        assert state == {"next_batch": 2}
        again = [resumed.train_step("pretrain", text_batch(k))["loss"] for k in range(2, 4)]
        weights = dict(resumed.call("named_weights_list")[0])
    finally:
        resumed.shutdown()
    assert again == pytest.approx(losses[2:], rel=1e-6, abs=0)
    for name, t in final.items():
        torch.testing.assert_close(weights[name], t, rtol=1e-6, atol=1e-7, msg=name)


def test_a_colocated_rank_takes_only_its_share_of_the_bundle(ray_local, tiny_text_model):
    """Colocated, a learner rank and a rollout engine split one bundle: the rank must ask for
    the placement's share of its GPU, or the engine beside it can never be scheduled."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 2, "GPU": 1}])
    ray.get(pg.ready(), timeout=30)
    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    # the rank holds its share from the moment Ray places it, before its start has finished
    group = LearnerGroup(_config(tiny_text_model, ranks=1, micro=1), tiny_text_model,
                         num_cpus_per_rank=1, num_gpus_per_rank=0.5, placement_group=pg,
                         wait=False)  # fmt: skip
    bundle_gpu = f"GPU_group_0_{pg.id.hex()}"
    deadline = time.monotonic() + 60
    while ray.available_resources().get(bundle_gpu, 1.0) == 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)  # until the rank is placed, so that the engine comes second
    assert ray.available_resources().get(bundle_gpu, 1.0) == 0.5

    @ray.remote
    class Engine:  # stands in for the rollout engine's half of the bundle
        def gpus(self):
            return ray.get_runtime_context().get_accelerator_ids()["GPU"]

    engine = Engine.options(num_cpus=1, num_gpus=0.5, scheduling_strategy=strategy).remote()
    assert ray.get(engine.gpus.remote(), timeout=60) == ["0"]
    group.shutdown()
    ray.kill(engine)
    remove_placement_group(pg)


def _image_doc(color: str) -> dict:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (112, 84), "white")
    ImageDraw.Draw(img).rectangle([10, 10, 60, 50], fill=color)
    return {"text": f"<|begin_of_image|><|image|><|end_of_image|>a {color} box", "images": [img]}


# GLM-4.5V's architecture has GLM-4.1V's vision tower, so its ZeRO-3 case covers the tower's
# gathers as well as the experts'
@pytest.mark.parametrize("kind,zero", [("vlm", 2), ("vlm_moe", 3)])
def test_vlm_ranks_without_images_still_join_the_vision_towers_collectives(
    ray_local, request, kind, zero
):
    """A step whose image documents all land on one rank: the other rank's micro-batches are
    text only, yet ZeRO gathers (stage 3) and reduces (every stage) the vision tower's
    parameters with both ranks. Without a blank image pass on the text-only rank, gloo aborted
    on a collective size mismatch. Two ranks must equal one rank with both documents; the
    GLM-4.5V architecture too, whose experts are one parameter per layer, so an expert that
    gets no token on a rank still takes part."""
    tiny_vlm = request.getfixturevalue("tiny_vlm" if kind == "vlm" else "tiny_vlm_moe")
    # the last step has one document: the other rank runs a zero-weight pass, with the tower
    batches = [[_image_doc("red"), {"text": "plain text only here"}],
               [{"text": "more words"}, _image_doc("blue"), {"text": "and more"}],
               [_image_doc("green")]]  # fmt: skip
    stats = {}
    for name, ranks, micro in (("one", 1, 2), ("two", 2, 1)):
        group = LearnerGroup(_config(tiny_vlm, ranks=ranks, micro=micro, zero=zero), tiny_vlm)
        try:
            stats[name] = [group.train_step("pretrain", b) for b in batches]
        finally:
            group.shutdown()
    assert [min(s["rank_tokens"]) > 0 for s in stats["two"]] == [True, True, False]
    for one, two in zip(stats["one"], stats["two"], strict=True):
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)


@pytest.mark.timeout(300)  # a mismatch can hang rather than abort
@pytest.mark.parametrize("mini_batches,kl_coef", [(2, 0.0), (1, 0.1)])
def test_zero3_logprob_passes_line_up_across_ranks(
    ray_local, tiny_text_model, mini_batches, kl_coef
):
    """The forward passes that only read logprobs (the old policy's, with several optimizer
    steps a call; the reference model's, for the KL term) gather ZeRO-3's partitioned
    parameters from every rank. With ranks holding unequal numbers of micro-batches (and one
    rank none at all in a mini-batch) they used to abort under gloo (collective size mismatch;
    NCCL hangs). Two ranks must equal one, and the reference model is partitioned over the
    ranks like the policy instead of copied whole onto each.

    With the KL term, the rollouts of a group also share their prompt, and a last batch of one
    group is one document: of two ranks one gets nothing and runs a zero-weight filler
    micro-batch, which needs reference logprobs like any other (it used to fail with
    "kl_coef > 0 needs ref_logprobs")."""
    from actors.learner_batches import prepare_step

    grpo = {"mini_batches": mini_batches, "kl_coef": kl_coef, "share_prompts": kl_coef > 0}
    stats, held = {}, {}
    for name, ranks, micro in (("one", 1, 2), ("two", 2, 1)):
        cfg = _config(tiny_text_model, ranks, micro, zero=3, stage="rl", **grpo)
        group = LearnerGroup(cfg, tiny_text_model)
        try:
            # groups whose micro-batches do not split evenly over two ranks
            items = "pq" if grpo["share_prompts"] else "pqr"
            batch = rl_batch(group.tokenizer, seed=12, items=items, lengths=(3, 30))
            if ranks == 2:
                steps = prepare_step("rl", batch, cfg, group.tokenizer, group.processor)
                counts = [sum(len(m) for m in s.minis) for s in steps]
                assert counts[0] != counts[1]  # the case that used to abort
            held[name] = group.call("parameter_counts")
            stats[name] = [group.train_step("rl", batch) for _ in range(2)]
            if ranks == 2 and not kl_coef:
                _push_fails_midway_then_succeeds(group)
            if kl_coef:
                one_group = rl_batch(group.tokenizer, seed=5, items="p", lengths=(3, 4))
                stats[name] += [group.train_step("rl", one_group) for _ in range(2)]
        finally:
            group.shutdown()
    if kl_coef:  # one rank had nothing in the one-group steps
        assert [min(s["rank_tokens"]) for s in stats["two"][2:]] == [0.0, 0.0]
    for one, two in zip(stats["one"], stats["two"], strict=True):
        assert two["optimizer_steps"] == one["optimizer_steps"] == mini_batches
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-6)
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    whole = held["one"][0]
    for kind in ("policy", "reference"):
        shares = [h[kind] for h in held["two"]]
        if kind == "reference" and not kl_coef:
            assert whole[kind] == 0 and shares == [0, 0]
            continue
        assert whole[kind] > 0 and sum(shares) >= whole[kind]
        assert max(shares) < 0.6 * whole[kind]  # each rank holds about half


def _push_fails_midway_then_succeeds(group: LearnerGroup) -> None:
    """A push that rank 0's transport gives up on midway (an engine died) raises its error and
    leaves the group usable: rank 0 still finishes the ZeRO-3 gathers that rank 1 is waiting
    in, where it used to leave rank 1 there, and the caller's retry, for ever."""
    from actors.weights.base import WeightSyncError

    class Transport:  # local, so that Ray ships the class itself to the rank
        def __init__(self, fail_at: int | None):
            self.fail_at = fail_at

        def push(self, named):
            n = 0
            for n, _ in enumerate(named, 1):
                if n == self.fail_at:
                    raise WeightSyncError(f"the engine went away at tensor {n}")
            return n

    start = time.monotonic()
    with pytest.raises(WeightSyncError, match="went away at tensor 2"):
        group.push_weights(Transport(fail_at=2))
    assert time.monotonic() - start < 30
    assert group.push_weights(Transport(fail_at=None)) == len(group.call("named_weights_list")[0])


def test_a_rank_that_fails_while_the_others_wait_in_a_collective_ends_the_call(ray_local):
    """One rank raises while the other waits for it in a gloo barrier that can never complete:
    the caller gets, within the grace period, an error naming the failed rank, its error and
    the stuck rank, instead of waiting with it. Ranks that fail alike raise as ``ray.get``."""
    from actors.network import free_port

    class Rank:
        def __init__(self, rank: int, port: int):
            import torch.distributed as dist

            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
            )
            self.rank = rank

        def step(self, fail_on: tuple[int, ...]) -> int:
            import torch.distributed as dist

            if self.rank in fail_on:
                raise OSError(28, "No space left on device")
            dist.barrier()
            return self.rank

    port = free_port()
    cls = ray.remote(num_cpus=0.1)(Rank)
    ranks = [cls.remote(r, port) for r in range(2)]
    try:
        assert gather_ranks([a.step.remote(()) for a in ranks], "a step", 5.0) == [0, 1]
        with pytest.raises(OSError, match="No space left"):  # both failed: the group is intact
            gather_ranks([a.step.remote((0, 1)) for a in ranks], "a step", 5.0)
        start = time.monotonic()
        with pytest.raises(RanksStuck) as e:
            gather_ranks([a.step.remote((1,)) for a in ranks], "a save", 3.0)
        assert 3.0 <= time.monotonic() - start < 20
        message = str(e.value)
        assert "learner rank 1 failed in a save (OSError: [Errno 28] No space left" in message
        assert "rank(s) 0 had not finished it 3s later" in message
    finally:
        for a in ranks:
            ray.kill(a)


def test_own_error_is_what_the_remote_method_raised():
    from ray.exceptions import RayTaskError

    from actors.rank_calls import own_error

    full = OSError(28, "No space left on device")
    assert own_error(RayTaskError("save_checkpoint", "Traceback ...", full)) is full
    plain = ValueError("a driver-side error")
    assert own_error(plain) is plain
