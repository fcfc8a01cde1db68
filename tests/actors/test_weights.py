"""Weight sync: bucketing, checksum comparison and tied weights (no Ray), then real pushes into HF
engines in Ray actors, including the failures a learner must hear about."""

from __future__ import annotations

import os

import pytest
import torch

from actors.weights.base import (
    WeightSyncError,
    compare_checksums,
    dedupe_tied,
    iter_buckets,
)


def test_buckets_respect_size_and_keep_order():
    tensors = [(f"t{i}", torch.zeros(256)) for i in range(10)]  # 1 KiB each
    buckets = list(iter_buckets(tensors, bucket_bytes=3 * 1024))
    assert [len(b) for b in buckets] == [3, 3, 3, 1]
    assert [n for b in buckets for n, _ in b] == [f"t{i}" for i in range(10)]
    big = list(iter_buckets([("a", torch.zeros(10)), ("huge", torch.zeros(4096))], 1024))
    assert [[n for n, _ in b] for b in big] == [["a"], ["huge"]]


def test_tied_embeddings_are_sent_once(tmp_path):
    from transformers import AutoModelForCausalLM

    from rlcs.models import build_tiny_text_model

    path = build_tiny_text_model(tmp_path / "tied", tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_pretrained(path)
    skipped: list[str] = []
    names = [n for n, _ in dedupe_tied(model.state_dict().items(), skipped)]
    assert skipped == ["lm_head.weight"] and "model.embed_tokens.weight" in names


def test_fresh_copies_in_freed_memory_are_not_taken_for_tied_weights():
    """ZeRO-3 pushes a copy of each gathered module and frees it once its bucket is sent, so
    the next copy of the same size often lands at the same address: it is another weight and
    must be sent. A real alias is still dropped after the views of the first one are gone."""
    layers = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(16)]
    embed = torch.nn.Parameter(torch.randn(32, 16))

    def stream():
        yield "embed.weight", embed.detach()
        for i, p in enumerate(layers):
            yield f"layers.{i}.weight", p.detach().clone()
        yield "lm_head.weight", embed.detach()  # tied: the same storage, still alive

    skipped: list[str] = []
    sent = []
    for bucket in iter_buckets(dedupe_tied(stream(), skipped), bucket_bytes=64 * 64 * 4):
        sent += [name for name, _ in bucket]
    assert skipped == ["lm_head.weight"]
    assert sent == ["embed.weight"] + [f"layers.{i}.weight" for i in range(16)]


