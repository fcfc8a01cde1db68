"""The vLLM engine: ``vllm.LLM`` (CUDA build or CPU build), created inside the actor.

Weight updates go through :class:`actors.weights.vllm_ext.WeightSyncExtension`, which runs in
vLLM's worker: on CPU with one engine rank inside the rollout worker's own process (see
``engine_kwargs``), otherwise in the engine's processes. With ``sleep_between_iterations`` on a
GPU, the engine frees its weights and KV cache between rollouts so a colocated learner can use
the memory.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from actors.rollout.engine import GenRequest, GenResult
from rlcs.prompts import IMAGE_PLACEHOLDER

EXTENSION = "actors.weights.vllm_ext.WeightSyncExtension"
TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
TCMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                 "/usr/lib", "/usr/local/lib")  # fmt: skip

log = logging.getLogger(__name__)


def find_tcmalloc() -> str | None:
    for d in TCMALLOC_DIRS:
        for name in TCMALLOC_NAMES:
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
    return None


def preload_cpu_allocator(allocator: str = "tcmalloc", in_process: bool = False) -> str | None:
    """tcmalloc for vLLM's CPU engine; returns the library preloaded, or ``None``.

    vLLM CPU wants tcmalloc preloaded (its wheels can bundle one; the one on PyPI here does
    not). The allocator matters most for weight sync: vLLM's in-place reload allocates every
    layer afresh, and with glibc each large allocation is new, zero-filled pages; tcmalloc hands
    back the pages of the previous reload (0.12 s against 0.50 s for a 137M model here).

    An engine of its own processes (tensor-parallel on CPU) is started with ``spawn``, so
    putting the library in ``LD_PRELOAD`` here takes effect there. An engine inside this process
    (``in_process``) needs it preloaded when the process started: ``worker_options`` gives a
    rollout worker's actor that; without it this warns once and the engine runs on glibc's.
    """
    if allocator == "system" or torch.cuda.is_available():
        return None
    current = os.environ.get("LD_PRELOAD", "")
    for entry in filter(None, current.split(":")):
        if "tcmalloc" in entry:
            return entry
    lib = find_tcmalloc()
    if lib is None:
        log.warning(
            "rollout.cpu_allocator=tcmalloc but no tcmalloc was found in %s; vLLM's weight "
            "reloads will be about 4x slower. Install it (Debian: apt-get install "
            "libtcmalloc-minimal4) or set rollout.cpu_allocator=system to silence this.",
            ", ".join(TCMALLOC_DIRS),
        )
        return None
    if in_process:
        log.warning(
            "rollout.cpu_allocator=tcmalloc but this process was started without it in "
            "LD_PRELOAD (create the worker with RolloutWorker.options(**worker_options(...))); "
            "vLLM's weight reloads will be about 4x slower."
        )
        return None
    os.environ["LD_PRELOAD"] = f"{lib}:{current}" if current else lib
    return lib


def engine_kwargs(
    model_path: str,
    seed: int = 0,
    dtype: str = "float32",
    gpu_memory_utilization: float = 0.1,
    tensor_parallel_size: int = 1,
    sleep_mode: bool = False,
    max_model_len: int | None = None,
    kv_cache_gib: float | None = None,
) -> dict[str, Any]:
    """``vllm.LLM`` arguments of a rollout engine (shared with the throughput benchmark)."""
    cuda = torch.cuda.is_available()
    kwargs: dict[str, Any] = dict(
        model=model_path,
        dtype=dtype,
        seed=seed,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size,
        enforce_eager=not cuda,
        max_model_len=max_model_len,
        enable_sleep_mode=sleep_mode and cuda,
        worker_extension_cls=EXTENSION,
    )
    if kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    if not cuda and tensor_parallel_size == 1:
        # The engine runs inside the calling process (the rollout worker's actor): vLLM's CPU
        # build otherwise starts an engine-core process and a worker process, each importing
        # vLLM and torch again (about 20 s of the engine's 40 s start on two cores).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        kwargs["distributed_executor_backend"] = "uni"
    if not cuda:
        # vLLM CPU crashes ("CPU Generator does not use offset") when a request with its own
        # seed is in a partially prefilled chunk; whole prefills avoid it. That needs a token
        # budget of at least one full-length prompt.
        cfg = json.loads((Path(model_path) / "config.json").read_text())
        cfg = cfg.get("text_config", cfg)
        longest = max_model_len or int(cfg.get("max_position_embeddings", 4096))
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(longest, 8192))
    return kwargs


def cpu_node_memory(node: int = 0) -> int:
    """Bytes of memory on NUMA node ``node`` (the whole machine's where there is no such node):
    what vLLM's CPU build takes ``gpu_memory_utilization`` a share of."""
    path = Path(f"/sys/devices/system/node/node{node}/meminfo")
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] == "MemTotal:":
                return int(parts[3]) * 1024
    import psutil

    return psutil.virtual_memory().total


