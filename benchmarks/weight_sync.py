"""Weight sync, learner to live engine: seconds and effective GB/s per push.

Models: the tiny text LM (into vLLM), the tiny GLM-4.1V VLM (into the HF engine: vLLM CPU
cannot serve it here), and a >=100M-parameter Llama built from config (into vLLM). For each,
the learner is an HF model in this process whose weights differ from the engine's; a push
is timed end to end (bucketing, transfer, load into the live engine, per-tensor checksum
comparison). After the last push of the large model, the engine's greedy tokens are compared
with transformers' greedy tokens on the learner's weights.

    python benchmarks/weight_sync.py [--transport shm|cpu_bytes|cuda_ipc|nccl] [--bucket-mb 256]
        [--repeats 3]
        [--cpu-allocator tcmalloc|system] [--fresh-buffers] [--skip-tiny] [--two-nodes]

``--two-nodes`` puts the engine on a second Ray node (a second raylet on this machine, with an
object store of its own), so every push crosses between the nodes' object stores as it does
between hosts; only ``cpu_bytes`` crosses nodes.

``cuda_ipc`` and ``nccl`` need a GPU: the learner's copy lives on GPU 0 of this process and the
engines run vLLM's CUDA build. ``cuda_ipc`` shares that GPU with the engine (the colocated
layout); ``nccl`` puts the engine on a GPU of its own, so it needs two. The HF engine takes no
NCCL broadcast, so ``nccl`` skips the tiny VLM.

Ends with ``RESULT params=… seconds=… gb_per_s=… checksum_ok=1|0`` for the large model
(median push over ``--repeats``, after one warm-up push). ``checksum_ok`` is 1 only when every
timed push's checksums matched and the engine's greedy tokens equal transformers'.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from rounds import count

LARGE = dict(
    hidden_size=1024,
    intermediate_size=2048,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    vocab_size=32000,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)


def build_large(path: Path) -> Path:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from rlcs.models import _special_ids
    from rlcs.tokenizer import build_tokenizer

    tok = build_tokenizer()
    special = _special_ids(tok)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**LARGE, **special))
    model.generation_config = GenerationConfig(**special)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def trained(path: Path, cls_name: str = "AutoModelForCausalLM", seed: int = 1):
    """The learner: the model with its weights moved, so a push really changes the engine."""
    import transformers

    model = getattr(transformers, cls_name).from_pretrained(path, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def time_pushes(worker, model, transport: str, bucket_mb: float, repeats: int, **kwargs):
    from actors.weights import make_transport

    tp = make_transport(transport, [worker], bucket_mb=bucket_mb, **kwargs)
    warm = tp.push(model.named_parameters())
    reports = [tp.push(model.named_parameters()) for _ in range(repeats)]
    tp.close()
    return warm, reports


def show(label: str, params: int, warm, reports) -> float:
    secs = statistics.median(r.seconds for r in reports)
    phases = {
        k: round(statistics.median(r.phase_seconds[k] for r in reports), 3)
        for k in reports[0].phase_seconds
    }
    print(
        f"INFO {label}: params={params} bytes={reports[0].bytes} buckets={reports[0].buckets} "
        f"first_push_s={warm.seconds:.3f} median_s={secs:.3f} gb_per_s={reports[0].bytes / secs / 1e9:.3f} "
        f"checksum_ok={int(all(r.checksum_ok for r in reports))} readback={reports[0].verified_readback}/"
        f"{reports[0].tensors} phases={phases}",
        flush=True,
    )
    return secs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="shm", choices=["shm", "cpu_bytes", *GPU_TRANSPORTS])
    ap.add_argument("--bucket-mb", type=float, default=256)
    ap.add_argument("--repeats", type=count(1), default=3)
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument(
        "--cpu-allocator",
        default="tcmalloc",
        choices=["tcmalloc", "system"],
        help="the vLLM engine's malloc (rollout.cpu_allocator)",
    )
    ap.add_argument(
        "--fresh-buffers",
        action="store_true",
        help="shm: write new /dev/shm files every push instead of reusing them",
    )
    ap.add_argument(
        "--two-nodes",
        action="store_true",
        help="run the engine on a second Ray node (cpu_bytes only)",
    )
    args = ap.parse_args()
    if args.two_nodes and args.transport != "cpu_bytes":
        ap.error("--two-nodes needs --transport cpu_bytes: shm hands weights over within a node")
    if args.transport in GPU_TRANSPORTS and not torch.cuda.is_available():
        ap.error(f"--transport {args.transport} needs a CUDA GPU; none is visible")
    if args.transport == "nccl" and torch.cuda.device_count() < 2:
        ap.error("--transport nccl needs two GPUs: NCCL refuses two ranks on one GPU")

    import ray

    cluster = None
    if args.two_nodes:
        from ray.cluster_utils import Cluster

        store = 2 * 1024**3
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 2, "object_store_memory": store}
        )
        cluster.add_node(num_cpus=2, resources={ENGINE_NODE: 1}, object_store_memory=store)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
    else:
        gpus = {}
        if args.transport == "nccl":  # Ray lends GPUs 0..n-2 to engines; the learner takes the last
            gpus = {"num_gpus": torch.cuda.device_count() - 1}
            torch.cuda.set_device(torch.cuda.device_count() - 1)
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, **gpus)
    tmp = Path(tempfile.mkdtemp(prefix="rlcs-bench-sync-"))
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the large model is half a GB
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()


#: the custom resource of the engine's node under ``--two-nodes``
ENGINE_NODE = "rlcs_bench_engine_node"
#: transports whose learner side is a CUDA tensor
GPU_TRANSPORTS = ("cuda_ipc", "nccl")


def start_worker(model: Path, cfg: dict, two_nodes: bool, transport: str = "shm"):
    """A rollout worker for ``model``; under ``--two-nodes``, on the other node than this one.
    On GPU: for ``nccl`` a GPU of its own (this process's learner holds GPU 0, so the engine's
    must be another one), for ``cuda_ipc`` a share of the learner's GPU."""
    import ray

    from actors.rollout.worker import RolloutWorker, worker_options

    opts: dict = {"resources": {ENGINE_NODE: 0.01}} if two_nodes else {}
    if transport == "cuda_ipc":
        opts["num_gpus"] = 0.5
    elif transport == "nccl":
        opts["num_gpus"] = 1
    w = RolloutWorker.options(**worker_options(cfg, **opts)).remote(str(model), cfg)
    node = ray.get(w.info.remote())["node"]
    if two_nodes and node == ray.get_runtime_context().get_node_id():
        raise RuntimeError("the engine landed on the learner's node")
    return w