def test_cuda_ipc_holds_one_buckets_buffer_at_a_time(monkeypatch):
    """A bucket is sent once every engine has copied the one before out of its IPC memory, so
    the learner keeps only the bucket in flight, not a second copy of the whole model on the
    GPU it shares with the engines (stand-ins for the CUDA calls: no GPU here)."""
    import weakref
    from types import SimpleNamespace

    from actors.weights import cuda_ipc

    packed: list[weakref.ref] = []

    def pack(bucket):
        buf = torch.empty(16, dtype=torch.uint8)
        packed.append(weakref.ref(buf))
        return buf, []

    monkeypatch.setattr(cuda_ipc, "pack", pack)
    monkeypatch.setattr(cuda_ipc, "encode", lambda buf, entries: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    worker = SimpleNamespace(receive_weights=SimpleNamespace(remote=lambda *args: None))
    transport = cuda_ipc.CudaIpcTransport([worker])
    on_gpu = SimpleNamespace(device=torch.device("cuda"))
    for index in range(3):
        transport._send_bucket([("w", on_gpu)], index)
        assert [r() is not None for r in packed] == [False] * index + [True]
    transport._cleanup()
    assert all(r() is None for r in packed)


def test_first_mismatching_tensor_is_named():
    exp = {"a": "1", "b": "2", "c": "3"}
    with pytest.raises(WeightSyncError, match="mismatch on tensor 'b'"):
        compare_checksums(exp, {"a": "1", "b": "9", "c": "8"}, "w0", ["a", "b", "c"])
    with pytest.raises(WeightSyncError, match="did not load tensor 'c'"):
        compare_checksums(exp, {"a": "1", "b": "2"}, "w0", ["a", "b", "c"])


def test_a_staged_push_with_unknown_names_or_wrong_shapes_is_refused_and_dropped():
    """Checked before an engine loads anything: the first offenders in push order, each with
    what the model has (its shape; for an unknown name, its names nearby), and the staged
    tensors dropped so they can never be committed."""
    from actors.weights.receiver import StagedWeights

    expected = {f"model.layers.{i}.self_attn.{p}_proj.weight": (4, 4) for i in range(2)
                for p in "qkvo"} | {"model.norm.weight": (4,)}  # fmt: skip
    staged = StagedWeights()
    staged.add([(n, torch.zeros(s)) for n, s in expected.items()], "v1", "cpu_bytes")
    staged.refuse_mismatches(expected, "test engine")  # a matching push passes untouched
    assert len(staged.names()) == len(expected) and staged.version == "v1"

    bad = [("model.layers.1.self_attn.qq_proj.weight", torch.zeros(4, 4)),
           ("model.norm.weight", torch.zeros(5)),
           *[(f"lm_head.{i}", torch.zeros(1)) for i in range(4)]]  # fmt: skip
    staged.add(bad, "v2", "cpu_bytes")
    with pytest.raises(ValueError) as err:
        staged.refuse_mismatches(expected, "test engine")
    msg = str(err.value)
    assert msg.startswith("test engine: push refused, nothing was loaded")
    assert (
        "the model does not have: 'model.layers.1.self_attn.qq_proj.weight' (under "
        "'model.layers.1.self_attn.' the model has model.layers.1.self_attn.k_proj.weight, "
        "model.layers.1.self_attn.o_proj.weight, model.layers.1.self_attn.q_proj.weight, ...); "
        "'lm_head.0' (the model has no name starting 'lm_head.'); 'lm_head.1' (the model has "
        "no name starting 'lm_head.') and 2 more. Tensors of the wrong shape: "
        "'model.norm.weight': (5,) where the model has (4,)" in msg
    )
    assert staged.names() == [] and staged.version is None


def test_unknown_transport_is_refused():
    from actors.weights import make_transport

    with pytest.raises(ValueError, match="unknown weight_sync 'carrier_pigeon'"):
        make_transport("carrier_pigeon", [object()])


# --- real pushes into HF engines -------------------------------------------------------------


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory):
    from rlcs.models import build_tiny_text_model

    return build_tiny_text_model(tmp_path_factory.mktemp("tied") / "m", tie_word_embeddings=True)


@pytest.fixture(scope="module")
def hf_workers(ray_local, tied_model):
    from actors.rollout import RolloutWorker

    cfg = dict(engine="hf", n=1, max_think_tokens=16, max_answer_tokens=8)
    ws = [RolloutWorker.remote(str(tied_model), cfg, worker_index=i) for i in range(2)]
    ray_local.get([w.ready.remote() for w in ws])
    yield ws
    for w in ws:
        ray_local.kill(w)


def _trained(path, seed):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


