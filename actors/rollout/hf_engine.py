"""The transformers engine: ``generate`` on CPU, for models vLLM CPU cannot serve here.

The tiny GLM-4.1V-architecture VLM runs here. Requests are generated in left-padded batches
(``batch_size`` at a time, similar lengths together), and every row samples from its own
seeded generator inside a logits processor, so a rollout's tokens depend on its seed and its
own logits only, not on which other requests share its batch (up to the last float bit of
batched matmuls). Logprobs are the raw, pre-temperature ones, as vLLM reports by default, or
with ``logprobs="tempered"`` those of the distribution sampled from.

Given the worker's :class:`~rlcs.prompts.BudgetRule`, the same processor also applies the
think/answer budgets token by token (forcing ``</think><answer>``, ending a row whose budget is
spent), so a rollout takes one pass: the prompt and its images are prefilled once, not again
for a second pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from actors.cpu_attention import CPU_ATTENTION, from_pretrained_on_cpu
from actors.rollout.engine import GenRequest, GenResult
from actors.rollout.hf_decoding import GrowingCache
from actors.weights.receiver import StagedWeights
from rlcs.prompts import BudgetRule


def _is_glm4v(model_path: str) -> bool:
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return any("Glm4v" in a for a in cfg.get("architectures", []))


class HFEngine:
    #: the worker may hand ``generate`` its BudgetRule: one pass per rollout
    applies_budget = True

    def __init__(
        self,
        model_path: str,
        stop_ids: list[int],
        dtype: str = "float32",
        device: str | None = None,
        batch_size: int = 64,
        share_prefill: bool = True,
        logprobs: str = "raw",
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        if logprobs not in ("raw", "tempered"):
            raise ValueError(f"logprobs must be 'raw' or 'tempered', got {logprobs!r}")
        self.tempered = logprobs == "tempered"
        # an image prompt's n samples prefilled once (same tokens; 1.3-1.5x faster generation
        # of the demo's rollouts, benchmarks/hf_generate.py)
        self.share_prefill = share_prefill
        self.stop_ids = list(stop_ids)
        self.vlm = _is_glm4v(model_path)
        if self.vlm:  # GLM-4.1V, or GLM-4.5V's mixture of experts
            from transformers import AutoModelForImageTextToText

            from rlcs.vlm_processor import load_vlm_processor

            self.processor = load_vlm_processor(model_path)
            self.tokenizer = self.processor.tokenizer
            model_cls = AutoModelForImageTextToText
        else:
            self.processor = None
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
            model_cls = AutoModelForCausalLM
        load = dict(dtype=getattr(torch, dtype), attn_implementation="sdpa")
        if self.device.type == "cpu":
            self.model = from_pretrained_on_cpu(model_cls, model_path, **load)
        else:
            self.model = model_cls.from_pretrained(model_path, **load)
        self.model.to(self.device).eval()
        self.pad_id = self.tokenizer.pad_token_id
        # _RowSampler samples from the model's own logits and reports their logprobs, as vLLM
        # does with explicit sampling parameters. A checkpoint's generation defaults
        # (repetition_penalty, no_repeat_ngram_size, min_new_tokens, bad_words_ids, ...) would
        # otherwise change the logits before it sees them.
        self.model.generation_config = GenerationConfig(
            bos_token_id=self.model.generation_config.bos_token_id,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
        )
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
    def generate(
        self, requests: list[GenRequest], rule: BudgetRule | None = None
    ) -> list[GenResult]:
        """Sample every request. With ``rule``, the think/answer budgets are applied inside
        this one pass (each request's ``max_tokens`` is then the rule's) and a result says
        whether its answer was forced, and where (``forced_positions``)."""
        if rule is not None and any(r.extra_ids for r in requests):
            raise ValueError("a budgeted pass starts at the prompt: requests carry no extra_ids")
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
                results = self._batch([requests[i] for i in chunk], rule)
                for i, res in zip(chunk, results, strict=True):
                    out[i] = res
        return out  # type: ignore[return-value]

    def _batch(self, reqs: list[GenRequest], rule: BudgetRule | None) -> list[GenResult]:
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
        max_new = rule.max_tokens if rule else max(r.max_tokens for r in reqs)
        sampler = _RowSampler(reqs, self.suppress, self.stop_ids, max_new, rule, self.tempered)
        shared = None
        if with_images and self.share_prefill:
            shared = self._prefill_shared(reqs, ids, mask, kwargs["mm_token_type_ids"], max_new)
        if shared is not None:  # the prompts and images are in the cache
            kwargs = {"attention_mask": kwargs["attention_mask"], "past_key_values": shared}
        else:
            kwargs["past_key_values"] = self._cache(max_new)
        seqs = self.model.generate(
            ids.to(self.device),
            max_new_tokens=max_new,
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
            new = seqs[b, width:].tolist()
            if rule is None:
                new = new[: r.max_tokens]
            if sampler.cut[b] is not None:  # the budget ended it: drop the stop token put there
                new = new[: sampler.cut[b]]
            else:
                end = next((k + 1 for k, tok in enumerate(new) if tok in stops), len(new))
                new = new[:end]
            logprobs = [sampler.logprobs[k][b] for k in range(len(new))]
            reason = "stop" if new and new[-1] in stops and sampler.cut[b] is None else "length"
            forced_at = [k for k in sampler.forced_at[b] if k < len(new)]
            results.append(
                GenResult(new, logprobs, reason, list(r.prompt_ids), bool(forced_at), forced_at)
            )
        return results

    def _cache(self, max_new: int) -> GrowingCache:
        """An empty KV cache for a batch that samples up to ``max_new`` tokens a row."""
        layers = self.model.config.get_text_config(decoder=True).num_hidden_layers
        # the CPU attention runs in fp32 whatever the model's dtype: the cache it reads too
        fp32 = self.model.config._attn_implementation == CPU_ATTENTION
        return GrowingCache(layers, room=max_new + 1, dtype=torch.float32 if fp32 else None)

    def _prefill_shared(
        self,
        reqs: list[GenRequest],
        ids: torch.Tensor,
        mask: torch.Tensor,
        types: torch.Tensor,
        max_new: int,
    ) -> Any:
        """Prefill each distinct prompt of an image batch once (the ``n`` samples of an item
        share one) and return the KV cache laid out row by row, or None when no two rows share.

        Everything but the prompts' last token goes in: ``generate`` then runs that token for
        every row and samples on from there, as it would after its own prefill of all rows. The
        3-D rope offsets the model keeps from a prefill are laid out the same way."""
        first: dict[tuple, int] = {}
        index = [
            first.setdefault((tuple(r.prompt_ids), tuple(r.extra_ids), id(r.mm_inputs)), b)
            for b, r in enumerate(reqs)
        ]
        unique = sorted(first.values())
        base = getattr(self.model, "model", None)
        if len(unique) == len(reqs) or ids.shape[1] < 2 or not hasattr(base, "rope_deltas"):
            return None
        row_of = {b: k for k, b in enumerate(unique)}
        sel = torch.tensor(unique)
        pixel_values = torch.cat([reqs[b].mm_inputs["pixel_values"] for b in unique])
        grid = torch.cat([reqs[b].mm_inputs["image_grid_thw"] for b in unique])
        dev = self.device
        out = self.model(
            input_ids=ids[sel, :-1].to(dev),
            attention_mask=mask[sel, :-1].to(dev),
            pixel_values=pixel_values.to(dev),
            image_grid_thw=grid.to(dev),
            mm_token_type_ids=types[sel.to(types.device), :-1],
            past_key_values=self._cache(max_new),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        rows = torch.tensor([row_of[b] for b in index], device=dev)
        cache.batch_select_indices(rows)
        base.rope_deltas = base.rope_deltas.to(dev)[rows]
        return cache

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
        live = self.model.state_dict()
        # unknown names and wrong shapes are refused before anything is copied:
        # load_state_dict copies every tensor that fits before it raises for one that does
        # not, which would leave half a push live
        staged.refuse_mismatches({n: tuple(t.shape) for n, t in live.items()}, "HF engine")
        state = dict(staged.consume())
        # a push that leaves parameters out is refused before anything is copied too: loading
        # the rest would leave the engine on a mix of the new weights and the old
        missing = sorted(set(params) - set(state))
        if missing:
            staged.clear()
            return {"checksums": {}, "missing": missing, "readback": 0}
        self.model.load_state_dict(state, strict=False)
        checksums = dict(staged.checksums)
        readback = 0
        for name in state:
            if name not in checksums:
                checksums[name] = staged.checksum(live[name])
                readback += 1
        staged.clear()
        return {"checksums": checksums, "missing": [], "readback": readback}

    def sleep(self) -> None:
        """Nothing to release: the HF engine keeps no KV cache between calls."""

    def wake_up(self) -> None:
        pass


class _RowSampler:
    """A logits processor that picks every row's next token itself and leaves only that token
    open, so ``generate``'s greedy step takes it. It records each token's raw logprob.

    Every row draws from its own seeded stream of uniforms (inverse-CDF sampling at the row's
    temperature and top_p; 0 temperature is argmax), so a row's tokens do not depend on the
    other rows of its batch, and all rows are sampled in a few batched tensor operations.
    With ``tempered`` the logprobs are those of the distribution sampled from (the logits over
    the row's temperature; a greedy row's are raw).

    With a :class:`BudgetRule` it asks the rule first: a forced token is taken with logprob 0.0
    (chosen by the budget, not sampled: the worker's convention), and a row whose budget is
    spent is given a stop token, which ``cut`` marks for removal."""

    def __init__(
        self,
        reqs: list[GenRequest],
        suppress: list[int] | None,
        stop_ids: list[int],
        max_new_tokens: int,
        rule: BudgetRule | None = None,
        tempered: bool = False,
    ):
        self.reqs = reqs
        self.tempered = tempered
        self.suppress = suppress
        self.rule = rule
        self.stops = set(stop_ids)
        self.stop_id = stop_ids[0]
        self.temps = torch.tensor([r.temperature for r in reqs], dtype=torch.float32)
        self.top_p = torch.tensor([r.top_p for r in reqs], dtype=torch.float32)
        self.uniforms = torch.stack(
            [
                torch.rand(max_new_tokens, generator=torch.Generator().manual_seed(r.seed))
                for r in reqs
            ]
        )
        self.logprobs: list[list[float]] = []
        self.tokens: list[list[int]] = [[] for _ in reqs]
        self.done = [False] * len(reqs)
        self.cut: list[int | None] = [None] * len(reqs)
        self.forced_at: list[list[int]] = [[] for _ in reqs]

    def _sample(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """One token per row: argmax where the temperature is 0, else a draw at the row's
        temperature and top_p with the row's uniform for this step."""
        greedy = logits.argmax(-1)
        hot = self.temps > 0
        if not bool(hot.any()):
            return greedy
        probs = torch.softmax(logits / torch.where(hot, self.temps, 1.0)[:, None], -1)
        if bool((self.top_p < 1.0).any()):
            sorted_p, idx = probs.sort(-1, descending=True)
            # keep the smallest head whose mass reaches top_p (always the first token)
            drop = sorted_p.cumsum(-1) - sorted_p >= self.top_p[:, None]
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p.masked_fill(drop, 0.0))
        cdf = probs.cumsum(-1)
        u = self.uniforms[:, step : step + 1] * cdf[:, -1:]
        drawn = torch.searchsorted(cdf, u, right=True)[:, 0]
        # a draw past the last float of the cdf falls on the last token that has mass
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.int64).argmax(-1)
        drawn = torch.minimum(drawn, last)
        return torch.where(hot, drawn, greedy)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raw = scores.float().cpu()
        if self.tempered:
            logp = torch.log_softmax(
                raw / torch.where(self.temps > 0, self.temps, 1.0)[:, None], -1
            )
        else:
            logp = torch.log_softmax(raw, -1)
        logits = raw.clone()
        if self.suppress:
            logits[:, self.suppress] = float("-inf")
        step = len(self.logprobs)
        sampled = self._sample(logits, step).tolist()
        picks, decided = [], []
        for b in range(len(self.reqs)):
            if self.done[b]:  # generate pads the row from here on; nothing to sample
                picks.append(self.stop_id)
                decided.append(True)
                continue
            action, tok = self.rule.next_action(self.tokens[b]) if self.rule else ("sample", None)
            if action == "stop":
                self.cut[b] = len(self.tokens[b])
                tok = self.stop_id
            elif action == "force":
                self.forced_at[b].append(len(self.tokens[b]))
            else:
                tok = sampled[b]
            picks.append(tok)
            decided.append(action != "sample")
            self.tokens[b].append(tok)
            self.done[b] = tok in self.stops
        chosen = torch.tensor(picks)
        lps = logp.gather(1, chosen[:, None])[:, 0].tolist()
        self.logprobs.append([0.0 if d else lp for lp, d in zip(lps, decided, strict=True)])
        forced = torch.full_like(scores, float("-inf"))
        forced.scatter_(1, chosen[:, None].to(scores.device), 0.0)
        return forced