def run(args: argparse.Namespace, tmp: Path) -> None:
    import ray

    from rlcs.models import build_tiny_text_model, build_tiny_vlm

    vllm_cfg = dict(
        engine="vllm",
        n=1,
        max_think_tokens=16,
        max_answer_tokens=8,
        gpu_memory_utilization=0.1,  # on CPU a NUMA node's share, the worker's ~0.6 GiB included
        cpu_allocator=args.cpu_allocator,
    )
    extra = {"keep_buffers": not args.fresh_buffers} if args.transport == "shm" else {}
    where = "/across nodes" if args.two_nodes else ""
    gpu = args.transport in GPU_TRANSPORTS
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    if not args.skip_tiny:
        text = build_tiny_text_model(tmp / "text")
        w = start_worker(text, vllm_cfg, args.two_nodes, args.transport)
        m = trained(text).to(device)
        show(f"tiny-text->vllm/{args.transport}{where}", sum(p.numel() for p in m.parameters()),
             *time_pushes(w, m, args.transport, args.bucket_mb, args.repeats, **extra))  # fmt: skip
        ray.kill(w)
        if args.transport != "nccl":
            vlm = build_tiny_vlm(tmp / "vlm")
            w = start_worker(vlm, dict(vllm_cfg, engine="hf"), args.two_nodes, args.transport)
            m = trained(vlm, "Glm4vForConditionalGeneration").to(device)
            show(f"tiny-vlm->hf/{args.transport}{where}", sum(p.numel() for p in m.parameters()),
                 *time_pushes(w, m, args.transport, args.bucket_mb, args.repeats, **extra))  # fmt: skip
            ray.kill(w)

    large = build_large(tmp / "large")
    # A KV cache of a fixed size: a share of the NUMA node (gpu_memory_utilization) is too small
    # for the large model on a machine whose node holds half of its memory
    w = start_worker(large, dict(vllm_cfg, kv_cache_gib=0.5), args.two_nodes, args.transport)
    m = trained(large).to(device)
    params = sum(p.numel() for p in m.parameters())
    warm, reports = time_pushes(w, m, args.transport, args.bucket_mb, args.repeats, **extra)
    secs = show(f"llama-{params / 1e6:.0f}M->vllm/{args.transport}{where}", params, warm, reports)

    from rlcs.tokenizer import build_tokenizer, stop_token_ids

    items = [{"id": "g", "domain": "math", "prompt": "Count to ten."}]
    traj = ray.get(w.generate.remote(items, step=0, temperature=0.0))[0]
    ids = torch.tensor([traj.prompt_token_ids], device=device)
    with torch.no_grad():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                         eos_token_id=stop_token_ids(build_tokenizer()), pad_token_id=0)  # fmt: skip
    hf_tokens = out[0, ids.shape[1] :].tolist()
    greedy_equal = traj.token_ids[: len(hf_tokens)] == hf_tokens
    print(f"INFO greedy tokens after sync: engine={traj.token_ids[:16]} transformers={hf_tokens} "
          f"equal={int(greedy_equal)}", flush=True)  # fmt: skip
    ok = int(all(r.checksum_ok for r in reports) and greedy_equal)
    ray.shutdown()
    print(
        f"RESULT params={params} seconds={secs:.3f} gb_per_s={reports[0].bytes / secs / 1e9:.3f} checksum_ok={ok}"
    )


if __name__ == "__main__":
    main()
