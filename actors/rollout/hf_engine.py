"""The transformers engine: ``generate`` on CPU, for models vLLM CPU cannot serve here.

The tiny GLM-4.1V-architecture VLM runs here. Each request is generated on its own, seeded,
so a rollout does not depend on which other requests share its batch.
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
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
        return [self._one(r) for r in requests]

    def _one(self, req: GenRequest) -> GenResult:
        ids = torch.tensor([req.prompt_ids + req.extra_ids], device=self.device)
        kwargs: dict[str, Any] = {"attention_mask": torch.ones_like(ids)}
        if req.mm_inputs:
            kwargs.update({k: v.to(self.device) for k, v in req.mm_inputs.items()})
            # Only the prompt's placeholders are images; a sampled <|image|> token is just text.
            types = (ids == self.processor.image_token_id).to(torch.int32)
            types[:, len(req.prompt_ids) :] = 0
            kwargs["mm_token_type_ids"] = types
        if req.temperature > 0:
            kwargs.update(do_sample=True, temperature=req.temperature, top_p=req.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        torch.manual_seed(req.seed)
        out = self.model.generate(
            ids,
            max_new_tokens=req.max_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            suppress_tokens=self.suppress,
            output_logits=True,
            return_dict_in_generate=True,
            **kwargs,
        )
        new = out.sequences[0, ids.shape[1] :].tolist()
        # Raw (pre-temperature) logprobs, as vLLM reports by default.
        logprobs = [
            float(torch.log_softmax(step[0].float(), -1)[tok])
            for step, tok in zip(out.logits, new, strict=False)
        ]
        new = new[: len(logprobs)]
        reason = "stop" if new and new[-1] in self.stop_ids else "length"
        return GenResult(new, logprobs, reason, list(req.prompt_ids))

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
