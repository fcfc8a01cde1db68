"""The transformers engine: ``generate`` on CPU, for models vLLM CPU cannot serve here.

The tiny GLM-4.1V-architecture VLM runs here. Requests are generated in left-padded batches
(``batch_size`` at a time, similar lengths together), and every row samples from its own
seeded generator inside a logits processor, so a rollout's tokens depend on its seed and its
own logits only, not on which other requests share its batch (up to the last float bit of
batched matmuls). Logprobs are the raw, pre-temperature ones, as vLLM reports by default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from actors.rollout.engine import GenRequest, GenResult
from actors.weights.base import tensor_checksum
from actors.weights.receiver import StagedWeights


def _is_glm4v(model_path: str) -> bool:
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return any("Glm4v" in a for a in cfg.get("architectures", []))


class HFEngine:
    def __init__(
        self,
        model_path: str,
        stop_ids: list[int],
        dtype: str = "float32",
        device: str | None = None,
        batch_size: int = 64,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self.stop_ids = list(stop_ids)
        self.vlm = _is_glm4v(model_path)
        if self.vlm:
            from transformers import Glm4vForConditionalGeneration

            from rlcs.vlm_processor import TinyGlm4vProcessor

            self.processor = TinyGlm4vProcessor.from_pretrained(model_path)
            self.tokenizer = self.processor.tokenizer
            model_cls = Glm4vForConditionalGeneration
        else:
            self.processor = None
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
            model_cls = AutoModelForCausalLM
        self.model = model_cls.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self.model.to(self.device).eval()
        self.pad_id = self.tokenizer.pad_token_id
        # A sampled image/video placeholder would be taken for an image slot on the next forward
        # pass (GLM-4.1V counts them), so a VLM never emits them.
        ids = self.tokenizer.convert_tokens_to_ids
        self.suppress = [ids("<|image|>"), ids("<|video|>")] if self.vlm else None
        live = self.model.state_dict()
        # Same dtype and shape: the live parameter can be checksummed after the load.
        self._staged = StagedWeights(
            lambda name, t: (
                name in live and live[name].dtype == t.dtype and live[name].shape == t.shape
            )
        )

    def encode(self, text: str, images: list[Any]) -> tuple[list[int], dict[str, Any] | None]:
        if not images:
            return self.tokenizer.encode(text, add_special_tokens=False), None
        if self.processor is None:
            raise ValueError("this model takes no images; use a VLM for image items")
        enc = self.processor(text, images)
        mm = {k: enc[k] for k in ("pixel_values", "image_grid_thw")}
        return enc["input_ids"][0].tolist(), mm

    @torch.inference_mode()
    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out: list[GenResult | None] = [None] * len(requests)
        # Batches of like requests: image or text, then similar budgets and prompt lengths.
        order = sorted(
            range(len(requests)),
            key=lambda i: (
                requests[i].max_tokens,
                len(requests[i].prompt_ids) + len(requests[i].extra_ids),
            ),
        )
        for with_images in (False, True):
            group = [i for i in order if bool(requests[i].mm_inputs) == with_images]
            for start in range(0, len(group), self.batch_size):
                chunk = group[start : start + self.batch_size]
                for i, res in zip(chunk, self._batch([requests[i] for i in chunk]), strict=True):
                    out[i] = res
        return out  # type: ignore[return-value]

    def _batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        rows = [r.prompt_ids + r.extra_ids for r in reqs]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, row in enumerate(rows):
            ids[b, width - len(row) :] = torch.tensor(row)
            mask[b, width - len(row) :] = 1
        kwargs: dict[str, Any] = {"attention_mask": mask.to(self.device)}
        with_images = [r for r in reqs if r.mm_inputs]
        if with_images:
            if len(with_images) != len(reqs):
                raise ValueError("a batch mixes requests with and without images")
            for key in ("pixel_values", "image_grid_thw"):
                kwargs[key] = torch.cat([r.mm_inputs[key] for r in reqs]).to(self.device)
            # Only the prompt's placeholders are images; a sampled <|image|> token is just text.
            types = (ids == self.processor.image_token_id).to(torch.int32)
            for b, r in enumerate(reqs):
                types[b, width - len(r.extra_ids) :] = 0
            kwargs["mm_token_type_ids"] = (types * mask).to(self.device)
        sampler = _RowSampler(reqs, self.suppress)
        seqs = self.model.generate(
            ids.to(self.device),
            max_new_tokens=max(r.max_tokens for r in reqs),
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            logits_processor=[sampler],
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            **kwargs,
        )
        results = []
        stops = set(self.stop_ids)
        for b, r in enumerate(reqs):
            new = seqs[b, width:].tolist()[: r.max_tokens]
            end = next((k + 1 for k, tok in enumerate(new) if tok in stops), len(new))
            new = new[:end]
            logprobs = [sampler.logprobs[k][b] for k in range(len(new))]
            reason = "stop" if new and new[-1] in stops else "length"
            results.append(GenResult(new, logprobs, reason, list(r.prompt_ids)))
        return results

    def stage_weights(self, kind: str, payload: Any, version: str) -> int:
        if kind == "nccl":
            raise ValueError("the HF engine receives weights over cpu_bytes, shm or cuda_ipc")
        return self._staged.stage(kind, payload, version)

    @torch.inference_mode()
    def commit_weights(self, version: str) -> dict[str, Any]:
        """Copy staged tensors into the model, then read every one back for its checksum."""
        staged = self._staged
        if staged.version != version:
            raise RuntimeError(f"commit of weights version {version}, but staged {staged.version}")
        params = dict(self.model.named_parameters())  # tied weights appear once
        state = dict(staged.consume())
        live = self.model.state_dict()
        unknown = sorted(set(state) - set(live))
        if unknown:
            staged.clear()
            raise KeyError(f"HF engine has no parameters named {unknown[:5]}")
        self.model.load_state_dict(state, strict=False)
        checksums = dict(staged.checksums)
        readback = 0
        for name in state:
            if name not in checksums:
                checksums[name] = tensor_checksum(live[name])
                readback += 1
        missing = sorted(set(params) - set(state))
        staged.clear()
        return {"checksums": checksums, "missing": missing, "readback": readback}

    def sleep(self) -> None:
        """Nothing to release: the HF engine keeps no KV cache between calls."""

    def wake_up(self) -> None:
        pass


class _RowSampler:
    """A logits processor that picks every row's next token itself, from the row's own seeded
    generator (temperature and top_p per row; 0 temperature is argmax), records the token's raw
    logprob, and leaves only that token open, so ``generate``'s greedy step takes it."""

    def __init__(self, reqs: list[GenRequest], suppress: list[int] | None):
        self.reqs = reqs
        self.suppress = suppress
        self.gens = [torch.Generator().manual_seed(r.seed) for r in reqs]
        self.logprobs: list[list[float]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raw = scores.float()
        logp = torch.log_softmax(raw, -1)
        logits = raw.clone()
        if self.suppress:
            logits[:, self.suppress] = float("-inf")
        picks = []
        for b, r in enumerate(self.reqs):
            if r.temperature <= 0:
                picks.append(int(logits[b].argmax()))
                continue
            probs = torch.softmax(logits[b] / r.temperature, -1)
            if r.top_p < 1.0:
                sorted_p, idx = probs.sort(descending=True)
                # keep the smallest head whose mass reaches top_p (always the first token)
                drop = sorted_p.cumsum(0) - sorted_p >= r.top_p
                probs = probs.scatter(0, idx[drop], 0.0)
            picks.append(int(torch.multinomial(probs.cpu(), 1, generator=self.gens[b])))
        chosen = torch.tensor(picks, device=scores.device)
        self.logprobs.append(logp.gather(1, chosen[:, None])[:, 0].tolist())
        forced = torch.full_like(scores, float("-inf"))
        forced.scatter_(1, chosen[:, None], 0.0)
        return forced
