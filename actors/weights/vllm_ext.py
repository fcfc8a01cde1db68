"""vLLM worker extension: runs inside vLLM's engine process, where the model lives.

Passed to ``vllm.LLM(worker_extension_cls="actors.weights.vllm_ext.WeightSyncExtension")`` and
called through ``llm.collective_rpc``. The load goes through ``model_runner.reload_weights``:
on CPU, vLLM repacks linear weights for its GEMM kernels at load, so ``model.load_weights``
alone would leave stale packed weights (FACTS.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from actors.weights.checksum import tensor_checksum
from actors.weights.receiver import StagedWeights


def checkpoint_shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    """Tensor shapes by name from the safetensors headers in ``model_dir`` (no data is read)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes


class _QuietRotary(logging.Filter):
    """vLLM warns "RotaryEmbedding: Failed to load weights" on every in-place reload: the rotary
    cache is a buffer computed from the config, never in a checkpoint. Real misses are caught
    by the coverage check in ``rlcs_commit_weights``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("%s: Failed to load weights") or (
            "Rotary" not in str(record.args[0] if record.args else "")
        )


def _repack_cpu_moe(model, loaded: set[str]) -> None:
    """Prepack the reloaded experts of vLLM CPU's unquantized MoE layers for its kernels.

    vLLM CPU prepacks ``w13_weight``/``w2_weight`` of such a layer into its grouped-gemm
    layout (same shape) after the first load. An in-place reload reruns the layer's post-load
    step, but on a weight update ``UnquantizedFusedMoEMethod._setup_kernel`` skips the experts'
    ``process_weights_after_loading`` (unquantized_fused_moe_method.py, "Setup moe kernel only
    on the first call"), so the kernel would read the checkpoint layout as if prepacked. The
    prepack is redone here, into the parameters' own storage, for the layers this push loaded.
    """
    try:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:  # not a vLLM build with CPU MoE experts
        return
    for prefix, layer in model.named_modules():
        kernel = getattr(getattr(layer, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if not isinstance(experts, CPUUnquantizedExperts):
            continue
        names = ("w13_weight", "w2_weight")
        reloaded = [f"{prefix}.{n}" in loaded for n in names]
        if not any(reloaded):
            continue  # not reloaded by this push: still prepacked
        if not all(reloaded):  # one reloaded, one not: no layout would fit both
            raise RuntimeError(f"{prefix}: a push must carry both w13_weight and w2_weight "
                               "of a CPU MoE layer, to prepack them together")  # fmt: skip
        live = {n: getattr(layer, n) for n in names}
        experts.process_weights_after_loading(layer)  # rebinds prepacked copies
        for n, param in live.items():
            packed = getattr(layer, n)
            if packed.shape != param.shape:  # vLLM padded the intermediate size
                raise RuntimeError(f"{prefix}.{n}: prepacked shape {tuple(packed.shape)} "
                                   f"!= live {tuple(param.shape)}")  # fmt: skip
            param.data.copy_(packed)
            layer.register_parameter(n, param)


class WeightSyncExtension:
    """Mixed into vLLM's worker class; ``self.model_runner`` is vLLM's."""

    def _rlcs_stage(self) -> StagedWeights:
        if not hasattr(self, "_rlcs_staged"):
            logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(
                _QuietRotary()
            )
            params = dict(self.model_runner.get_model().named_parameters())

            def readable(name: str, t) -> bool:
                p = params.get(name)
                return p is not None and p.numel() > 0 and p.shape == t.shape and p.dtype == t.dtype

            self._rlcs_staged = StagedWeights(readable)
        return self._rlcs_staged

    def rlcs_stage_weights(self, kind: str, payload: Any, version: str) -> int:
        staged = self._rlcs_stage()
        if kind == "nccl":
            from actors.weights.nccl import receive

            tensors = receive(self._rlcs_comm, payload)
            staged.add(tensors, version, kind)
            return len(tensors)
        return staged.stage(kind, payload, version)

    def rlcs_init_weight_group(
        self, kind: str, address: str, port: int, rank_offset: int, world_size: int
    ) -> None:
        """Join the learner's NCCL group; this engine rank is ``rank_offset`` + its TP rank."""
        from actors.weights.nccl import join_group, leave_group

        old = getattr(self, "_rlcs_comm", None)
        if old is not None:  # the learner built a new group (the rollout workers changed)
            leave_group(old)
        rank = rank_offset + int(getattr(self, "rank", 0))
        self._rlcs_comm = join_group(address, port, rank, world_size)

    def rlcs_gpu_uuid(self) -> str:
        """The UUID of this engine rank's GPU (checked before an NCCL group is joined)."""
        from actors.weights.nccl import gpu_uuid

        return gpu_uuid()

    def _rlcs_checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every tensor in the checkpoint the engine was built from, by name (the
        learner pushes vLLM engines its weights in that layout); read from the safetensors
        headers once. Empty where the model is not a local folder of safetensors files."""
        if not hasattr(self, "_rlcs_ckpt_shapes"):
            self._rlcs_ckpt_shapes = checkpoint_shapes(self.model_runner.model_config.model)
        return self._rlcs_ckpt_shapes

    def rlcs_commit_weights(self, version: str) -> dict[str, Any]:
        """Load every staged tensor at once; return per-tensor checksums and uncovered params.

        Tensors that vLLM keeps in the sent layout (embeddings, norms, lm_head) are checksummed
        from the live parameters after the load. Fused or repacked ones (q/k/v, gate/up, and
        every linear that vLLM CPU repacks for its GEMM kernels, which keeps no readable copy)
        were checksummed on arrival, and the loader must have taken every one of them.

        A push naming a tensor the engine's checkpoint does not hold, or one of another shape,
        is refused with a ``ValueError`` before anything loads; the engine keeps serving the
        weights it had, and the next push loads as usual. So is a push that leaves out a tensor
        the last whole push carried (reported as ``missing``): loading the rest would leave the
        engine on a mix of new and old weights. The first push is checked after its load, for
        the parameters the loader did not reach.
        """
        staged = self._rlcs_stage()
        if staged.version != version:
            raise RuntimeError(f"commit of weights version {version}, but staged {staged.version}")
        # vLLM's loader fails on a name it does not know or a tensor of the wrong shape midway
        # through the reload, the layers it has not reached emptied (on the meta device), and
        # the engine cannot generate again, even after a good push; such a push is refused
        # here, before anything is loaded. The checkpoint's names are the ones this loader took
        # when the engine started, and the ones the learner pushes (its saved layout).
        known = self._rlcs_checkpoint_shapes()
        if known:
            staged.refuse_mismatches(known, "vLLM engine")
        # the names a whole push carries are those the learner saves (a published checkpoint
        # may hold more, which neither side loads), so they are learnt from the first push
        whole = getattr(self, "_rlcs_whole_push", None)
        if whole and (left_out := sorted(whole - set(staged.names()))):
            staged.clear()
            return {"checksums": {}, "missing": left_out, "readback": 0, "timings": {}}
        model = self.model_runner.get_model()
        loaded: set[str] = set()
        original = model.load_weights

        def load_and_record(weights):
            out = original(weights)
            if out:
                loaded.update(out)
            return out

        model.load_weights = load_and_record
        t0 = time.perf_counter()
        try:
            self.model_runner.reload_weights(weights_iterator=staged.consume())
            staged.check_consumed()
        finally:
            del model.load_weights
        _repack_cpu_moe(model, loaded)
        t1 = time.perf_counter()
        live = dict(model.named_parameters())
        checksums = dict(staged.checksums)
        readback = 0
        for name in staged.names():
            if name not in checksums and name in live:
                checksums[name] = staged.checksum(live[name].data)
                readback += 1
        missing = sorted(set(live) - loaded) if loaded else []
        if not missing:
            self._rlcs_whole_push = set(staged.names())
        timings = {
            "stage_checksum": staged.checksum_seconds,
            "load": t1 - t0,
            "readback": time.perf_counter() - t1,
        }
        staged.clear()
        return {
            "checksums": checksums,
            "missing": missing,
            "readback": readback,
            "timings": timings,
        }

    def rlcs_param_checksums(self, algorithm: str = "xxh3") -> dict[str, str]:
        """Checksums of the live parameters, by vLLM name (for tests and debugging)."""
        model = self.model_runner.get_model()
        return {n: tensor_checksum(p.data, algorithm) for n, p in model.named_parameters()}