def cpu_start_failure(
    utilization: float, kv_cache_gib: float | None = None, cause: str = "see its log above"
) -> str:
    """Why a CPU engine most often fails to start, with this machine's figures: vLLM's error
    names neither the setting nor the budget."""
    node = cpu_node_memory() / 2**30
    if kv_cache_gib is not None:
        return (
            f"vLLM's CPU engine did not start ({cause}). Most often it is "
            f"rollout.kv_cache_gib={kv_cache_gib}: vLLM reserves that much for the KV cache on "
            f"the engine's NUMA node, which has {node:.2f} GiB in all here, and refuses when "
            f"less is free. Lower it; a tiny model needs well under 1 GiB."
        )
    budget = utilization * node
    return (
        f"vLLM's CPU engine did not start ({cause}). Most often it is "
        f"rollout.gpu_memory_utilization={utilization}: on CPU, vLLM gives the engine's worker "
        f"process that share of its NUMA node's memory, {budget:.2f} GiB here, and the worker "
        f"itself takes about 0.6 GiB for a small model before the KV cache gets the rest. "
        f"Raise it so that the share leaves room for the KV cache, or set rollout.kv_cache_gib."
    )


def image_token_id(tokenizer: Any) -> int | None:
    """The id of the image placeholder token (GLM-4.1V's ``<|image|>``); None without one."""
    vocab = tokenizer.get_vocab()
    return vocab.get(IMAGE_PLACEHOLDER)


def added_prefix(tokenizer: Any) -> str:
    """The text of the special tokens ``tokenizer`` puts before any text it encodes with them
    (GLM's published tokenizers: ``[gMASK]<sop>``; the project's tiny one: nothing)."""
    added = tokenizer.encode("", add_special_tokens=True)
    return tokenizer.decode(added, skip_special_tokens=False) if added else ""


def collapse_image_runs(ids: list[int], image_id: int | None) -> list[int]:
    """Token ids as they were before vLLM's processor expanded them: every run of the image
    placeholder token back to one. vLLM expands the placeholders of any token prompt with
    images, already expanded or not, so a continuation must send them collapsed."""
    if image_id is None:
        return list(ids)
    return [t for k, t in enumerate(ids) if t != image_id or k == 0 or ids[k - 1] != image_id]


def processor_text(text: str, prefix: str) -> str:
    """A rendered prompt as vLLM's multimodal processor should get it. The processor tokenizes
    the text with the tokenizer's own special tokens added; where that ``prefix`` (see
    ``added_prefix``) is one the chat template has already written, the prompt would start
    with it twice. It is taken off the text, so the processor puts it back once."""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