@pytest.mark.parametrize("kind", ["cpu_bytes", "shm"])
def test_push_to_two_workers_with_tied_embeddings(
    ray_local, hf_workers, tied_model, kind, tmp_path
):
    import glob

    from actors.rollout import RolloutWorkerImpl
    from actors.weights import make_transport

    learner = _trained(tied_model, seed=11)
    transport = make_transport(kind, hf_workers, bucket_mb=0.1)
    report = transport.push(learner.state_dict().items())
    assert report.checksum_ok and report.workers == 2 and report.buckets > 1
    assert report.skipped_tied == ["lm_head.weight"]
    assert report.verified_readback == 2 * report.tensors
    if kind == "shm":  # one kept file per bucket, rewritten in place by the next push
        kept = sorted(glob.glob(f"/dev/shm/rlcs-weights-*-{transport.id}-*"))
        assert len(kept) == report.buckets
        inodes = [os.stat(p).st_ino for p in kept]
        assert transport.push(learner.state_dict().items()).checksum_ok
        assert [os.stat(p).st_ino for p in kept] == inodes
    transport.close()
    assert not glob.glob(f"/dev/shm/rlcs-weights-*-{getattr(transport, 'id', 'x')}-*")
    learner.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tied_model).save_pretrained(tmp_path)
    cfg = dict(engine="hf", n=1, max_think_tokens=16, max_answer_tokens=8)
    items = [{"id": "a", "domain": "math", "prompt": "Add 2 and 2."}]
    want = RolloutWorkerImpl(str(tmp_path), cfg).generate(items, step=0, temperature=0.0)
    for w in hf_workers:
        got = ray_local.get(w.generate.remote(items, step=0, temperature=0.0))
        assert got[0].token_ids == want[0].token_ids


def test_shm_without_kept_buffers_leaves_nothing_behind(ray_local, hf_workers, tied_model):
    import glob

    from actors.weights import make_transport

    transport = make_transport("shm", hf_workers[:1], bucket_mb=0.1, keep_buffers=False)
    assert transport.push(_trained(tied_model, seed=14).named_parameters()).checksum_ok
    assert not glob.glob(f"/dev/shm/rlcs-weights-*-{transport.id}-*")


def test_shm_files_of_a_dead_pusher_are_swept(tmp_path):
    import subprocess
    import sys

    from actors.weights.shm import PREFIX, sweep_orphans

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    orphan = tmp_path / f"{PREFIX}{dead}-abc-0"
    mine = tmp_path / f"{PREFIX}{os.getpid()}-abc-0"
    other = tmp_path / "unrelated"
    for p in (orphan, mine, other):
        p.write_bytes(b"x")
    assert sweep_orphans(str(tmp_path)) == [str(orphan)]
    assert not orphan.exists() and mine.exists() and other.exists()


def test_corrupted_bucket_fails_loudly_naming_the_tensor(
    ray_local, hf_workers, tied_model, monkeypatch
):
    from actors.weights import cpu_bytes, make_transport

    real = cpu_bytes.encode
    victim = "model.layers.1.mlp.up_proj.weight"

    def corrupting(bucket):
        out = []
        for name, t in bucket:
            if name == victim:
                t = t.clone()
                t.view(torch.int32).view(-1)[3] ^= 1 << 4
            out.append((name, t))
        return real(out)

    monkeypatch.setattr(cpu_bytes, "encode", corrupting)
    with pytest.raises(WeightSyncError, match=f"checksum mismatch on tensor '{victim}'"):
        make_transport("cpu_bytes", hf_workers, bucket_mb=0.1).push(
            _trained(tied_model, seed=12).named_parameters()
        )


def test_partial_or_misnamed_push_fails(ray_local, hf_workers, tied_model):
    from actors.weights import make_transport

    params = list(_trained(tied_model, seed=13).named_parameters())
    tp = make_transport("cpu_bytes", hf_workers[:1], bucket_mb=1)
    with pytest.raises(WeightSyncError, match="not covered by the push"):
        tp.push(params[:-3])
    renamed = [("model.layerz.0.bogus", params[0][1]), *params[1:]]
    with pytest.raises(WeightSyncError, match="model.layerz.0.bogus"):
        tp.push(renamed)


