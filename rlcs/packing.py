"""Sequence packing without cross-document attention, and token balancing across ranks.

A *document* is one training sequence (a pretraining text, an SFT conversation, one GRPO
rollout) with a weight per target token. Documents are packed first-fit-decreasing into rows
of at most ``seq_len`` tokens. Position ids restart at 0 for every document; transformers
derives a block-diagonal causal mask from those restarts when no 2-D attention mask is given,
so attention never crosses a document boundary. Padding at the end of a row is one more
"document" whose targets carry weight 0.

A document may also be a *tree*: one shared prefix (a GRPO group's prompt and its images) and
several continuations after it (the group's responses), each attending to the prefix and to
itself only (``Document.branches``). Its rows then need the explicit mask
``tree_attention_mask`` builds, in place of the one transformers derives from positions.

Planning (which document goes to which rank, row and micro-batch) is separate from collation
(turning rows into tensors), so a driver can plan a whole step and ship each rank its share.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import torch

IGNORE = -100


@dataclass
class Document:
    """One sequence and per-token training data, aligned with ``input_ids``.

    ``weights[t]`` is the loss weight of predicting ``input_ids[t]`` from the tokens before it,
    so ``weights[0]`` is unused. ``extras`` holds more per-token float series aligned the same
    way (for GRPO: ``advantages``, ``old_logprobs``). ``images`` holds processor outputs for
    the document's images (``pixel_values``, ``image_grid_thw``) and its ``mm_token_type_ids``.

    ``branches`` makes it a tree: 0 for the tokens of the shared prefix (first), then ``k`` for
    every token of the ``k``-th continuation (1, 2, ... in order, each contiguous). A
    continuation's positions go on from the prefix's end, so each reads as the sequence
    prefix + continuation; a continuation's first token is predicted from the prefix's last, so
    that token is repeated at the start of every continuation (its target weight unused).
    """

    input_ids: list[int]
    weights: list[float]
    extras: dict[str, list[float]] = field(default_factory=dict)
    images: dict[str, torch.Tensor] | None = None
    branches: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.input_ids):
            raise ValueError(f"{len(self.input_ids)} tokens but {len(self.weights)} weights")
        for k, v in self.extras.items():
            if len(v) != len(self.input_ids):
                raise ValueError(
                    f"extras[{k!r}] has {len(v)} values for {len(self.input_ids)} tokens"
                )
        if self.branches is not None:
            b = self.branches
            if len(b) != len(self.input_ids):
                raise ValueError(f"{len(self.input_ids)} tokens but {len(b)} branch ids")
            if not b or b[0] != 0 or any(y not in (x, x + 1) for x, y in pairwise(b)):
                raise ValueError("branch ids must be 0 for the prefix, then 1, 2, ... in order")

    @property
    def prefix_len(self) -> int:
        """Tokens of the shared prefix (all of them for a plain document)."""
        return len(self) if self.branches is None else self.branches.count(0)

    def __len__(self) -> int:
        return len(self.input_ids)


def check_lengths(lengths: Sequence[int], seq_len: int) -> None:
    """A ValueError naming the first document longer than ``seq_len``."""
    for i, n in enumerate(lengths):
        if n > seq_len:
            raise ValueError(f"document {i} has {n} tokens, more than seq_len={seq_len}")


def pack(lengths: Sequence[int], seq_len: int) -> list[list[int]]:
    """First-fit-decreasing: indices of the documents in each row, each row <= ``seq_len``."""
    check_lengths(lengths, seq_len)
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[int] = []
    for i in order:
        for r, room in enumerate(free):
            if lengths[i] <= room:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(seq_len - lengths[i])
    return rows


def balance_by_tokens(lengths: Sequence[int], num_ranks: int) -> list[list[int]]:
    """Split documents over ranks so each rank's token count is as even as greedy LPT makes it.

    Every rank gets at least one document when there are enough. Indices within a rank keep
    their original order, so results do not depend on the heap's tie-breaking.
    """
    if num_ranks < 1:
        raise ValueError("num_ranks must be >= 1")
    heap = [(0, 0, r) for r in range(num_ranks)]
    out: list[list[int]] = [[] for _ in range(num_ranks)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        tokens, count, r = heapq.heappop(heap)
        out[r].append(i)
        heapq.heappush(heap, (tokens + lengths[i], count + 1, r))
    return [sorted(x) for x in out]


@dataclass
class StepPlan:
    """For each rank, its micro-batches; a micro-batch is a list of rows of document indices."""

    ranks: list[list[list[list[int]]]]

    @property
    def num_micro(self) -> int:
        return max((len(m) for m in self.ranks), default=0)

    def rank_tokens(self, lengths: Sequence[int]) -> list[int]:
        return [sum(lengths[i] for mb in r for row in mb for i in row) for r in self.ranks]


def plan_step(
    lengths: Sequence[int], num_ranks: int, seq_len: int, micro_batch: int, packed: bool = True
) -> StepPlan:
    """Balance documents over ranks by tokens, pack each rank's share, group rows into
    micro-batches of ``micro_batch`` rows. Unpacked, every document is its own row; packed or
    not, a document longer than ``seq_len`` is a ValueError."""
    check_lengths(lengths, seq_len)
    ranks = []
    for share in balance_by_tokens(lengths, num_ranks):
        if packed:
            rows = [[share[j] for j in row] for row in pack([lengths[i] for i in share], seq_len)]
        else:
            rows = [[i] for i in share]
        ranks.append([rows[k : k + micro_batch] for k in range(0, len(rows), micro_batch)])
    return StepPlan(ranks)


def collate(rows: Sequence[Sequence[Document]], pad_id: int) -> dict[str, Any]:
    """Turn rows of documents into a padded batch.

    Returns ``input_ids``, ``position_ids`` (restarting per document), ``targets`` (the next
    token, ``IGNORE`` at document ends and padding), ``weights`` and each extra aligned with
    ``targets``, ``doc_index`` / ``doc_offset`` (which document and which of its tokens each
    target is), and, when documents carry images, ``pixel_values``, ``image_grid_thw`` and
    ``mm_token_type_ids`` concatenated in row order, plus ``doc_spans`` for per-document
    3-D positions (row, start, length, grid, prefix length). With a tree document among them
    it also returns ``branch_ids`` (0 outside continuations) for ``tree_attention_mask``.
    """
    width = max(sum(len(d) for d in row) for row in rows)
    b = len(rows)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    pos = torch.zeros((b, width), dtype=torch.long)
    targets = torch.full((b, width), IGNORE, dtype=torch.long)
    weights = torch.zeros((b, width), dtype=torch.float32)
    doc_index = torch.full((b, width), -1, dtype=torch.long)
    doc_offset = torch.full((b, width), -1, dtype=torch.long)
    extra_names = sorted({k for row in rows for d in row for k in d.extras})
    extras = {k: torch.zeros((b, width), dtype=torch.float32) for k in extra_names}
    has_images = any(d.images is not None for row in rows for d in row)
    trees = any(d.branches is not None for row in rows for d in row)
    branch = torch.zeros((b, width), dtype=torch.long)
    mm = torch.zeros((b, width), dtype=torch.int32)
    pixel_values, grids, spans = [], [], []
    n = 0
    for r, row in enumerate(rows):
        at = 0
        for d in row:
            k = len(d)
            ids[r, at : at + k] = torch.tensor(d.input_ids, dtype=torch.long)
            pos[r, at : at + k] = torch.arange(k)
            if k > 1:
                targets[r, at : at + k - 1] = torch.tensor(d.input_ids[1:], dtype=torch.long)
                weights[r, at : at + k - 1] = torch.tensor(d.weights[1:], dtype=torch.float32)
                doc_offset[r, at : at + k - 1] = torch.arange(1, k)
                for name, series in d.extras.items():
                    extras[name][r, at : at + k - 1] = torch.tensor(series[1:], dtype=torch.float32)
            if d.branches is not None:
                br = torch.tensor(d.branches, dtype=torch.long)
                p = d.prefix_len
                branch[r, at : at + k] = br
                change = torch.nonzero(br[1:] != br[:-1]).view(-1)  # the last token before one
                # a continuation's positions go on from the prefix's (its first token at p)
                starts = (change + 1).tolist()
                for s0, s1 in zip(starts, [*starts[1:], k], strict=True):
                    pos[r, at + s0 : at + s1] = torch.arange(p, p + s1 - s0)
                # no target across a branch change (the prefix's last token, each branch's end)
                cut = at + change
                targets[r, cut], weights[r, cut], doc_offset[r, cut] = IGNORE, 0.0, -1
                for name in d.extras:
                    extras[name][r, cut] = 0.0
            doc_index[r, at : at + k] = n
            if d.images is not None:
                mm[r, at : at + k] = d.images["mm_token_type_ids"].to(torch.int32).view(-1)
                if "pixel_values" in d.images:
                    pixel_values.append(d.images["pixel_values"])
                    grids.append(d.images["image_grid_thw"])
            grid = d.images.get("image_grid_thw") if d.images else None
            spans.append((r, at, k, grid, d.prefix_len))
            at += k
            n += 1
        if at < width:
            pos[r, at:] = torch.arange(width - at)
    out: dict[str, Any] = dict(
        input_ids=ids,
        position_ids=pos,
        targets=targets,
        weights=weights,
        doc_index=doc_index,
        doc_offset=doc_offset,
        **extras,
    )
    if trees:
        out["branch_ids"] = branch
    if has_images:
        out["mm_token_type_ids"] = mm
        out["doc_spans"] = spans
        if pixel_values:
            out["pixel_values"] = torch.cat(pixel_values)
            out["image_grid_thw"] = torch.cat(grids)
    return out


def tree_attention_mask(doc_index: torch.Tensor, branch_ids: torch.Tensor) -> torch.Tensor:
    """The attention mask of rows holding tree documents, ``(rows, 1, L, L)``, True where a
    query may attend: causal, within its own document, and to a key of the shared prefix or of
    its own continuation. Padding (``doc_index`` -1) attends only to padding."""
    length = doc_index.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    same_doc = doc_index[:, :, None] == doc_index[:, None, :]
    key_b, query_b = branch_ids[:, None, :], branch_ids[:, :, None]
    same_branch = (key_b == 0) | (key_b == query_b)
    return (causal & same_doc & same_branch)[:, None]


def share_prefix(docs: Sequence[Document], prefix_len: int, seq_len: int) -> list[Document]:
    """Documents that begin with the same ``prefix_len`` tokens and images (a GRPO group's
    rollouts of one prompt) as tree documents of at most ``seq_len`` tokens each: the prefix
    once, then every document's rest (``Document.branches``). The prefix is computed once per
    tree instead of once per document, and each continuation's logprobs are those of its own
    document. A document that fits in no tree with another stays as it is."""
    if prefix_len < 2 or len(docs) < 2:
        return list(docs)
    head = docs[0].input_ids[:prefix_len]
    for d in docs:
        if d.input_ids[:prefix_len] != head or len(d) <= prefix_len or d.branches is not None:
            raise ValueError("share_prefix needs plain documents that extend one shared prefix")
    shared = prefix_len - 1  # the prefix's last token starts every continuation
    chunks: list[list[Document]] = []
    size = seq_len + 1
    for d in docs:
        rest = len(d) - shared
        if size + rest > seq_len:
            chunks.append([])
            size = shared
        chunks[-1].append(d)
        size += rest
    out = []
    for chunk in chunks:
        if len(chunk) == 1:
            out.append(chunk[0])
            continue
        first = chunk[0]
        ids, weights = first.input_ids[:shared], first.weights[:shared]
        extras = {k: v[:shared] for k, v in first.extras.items()}
        branches = [0] * shared
        for k, d in enumerate(chunk, start=1):  # the slices above are copies: extend them
            ids += d.input_ids[shared:]
            weights += d.weights[shared:]
            for name in extras:
                extras[name] += d.extras[name][shared:]
            branches += [k] * (len(d) - shared)
        images = None
        if first.images is not None:
            images = dict(first.images)
            mm = first.images["mm_token_type_ids"].view(-1)[:shared]
            images["mm_token_type_ids"] = torch.cat([mm, mm.new_zeros(len(ids) - shared)])
        out.append(Document(ids, weights, extras, images, branches))
    return out