class VLLMEngine:
    def __init__(
        self,
        model_path: str,
        stop_ids: list[int],
        seed: int = 0,
        dtype: str = "float32",
        gpu_memory_utilization: float = 0.1,
        tensor_parallel_size: int = 1,
        sleep_mode: bool = False,
        max_model_len: int | None = None,
        kv_cache_gib: float | None = None,
        cpu_allocator: str = "tcmalloc",
        logprobs: str = "raw",
        **llm_kwargs: Any,
    ):
        from vllm import LLM

        self.stop_ids = list(stop_ids)
        kwargs = engine_kwargs(
            model_path, seed, dtype, gpu_memory_utilization, tensor_parallel_size, sleep_mode,
            max_model_len, kv_cache_gib,
        )  # fmt: skip
        if logprobs not in ("raw", "tempered"):
            raise ValueError(f"logprobs must be 'raw' or 'tempered', got {logprobs!r}")
        # tempered: the logprobs of the distribution sampled from (after temperature; the
        # banned placeholders' bias moves them by those tokens' tiny mass)
        kwargs["logprobs_mode"] = "processed_logprobs" if logprobs == "tempered" else "raw_logprobs"
        in_process = kwargs.get("distributed_executor_backend") == "uni"
        preload_cpu_allocator(cpu_allocator, in_process)
        self.sleep_mode = kwargs["enable_sleep_mode"]
        try:
            self.llm = LLM(**{**kwargs, **llm_kwargs})
        except (RuntimeError, ValueError) as e:
            if torch.cuda.is_available():
                raise
            # in-process (one CPU engine) vLLM raises its own cause here; from an engine
            # process it raises a generic error and logs the cause
            cause = str(e) if in_process else "see its log above"
            raise RuntimeError(
                cpu_start_failure(gpu_memory_utilization, kv_cache_gib, cause)
            ) from e
        self.asleep = False
        tok = self.llm.get_tokenizer()
        # what vLLM's processor adds to an image prompt's text (worked out once, not per prompt)
        self.tokenizer_prefix = added_prefix(tok)
        self.image_token_id = image_token_id(tok)
        # A sampled image/video placeholder would be taken for an image slot (by the engine's
        # processor in a continuation, by the learner's count of image tokens), so none is
        # sampled, as in the HF engine; raw logprobs stay those of the unbiased logits.
        vocab = tok.get_vocab()
        self.banned = {vocab[t]: -100.0 for t in (IMAGE_PLACEHOLDER, "<|video|>") if t in vocab}

    def encode(self, text: str, images: list[Any]) -> tuple[list[int], dict[str, Any] | None]:
        # vLLM's own processor expands image placeholders, so the ids stay unexpanded here.
        tok = self.llm.get_tokenizer()
        return tok.encode(text, add_special_tokens=False), None

    def sampling_params(self, req: GenRequest):
        from vllm import SamplingParams

        return SamplingParams(
            n=1,
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_tokens,
            seed=req.seed,
            logprobs=0,
            stop_token_ids=self.stop_ids,
            detokenize=False,
            logit_bias=self.banned or None,
        )

    def prompt(self, req: GenRequest) -> dict[str, Any]:
        if not req.images:
            return {"prompt_token_ids": req.prompt_ids + req.extra_ids}
        if not req.extra_ids:
            text = processor_text(req.prompt_text, self.tokenizer_prefix)
            return {"prompt": text, "multi_modal_data": {"image": req.images}}
        # A continuation: prompt_ids are the expanded ids vLLM returned for the first pass
        # (its tokenization of the text, special tokens included); the processor expands the
        # placeholders of a token prompt again, so they go back collapsed.
        return {
            "prompt_token_ids": collapse_image_runs(req.prompt_ids, self.image_token_id)
            + req.extra_ids,
            "multi_modal_data": {"image": req.images},
        }

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        if not requests:
            return []
        if self.asleep:
            self.wake_up()
        outs = self.llm.generate(
            [self.prompt(r) for r in requests],
            [self.sampling_params(r) for r in requests],
            use_tqdm=False,
        )
        results = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[t].logprob) for step, t in zip(c.logprobs or [], ids, strict=True)]
            results.append(
                GenResult(ids, lps, c.finish_reason or "length", list(out.prompt_token_ids))
            )
        return results

    def stage_weights(self, kind: str, payload: Any, version: str) -> int:
        if self.asleep:
            self.wake_up()
        if kind != "cpu_bytes":
            return self.llm.collective_rpc("rlcs_stage_weights", args=(kind, payload, version))[0]
        from actors.weights.cpu_bytes import to_local_file

        local = to_local_file(payload)
        try:  # the engine maps the file; it stays readable to it after the unlink
            return self.llm.collective_rpc("rlcs_stage_weights", args=(kind, local, version))[0]
        finally:
            os.unlink(local["file"])

    def commit_weights(self, version: str) -> dict[str, Any]:
        results = self.llm.collective_rpc("rlcs_commit_weights", args=(version,))
        merged = results[0]
        for r in results[1:]:  # tensor-parallel ranks each load their shard of the same tensors
            merged["missing"] = sorted(set(merged["missing"]) | set(r["missing"]))
        self.llm.reset_prefix_cache()
        return merged

    def gpu_uuids(self) -> list[str]:
        """The GPU of each engine rank (tensor-parallel ranks in order); none on CPU."""
        if not torch.cuda.is_available():
            return []
        return list(self.llm.collective_rpc("rlcs_gpu_uuid"))

    def init_weight_group(self, kind: str, address: str, port: int, rank_offset: int, world: int):
        self.llm.collective_rpc(
            "rlcs_init_weight_group", args=(kind, address, port, rank_offset, world)
        )

    def sleep(self) -> None:
        """Free weights and KV cache (level 1 keeps weights in CPU RAM); GPU only."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