def test_a_push_that_leaves_parameters_out_changes_nothing_in_the_hf_engine(tied_model):
    """Refused as a whole: the parameters it did send are not loaded either, so the engine
    keeps the previous weights rather than a mix of old and new."""
    from actors.rollout import RolloutWorkerImpl
    from actors.weights import cpu_bytes
    from actors.weights.base import compare_checksums
    from actors.weights.checksum import tensor_checksum

    w = RolloutWorkerImpl(str(tied_model), dict(engine="hf", n=1))
    before = {n: t.clone() for n, t in w.engine.model.state_dict().items()}
    params = [(n, p.detach()) for n, p in _trained(tied_model, seed=15).named_parameters()]
    w.receive_weights("cpu_bytes", cpu_bytes.encode(params[:-2]), "v1")
    res = w.commit_weights("v1")
    assert res["missing"] == sorted(n for n, _ in params[-2:])
    after = w.engine.model.state_dict()
    assert [n for n in before if not torch.equal(before[n], after[n])] == []
    # so does one with a name the engine does not have
    w.receive_weights(
        "cpu_bytes", cpu_bytes.encode([*params, ("bogus", params[0][1].clone())]), "v3"
    )
    with pytest.raises(ValueError, match=r"nothing was loaded.*the model does not have: 'bogus' "):
        w.commit_weights("v3")
    assert [n for n in before if not torch.equal(before[n], after[n])] == []
    # the whole push then loads every tensor
    w.receive_weights("cpu_bytes", cpu_bytes.encode(params), "v2")
    res = w.commit_weights("v2")
    assert res["missing"] == [] and len(res["checksums"]) == len(params)
    expected = {n: tensor_checksum(t, "xxh3") for n, t in params}
    compare_checksums(expected, res["checksums"], "w", [n for n, _ in params])


# --- GPU transports (skipped without CUDA) ---------------------------------------------------


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    [
        # NCCL refuses two ranks on one GPU: the learner and the engine each need their own
        pytest.param("nccl", marks=pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs")),
        "cuda_ipc",
    ],
)
def test_gpu_transport_into_vllm(ray_local, tiny_text_model, kind, tmp_path):
    """After a GPU push, vLLM's greedy tokens equal transformers' with the learner's weights."""
    from transformers import AutoTokenizer

    from actors.rollout import RolloutWorker, RolloutWorkerImpl
    from actors.weights import make_transport

    cfg = dict(
        engine="vllm", n=1, max_think_tokens=16, max_answer_tokens=8, gpu_memory_utilization=0.2
    )
    share = 0.5 if kind == "cuda_ipc" else 1
    w = RolloutWorker.options(num_gpus=share).remote(str(tiny_text_model), cfg)
    try:
        learner = _trained(tiny_text_model, seed=21)
        learner.save_pretrained(tmp_path)
        AutoTokenizer.from_pretrained(tiny_text_model).save_pretrained(tmp_path)
        items = [{"id": "a", "domain": "math", "prompt": "1+1?"}]
        want = RolloutWorkerImpl(str(tmp_path), {**cfg, "engine": "hf"}).generate(
            items, step=0, temperature=0.0
        )
        report = make_transport(kind, [w], bucket_mb=0.1).push(learner.cuda().named_parameters())
        assert report.checksum_ok and report.buckets > 1
        got = ray_local.get(w.generate.remote(items, step=0, temperature=0.0))
        assert got[0].token_ids == want[0].token_ids
    finally:
        ray_local.kill(w)


@pytest.mark.gpu
@pytest.mark.slow
def test_vllm_sleep_and_wake_between_iterations(ray_local, tiny_text_model):
    from actors.rollout import RolloutWorker

    cfg = dict(engine="vllm", n=1, max_think_tokens=8, max_answer_tokens=4,
               gpu_memory_utilization=0.2, sleep_between_iterations=True)  # fmt: skip
    w = RolloutWorker.options(num_gpus=1).remote(str(tiny_text_model), cfg)
    try:
        items = [{"id": "a", "domain": "math", "prompt": "1+1?"}]
        first = ray_local.get(w.generate.remote(items, step=0, temperature=0.0))
        free_before = torch.cuda.mem_get_info()[0]
        ray_local.get(w.sleep.remote())
        assert torch.cuda.mem_get_info()[0] > free_before, "sleep frees GPU memory"
        again = ray_local.get(w.generate.remote(items, step=0, temperature=0.0))
        assert again[0].token_ids == first[0].token_ids, "wakes up with the same weights"
    finally:
        ray_local.kill(w)


