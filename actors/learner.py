"""The learner: one DeepSpeed engine per data-parallel rank, for pretraining, SFT and GRPO.

A ``Learner`` is one rank. ``actors.learner_group.LearnerGroup`` runs one per Ray actor and
forms their ``torch.distributed`` group (gloo on CPU, NCCL on GPU); a single ``Learner`` also
works in-process (``Learner.local``) for tests and benchmarks. The driver turns a stage's batch
into per-rank ``RankStep``s (``actors.learner_batches``), with weights normalised over the
whole step, so the update is the same however the step is split over ranks and micro-batches.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from actors import learner_checkpoint as ckpt
from actors.deepspeed_config import deepspeed_config, lr_factor, reference_config
from actors.learner_batches import RankStep, prepare_step
from actors.learner_grad_norm import GradNormClipper, clips_outside_deepspeed
from actors.learner_inputs import ModelInputs
from actors.learner_model import (
    freeze_parameters,
    load_for_training,
    load_processors,
    param_groups,
)
from actors.network import free_port, join_process_group, node_ip
from rlcs.config import Config
from rlcs.grpo import ppo_clip_terms, tempered_logits, token_entropy, token_logprobs


def drop_construction_step(optimizer: Any) -> bool:
    """Undo the optimizer step DeepSpeed's ZeRO-0 bf16 wrapper takes as it is built.

    With bf16 weights and no ZeRO (``precision: bf16``, ``zero_stage: 0``) DeepSpeed wraps the
    client optimizer in ``FP16_UnfusedOptimizer``, whose ``initialize_optimizer_states`` steps
    it once on zero gradients to create its state (ZeRO-1/2/3 no longer do). For AdamW that
    step counts: the first real update used step 2's bias corrections, 0.74 of the first
    update ZeRO-1/2 take, and with weight decay the fp32 master weights decayed once before
    training. Drop the optimizer's state (AdamW creates it afresh at its first step) and copy
    the masters back from the bf16 weights, which that step left alone (the masters were
    copied from them). Call right after ``deepspeed.initialize``; True if there was a step to
    undo."""
    from deepspeed.runtime.fp16.unfused_optimizer import FP16_UnfusedOptimizer

    if not isinstance(optimizer, FP16_UnfusedOptimizer):
        return False
    optimizer.optimizer.state.clear()
    optimizer.refresh_fp32_params()
    return True


class Learner:
    """One data-parallel rank: a DeepSpeed engine and the three stages' losses."""

    def __init__(
        self, config: Config, model_path: str | Path, rank: int = 0, world_size: int | None = None
    ):
        self.config = config
        self.model_path = str(model_path)
        self.rank = rank
        self.world_size = world_size or config.learner.num_ranks
        self.device = config.cluster.device
        self.engine: Any = None
        self.ref_model: torch.nn.Module | None = None

    @classmethod
    def local(cls, config: Config, model_path: str | Path) -> Learner:
        """A single in-process rank (``num_ranks`` must be 1)."""
        if config.learner.num_ranks != 1:
            raise ValueError("Learner.local runs one rank; use LearnerGroup for num_ranks > 1")
        learner = cls(config, model_path, 0, 1)
        if not torch.distributed.is_initialized():
            learner.init("127.0.0.1", free_port())
        else:
            learner.init(None, None)
        return learner

    def address(self) -> tuple[str, int]:
        """Rank 0's reachable address and a free port on it, for the process-group rendezvous."""
        ip = node_ip()
        return ip, free_port("" if ip != "127.0.0.1" else ip)

    def init(self, master_addr: str | None, master_port: int | None) -> None:
        """Join the process group and build the engine. Collective across ranks."""
        join_process_group(self.device, self.rank, self.world_size, master_addr, master_port)
        import deepspeed

        torch.manual_seed(self.config.run.seed)
        lc = self.config.learner
        model = load_for_training(self.model_path, lc, self.device)
        freeze_parameters(model, lc.freeze)
        groups = param_groups(model, lc.lr, lc.lr_groups)
        self.base_lrs = [g["lr"] for g in groups]
        optimizer = torch.optim.AdamW(groups, lr=lc.lr, weight_decay=lc.weight_decay)
        ds_cfg = deepspeed_config(lc, self.device)
        # where DeepSpeed would clip without keeping the norm, the learner clips and keeps it
        self.clipper: GradNormClipper | None = None
        if clips_outside_deepspeed(lc):
            ds_cfg["gradient_clipping"] = 0.0
            self.clipper = GradNormClipper(optimizer, lc.grad_clip)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(lc, lc.steps))
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=schedule, config=ds_cfg
        )
        drop_construction_step(self.engine.optimizer)
        is_vlm = hasattr(model.config, "vision_config")
        tower_trains = is_vlm and any(p.requires_grad for p in model.model.visual.parameters())
        tower_every_pass = is_vlm and self.world_size > 1 and (tower_trains or lc.zero_stage == 3)
        if lc.grpo.kl_coef > 0 and self.config.stage == "rl":  # the KL term is GRPO's alone
            ref = load_for_training(self.model_path, lc, self.device)
            ref.requires_grad_(False)
            self.ref_model, _, _, _ = deepspeed.initialize(model=ref, config=reference_config(lc))
            self.ref_model.eval()
        self.tokenizer, self.processor = load_processors(self.model_path)
        self.inputs = ModelInputs(
            self.engine.module,
            self.tokenizer,
            lc.attn_implementation,
            self.engine.device,
            tower_every_pass=tower_every_pass,
        )
        self.steps = 0

    # ----------------------------------------------------------------- forward passes
    def _policy_temperature(self) -> float:
        """What the policy's logits are divided by: the rollout's sampling temperature, so that
        the objective's logprobs are those of the distribution the samples came from."""
        t = self.config.rollout.temperature
        return t if self.config.learner.grpo.tempered_logprobs and t > 0 else 1.0

    def _engine_logprob_temperature(self) -> float:
        """The temperature of the logprobs the engines report (rollout.logprobs)."""
        ro = self.config.rollout
        return ro.temperature if ro.logprobs == "tempered" and ro.temperature > 0 else 1.0

    @torch.no_grad()
    def _fill_logprobs(
        self, step: RankStep, key: str, model: Any, engine_key: str | None = None
    ) -> None:
        """Per-token policy logprobs (tempered) of each of ``step``'s documents under ``model``,
        stored in ``doc.extras[key]``; with an ``engine_key``, also those at the temperature the
        engines report theirs at (``rollout.logprobs``) where it is not the policy's, for the
        comparison with the engine's.

        Under ZeRO-3 a forward pass gathers each layer's parameters from every rank, so each
        rank runs as many passes as the rank with the most micro-batches (zero-weight ones
        after its own): with fewer, ranks' collectives stop matching (gloo aborts on a size
        mismatch, NCCL hangs)."""
        temp = self._policy_temperature()
        engine_temp = self._engine_logprob_temperature()
        docs = step.docs
        micro = [mb for mini in step.minis for mb in mini]
        if self.world_size > 1 and self.config.learner.zero_stage == 3:
            filler = self.inputs.filler_batch(step.objective, self.ref_model is not None)
            for _ in range(sum(step.num_micro) - len(micro)):
                self.inputs.logits(model, filler)
        for rows in micro:
            b, order = self.inputs.collate(docs, rows)
            logits = self.inputs.logits(model, b)
            targets = b["targets"].to(self.engine.device)
            series = {key: token_logprobs(tempered_logits(logits, temp), targets)}
            if engine_temp != temp and engine_key:
                series[engine_key] = token_logprobs(tempered_logits(logits, engine_temp), targets)
            sel = b["doc_offset"] >= 0
            where = list(
                zip(b["doc_index"][sel].tolist(), b["doc_offset"][sel].tolist(), strict=True)
            )
            for name, lp in series.items():
                for d in order:
                    d.extras[name] = [0.0] * len(d)
                for (idx, off), v in zip(where, lp.float().cpu()[sel].tolist(), strict=True):
                    order[idx].extras[name][off] = v

    # ----------------------------------------------------------------- training
    def run_step(self, step: RankStep) -> dict[str, float]:
        """This rank's share of one call: every mini-batch is one optimizer step."""
        t0 = time.perf_counter()
        grpo = self.config.learner.grpo
        stats = dict(loss=0.0, tokens=0.0, clipped=0.0, grad_norm=0.0)
        passes = grpo.epochs if step.objective == "policy" else 1
        from_rollout = False  # the rollouts' logprobs as the old ones (policy, several steps)
        if step.objective == "policy":
            stats.update(logprob_mismatch_sum=0.0, logprob_mismatch_tokens=0.0)
            # With one optimizer step per call the update is on-policy: the old logprobs are
            # the training forward's own, detached, and the extra forward pass is skipped. With
            # more, they are the learner's before its first step, or the rollouts' own
            # (grpo.old_logprobs=rollout), which skips that pass too.
            multi = len(step.minis) * passes > 1
            from_rollout = multi and grpo.old_logprobs == "rollout"
            if multi and not from_rollout:
                self._fill_logprobs(
                    step, "old_logprobs", self.engine, engine_key="old_logprobs_engine"
                )
            if self.ref_model is not None:
                self._fill_logprobs(step, "ref_logprobs", self.ref_model)
        minis = list(zip(step.minis, step.num_micro, strict=True)) * passes
        for opt_step, (mini, n_micro) in enumerate(minis):
            runs = [(rows, 1.0) for rows in mini]
            filler = mini[0] if mini else None
            while len(runs) < n_micro:
                runs.append((filler, 0.0))
            for rows, scale in runs:
                if rows is None:  # nothing of this mini-batch on this rank
                    b = self.inputs.filler_batch(step.objective, self.ref_model is not None)
                else:
                    b, _ = self.inputs.collate(step.docs, rows)
                loss, info = self._micro_loss(
                    b,
                    step.objective,
                    grpo,
                    from_rollout=from_rollout,
                    # the learner's logprobs before any update, against the engine's: with the
                    # rollouts' as old logprobs, only the first step's forward has them
                    measure=not from_rollout or opt_step == 0,
                )
                self.engine.backward(loss * scale * self.world_size, scale_wrt_gas=False)
                if scale:
                    stats["loss"] += float(loss.detach())
                    for k, v in info.items():
                        stats[k] += v
            stats["lr"] = float(
                self.engine.optimizer.param_groups[0]["lr"]
            )  # what this step applies
            self.engine.step()
            self.steps += 1
            # the step's global norm before clipping, the same on every rank
            norm = self.clipper.norm if self.clipper else self.engine.get_global_grad_norm()
            stats["grad_norm"] = float(norm)
        stats["step_s"] = time.perf_counter() - t0
        stats["optimizer_steps"] = float(len(step.minis) * passes)
        stats.update({k: float(v) for k, v in step.info.items()})
        return stats

    def _micro_loss(
        self,
        b: dict[str, Any],
        objective: str,
        grpo: Any,
        from_rollout: bool = False,
        measure: bool = True,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        dev = self.engine.device
        logits = self.inputs.logits(self.engine, b)
        targets = b["targets"].to(dev)
        weights = b["weights"].to(dev)
        active = (targets >= 0) & (weights != 0)
        info = {"tokens": float(active.sum())}
        if objective == "lm":
            return (weights * -token_logprobs(logits, targets)).sum(), info
        temp = self._policy_temperature()
        raw_logits = logits
        logits = tempered_logits(logits, temp)
        lp = token_logprobs(logits, targets)
        ent = token_entropy(logits) if grpo.entropy_coef > 0 else None
        if "old_logprobs" in b:
            old = b["old_logprobs"].to(dev)
        elif from_rollout:
            old = b["rollout_logprobs"].to(dev)
        else:
            old = lp.detach()
        if "rollout_logprobs" in b and measure:
            # The learner's logprobs of the sampled tokens before the update and the engine's,
            # same weights, both at the temperature the engines report them at (raw by
            # default): they agree to float noise unless the learner sees something else than
            # the engine did (another prompt, a missing image, a stale sync). Forced tokens
            # (0.0) and masked ones are left out.
            engine_temp = self._engine_logprob_temperature()
            if engine_temp == temp:
                mine = b["old_logprobs"].to(dev) if "old_logprobs" in b else lp.detach()
            elif "old_logprobs_engine" in b:
                mine = b["old_logprobs_engine"].to(dev)
            else:
                mine = token_logprobs(tempered_logits(raw_logits.detach(), engine_temp), targets)
            roll = b["rollout_logprobs"].to(dev)
            seen = active & (roll != 0)
            info["logprob_mismatch_sum"] = float((mine - roll).abs()[seen].sum())
            info["logprob_mismatch_tokens"] = float(seen.sum())
        terms = ppo_clip_terms(
            lp,
            old,
            b["advantages"].to(dev),
            eps_low=grpo.eps_low,
            eps_high=grpo.eps_high,
            ref_logprobs=b["ref_logprobs"].to(dev) if "ref_logprobs" in b else None,
            kl_coef=grpo.kl_coef,
            entropy=ent,
            entropy_coef=grpo.entropy_coef,
        )
        info["clipped"] = float((terms.clipped & active).sum())
        return (weights * terms.loss).sum(), info

    def train_step(
        self, stage: str | None, batch: list[Any], micro_batch: int | None = None
    ) -> dict[str, float]:
        """Prepare and run one call on this rank alone (``num_ranks`` 1)."""
        if self.world_size != 1:
            raise RuntimeError("train_step on one Learner needs num_ranks 1; use LearnerGroup")
        steps = prepare_step(
            stage or self.config.stage,
            batch,
            self.config,
            self.tokenizer,
            self.processor,
            micro_batch,
        )
        return self.run_step(steps[0])

    # ----------------------------------------------------------------- state
    def save_checkpoint(self, root: str | Path, tag: str, data_state: Any = None) -> str:
        return str(ckpt.save(self.engine, root, tag, self.rank, data_state))

    def load_checkpoint(self, root: str | Path, tag: str | None = None) -> Any:
        state = ckpt.load(self.engine, root, tag, self.rank)
        self._optimizer_settings_from_config()
        return state

    def _optimizer_settings_from_config(self) -> None:
        ckpt.apply_optimizer_settings(
            self.engine.lr_scheduler, self.base_lrs, self.config.learner.weight_decay
        )

    def named_weights(self, as_saved: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
        """HF-named parameters and persistent buffers, one module at a time, the full model
        never materialised under ZeRO-3 (``learner_checkpoint.module_weights``)."""
        zero3 = self.config.learner.zero_stage == 3
        return ckpt.module_weights(self.engine.module, zero3, as_saved)

    def named_weights_list(self) -> list[tuple[str, torch.Tensor]]:
        """All weights as CPU copies (a collective under ZeRO-3): for tests and small models."""
        return [(n, t.detach().to("cpu", copy=True)) for n, t in self.named_weights()]

    def push_weights(self, transport: Any) -> Any:
        """Stream the weights through ``transport.push``; every rank must call it (ZeRO-3
        gathers are collective), only rank 0 pushes. vLLM engines load them as a checkpoint
        holds them; the HF engine loads the learner's own parameters by name."""
        it = self.named_weights(as_saved=self.config.rollout.engine == "vllm")
        try:
            return transport.push(it) if self.rank == 0 else None
        finally:
            # every rank runs the gathers to the end; on rank 0 also after a push that failed
            # midway (an engine died), or the others hang in them and it cannot be retried
            for _ in it:
                pass

    def export_hf(self, out_dir: str | Path) -> str | None:
        """``save_pretrained`` with tokenizer and processor; collective, rank 0 writes."""
        state = {}
        for name, t in self.named_weights():
            if self.rank == 0:
                state[name] = t.detach().to("cpu", torch.float32, copy=True)
        if self.rank != 0:
            return None
        return str(ckpt.write_hf_export(self.engine.module, state, self.model_path, out_dir))

    def record_optimizer_grads(self) -> None:
        """Snapshot the gradients the optimizer applies at the next step (after reduction
        across ranks and clipping): Adam's first steps amplify float noise in tiny gradients
        to +-lr, so equivalence tests compare these rather than weights. Under ZeRO-1/2 each
        rank sees its own flat partition, in rank order."""
        opt = getattr(self.engine.optimizer, "optimizer", self.engine.optimizer)
        self._recorded: list[torch.Tensor] = []

        def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            self._recorded = [
                p.grad.detach().float().clone().view(-1)
                for g in optimizer.param_groups
                for p in g["params"]
                if p.grad is not None
            ]
            handle.remove()

        handle = opt.register_step_pre_hook(hook)

    def recorded_grads(self) -> torch.Tensor:
        return torch.cat(self._recorded) if self._recorded else torch.zeros(0)

    def parameter_counts(self) -> dict[str, int]:
        """Parameter elements this rank holds, of the policy and of the reference model (0
        without one); under ZeRO-3 its partitions only."""

        def held(module: Any) -> int:
            ps = module.parameters() if module is not None else []
            return sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in ps)

        return {"policy": held(self.engine.module), "reference": held(self.ref_model)}

    def ping(self) -> int:
        return self.rank
