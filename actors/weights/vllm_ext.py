"""vLLM worker extension: runs inside vLLM's engine process, where the model lives.

Passed to ``vllm.LLM(worker_extension_cls="actors.weights.vllm_ext.WeightSyncExtension")`` and
called through ``llm.collective_rpc``. The load goes through ``model_runner.reload_weights``:
on CPU, vLLM repacks linear weights for its GEMM kernels at load, so ``model.load_weights``
alone would leave stale packed weights (FACTS.md).
"""

from __future__ import annotations

from typing import Any

from actors.weights.base import tensor_checksum
from actors.weights.receiver import StagedWeights


class WeightSyncExtension:
    """Mixed into vLLM's worker class; ``self.model_runner`` is vLLM's."""

    def rlcs_stage_weights(self, kind: str, payload: Any, version: str) -> int:
        if not hasattr(self, "_rlcs_staged"):
            self._rlcs_staged = StagedWeights()
        if kind == "nccl":
            from actors.weights.nccl import receive

            tensors = receive(self._rlcs_comm, payload)
            self._rlcs_staged.add(tensors, version)
            return len(tensors)
        return self._rlcs_staged.stage(kind, payload, version)

    def rlcs_init_weight_group(
        self, kind: str, address: str, port: int, rank_offset: int, world_size: int
    ) -> None:
        """Join the learner's NCCL group; this engine rank is ``rank_offset`` + its TP rank."""
        from actors.weights.nccl import join_group

        rank = rank_offset + int(getattr(self, "rank", 0))
        self._rlcs_comm = join_group(address, port, rank, world_size)

    def rlcs_commit_weights(self, version: str) -> dict[str, Any]:
        """Load every staged tensor at once; return per-tensor checksums and uncovered params.

        Checksums are read back from the live parameter where vLLM keeps it in the sent layout
        (embeddings, norms, and every unfused weight); fused or repacked ones (q/k/v, gate/up
        and CPU-packed linears) are checksummed as the loader consumed them.
        """
        staged: StagedWeights = getattr(self, "_rlcs_staged", StagedWeights())
        if staged.version != version:
            raise RuntimeError(f"commit of weights version {version}, but staged {staged.version}")
        model = self.model_runner.get_model()
        params = dict(model.named_parameters())
        loaded = set()
        original = model.load_weights

        def load_and_record(weights):
            out = original(weights)
            if out:
                loaded.update(out)
            return out

        model.load_weights = load_and_record
        try:
            self.model_runner.reload_weights(weights_iterator=staged.consume())
        finally:
            del model.load_weights
        checksums = dict(staged.checksums)
        readback = 0
        for name in checksums:
            p = params.get(name)
            if p is not None and p.numel() and checksums[name].endswith(_shape_suffix(p)):
                live = tensor_checksum(p.data)
                if live.split(":")[1] == checksums[name].split(":")[1]:
                    checksums[name] = live
                    readback += 1
        missing = sorted(set(params) - loaded) if loaded else []
        staged.clear()
        return {"checksums": checksums, "missing": missing, "readback": readback}

    def rlcs_param_checksums(self) -> dict[str, str]:
        """Checksums of the live parameters, by vLLM name (for tests and debugging)."""
        return {
            n: tensor_checksum(p.data) for n, p in self.model_runner.get_model().named_parameters()
        }


def _shape_suffix(p) -> str:
    return ":" + "x".join(str(s) for s in p.shape)