def test_shared_gpu_workers_finds_engines_on_the_learners_gpu():
    """NCCL cannot hold two ranks on one GPU, and creating such a group hangs; the transport
    checks the engines' GPUs first."""
    from actors.weights.nccl import shared_gpu_workers

    assert shared_gpu_workers("GPU-a", [["GPU-b"], ["GPU-c", "GPU-a"], []]) == [1]
    assert shared_gpu_workers("GPU-a", [["GPU-b", "GPU-c"]]) == []


def test_nccl_group_gives_every_tensor_parallel_rank_its_own_place():
    """Two engines over 2 GPUs each: ranks 1-2 and 3-4 after the learner's 0, none twice and
    none outside the group of 5 (each engine rank joins as first + its TP rank)."""
    from actors.weights.nccl import group_ranks

    for per, workers in ((1, ["a", "b", "c"]), (2, ["a", "b"]), (4, ["a"])):
        world = 1 + per * len(workers)
        taken = [first + tp for _, first in group_ranks(workers, per) for tp in range(per)]
        assert sorted([0, *taken]) == list(range(world))


def test_nccl_group_is_built_once_a_learner_and_again_when_the_workers_change(monkeypatch):
    """The transport reaches the learner pickled on every push, without its communicator: the
    group it joined is kept in the pushing process, reused by the next copy, and replaced (the
    old one torn down) when the rollout group drops a worker. Building a real group needs two
    GPUs (the ``gpu`` test above); here it is stubbed."""
    import pickle

    from actors.weights import nccl

    built, destroyed = [], []

    class Comm:
        def __init__(self, members):
            self.members = members

        def destroy(self):
            destroyed.append(self.members)

    def build(self):
        built.append(tuple(self.worker_ids))
        return Comm(tuple(self.worker_ids))

    monkeypatch.setattr(nccl.NcclTransport, "_build_group", build)
    monkeypatch.setattr(nccl.NcclTransport, "_check_own_gpus", lambda self: None)
    driver = nccl.NcclTransport(["w0", "w1", "w2"])
    for _ in range(3):  # three pushes, each with a fresh copy in the learner
        copy = pickle.loads(pickle.dumps(driver))
        assert copy.comm is None
        copy._prepare()
    assert built == [(0, 1, 2)] and destroyed == []
    driver.use_workers(["w0", "w2"], [0, 2])  # worker 1 died
    copy = pickle.loads(pickle.dumps(driver))
    copy._prepare()
    assert built == [(0, 1, 2), (0, 2)] and destroyed == [(0, 1, 2)]
    assert copy.comm.members == (0, 2)
    copy.close()
    assert destroyed == [(0, 1, 2), (0, 2)] and driver.id not in nccl._GROUPS


def test_nccl_names_a_worker_whose_engine_cannot_join(ray_local, hf_workers):
    from actors.weights import make_transport

    tp = make_transport("nccl", hf_workers, bucket_mb=1)
    with pytest.raises(WeightSyncError, match="hf engine cannot receive weights over nccl"):
        tp._check_own_gpus()


def test_push_to_a_dead_worker_names_it(ray_local, hf_workers, tied_model):
    from actors.rollout import RolloutWorker
    from actors.weights import make_transport

    dead = RolloutWorker.remote(str(tied_model), dict(engine="hf", n=1))
    ray_local.get(dead.ready.remote())
    ray_local.kill(dead)
    tp = make_transport("cpu_bytes", [hf_workers[0], dead], bucket_mb=1)
    with pytest.raises(WeightSyncError, match="rollout worker 1 failed to receive a bucket"):
        tp.push(_trained(tied_model, seed=14).named_parameters())
    # after the group dropped a worker, the rest keep the numbers the group gave them
    tp.use_workers([hf_workers[0], dead], [2, 3])
    with pytest.raises(WeightSyncError, match="rollout worker 3 failed to receive a bucket"):
        tp.push(_trained(tied_model, seed=14).named_parameters())
