"""Packing keeps documents apart, and balancing evens out tokens over ranks."""

from __future__ import annotations

import pytest
import torch

from rlcs.packing import IGNORE, Document, balance_by_tokens, collate, pack, plan_step


def test_pack_first_fit_decreasing_respects_seq_len():
    rows = pack([5, 3, 4, 2, 6], seq_len=8)
    # sorted: 6(4), 5(0), 4(2), 3(1), 2(3) -> [6,2], [5,3], [4]
    assert rows == [[4, 3], [0, 1], [2]]
    with pytest.raises(ValueError, match="document 1 has 9 tokens, more than seq_len=8"):
        pack([3, 9], seq_len=8)
    # unpacked (data.pack: false), each document is its own row, and still no longer than that
    from rlcs.packing import plan_step

    assert plan_step([3, 8], 1, 8, 1, packed=False).ranks == [[[[0]], [[1]]]]
    with pytest.raises(ValueError, match="document 1 has 9 tokens, more than seq_len=8"):
        plan_step([3, 9], 1, 8, 1, packed=False)


def test_balance_by_tokens_evens_out_ranks():
    lengths = [100, 10, 90, 20, 50, 50, 30, 30]
    shares = balance_by_tokens(lengths, 2)
    totals = [sum(lengths[i] for i in s) for s in shares]
    assert sorted(i for s in shares for i in s) == list(range(8))
    assert totals == [190, 190]
    assert balance_by_tokens([5, 5], 3)[2] == []


def test_plan_step_micro_batches_rows():
    plan = plan_step([4, 4, 4, 4, 4, 4], num_ranks=2, seq_len=8, micro_batch=1, packed=True)
    # each rank: 12 tokens -> rows of 2 docs, 1 doc -> 2 micro-batches of 1 row
    assert plan.num_micro == 2
    assert plan.rank_tokens([4] * 6) == [12, 12]
    unpacked = plan_step([4, 4, 4], num_ranks=1, seq_len=8, micro_batch=2, packed=False)
    assert unpacked.ranks == [[[[0], [1]], [[2]]]]


def test_collate_targets_positions_and_weights():
    a = Document([10, 11, 12], [0.0, 1.0, 0.5], extras={"adv": [0.0, 2.0, 3.0]})
    b = Document([20, 21], [0.0, 1.0])
    batch = collate([[a, b], [b]], pad_id=0)
    assert batch["input_ids"].tolist() == [[10, 11, 12, 20, 21], [20, 21, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]]
    assert batch["targets"].tolist() == [
        [11, 12, IGNORE, 21, IGNORE],
        [21, IGNORE, IGNORE, IGNORE, IGNORE],
    ]
    assert batch["weights"].tolist() == [[1.0, 0.5, 0.0, 1.0, 0.0], [1.0, 0, 0, 0, 0]]
    assert batch["adv"].tolist() == [[2.0, 3.0, 0.0, 0.0, 0.0], [0.0] * 5]
    assert batch["doc_index"].tolist() == [[0, 0, 0, 1, 1], [2, 2, -1, -1, -1]]
    assert batch["doc_offset"].tolist() == [[1, 2, -1, 1, -1], [1, -1, -1, -1, -1]]


def test_packed_documents_do_not_attend_across_boundaries(tiny_text_model):
    """Logits of each document are the same packed with others as run alone.

    ``use_cache=False`` matters: with a cache, transformers skips deriving the mask from the
    position ids."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    docs = [
        Document(torch.randint(3, 250, (n,), generator=g).tolist(), [1.0] * n) for n in (7, 5, 9)
    ]
    batch = collate([docs], pad_id=0)
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
        ).logits[0]
        at = 0
        for d in docs:
            alone = model(input_ids=torch.tensor([d.input_ids])).logits[0]
            torch.testing.assert_close(packed[at : at + len(d)], alone, atol=1e-5, rtol=1e-5)
            at += len(d)
        # without the per-document positions the second document would see the first
        leaky = model(input_ids=batch["input_ids"], use_cache=False).logits[0]
        assert not torch.allclose(leaky[7:12], packed[7:12], atol=1e-3)


def test_share_prefix_builds_trees_that_fit_seq_len():
    """Three rollouts of one 4-token prompt: the prompt's first 3 tokens once, then each
    rollout from the prompt's last token on; a tree holds what fits in seq_len."""
    from rlcs.packing import share_prefix

    prompt = [1, 2, 3, 4]
    docs = [
        Document(
            prompt + resp, [0.0] * 4 + [1.0] * len(resp), extras={"a": [0.0] * 4 + [w] * len(resp)}
        )
        for resp, w in (([5, 6], 1.0), ([7], -1.0), ([8, 9, 10], 0.5))
    ]
    (tree,) = share_prefix(docs, prefix_len=4, seq_len=32)
    assert tree.input_ids == [1, 2, 3, 4, 5, 6, 4, 7, 4, 8, 9, 10]
    assert tree.branches == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3]
    assert tree.prefix_len == 3
    assert tree.extras["a"] == [0, 0, 0, 0, 1, 1, 0, -1, 0, 0.5, 0.5, 0.5]
    # 3 + 3 + 2 = 8 fits, the third rollout (4 more) does not: it stays a plain document
    two, alone = share_prefix(docs, prefix_len=4, seq_len=10)
    assert two.input_ids == [1, 2, 3, 4, 5, 6, 4, 7] and alone is docs[2]
    with pytest.raises(ValueError, match="shared prefix"):
        share_prefix([docs[0], Document([9, 2, 3, 4, 5], [0.0] * 5)], prefix_len=4, seq_len=32)
    with pytest.raises(ValueError, match="branch ids"):
        Document([1, 2, 3], [0.0] * 3, branches=[0, 2, 2])


def test_collate_tree_positions_targets_and_mask():
    """A continuation reads as prompt + its own tokens: positions go on from the prompt, no
    target crosses into the next continuation, and it attends to the prefix and itself only."""
    from rlcs.packing import share_prefix, tree_attention_mask

    docs = [Document([1, 2, 3] + r, [0.0, 0.0, 0.0] + [1.0] * len(r)) for r in ([5, 6], [7])]
    (tree,) = share_prefix(docs, prefix_len=3, seq_len=16)
    plain = Document([20, 21], [0.0, 1.0])
    batch = collate([[tree, plain]], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 5, 6, 3, 7, 20, 21]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 2, 3, 0, 1]]
    assert batch["branch_ids"].tolist() == [[0, 0, 1, 1, 1, 2, 2, 0, 0]]
    assert batch["targets"].tolist() == [[2, IGNORE, 5, 6, IGNORE, 7, IGNORE, 21, IGNORE]]
    assert batch["weights"].tolist() == [[0, 0, 1, 1, 0, 1, 0, 1, 0]]
    assert batch["doc_offset"].tolist() == [[1, -1, 3, 4, -1, 6, -1, 1, -1]]
    mask = tree_attention_mask(batch["doc_index"], batch["branch_ids"])[0, 0]
    assert mask[6].tolist() == [1, 1, 0, 0, 0, 1, 1, 0, 0]  # second rollout: prefix, itself
    assert mask[4].tolist() == [1, 1, 1, 1, 1, 0, 0, 0, 0]
    assert mask[8].tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 1]  # the plain document: its own
    assert "branch_ids" not in collate([[plain]], pad_id=0)


def test_tree_logits_match_each_rollout_alone(tiny_text_model):
    """Under the tree mask every continuation's logits are those of prompt + it, run alone."""
    from transformers import AutoModelForCausalLM

    from rlcs.packing import share_prefix, tree_attention_mask

    model = AutoModelForCausalLM.from_pretrained(tiny_text_model, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 250, (6,), generator=g).tolist()
    docs = [
        Document(prompt + torch.randint(3, 250, (n,), generator=g).tolist(), [1.0] * (6 + n))
        for n in (4, 2, 5)
    ]
    (tree,) = share_prefix(docs, prefix_len=6, seq_len=64)
    batch = collate([[tree]], pad_id=0)
    mask = tree_attention_mask(batch["doc_index"], batch["branch_ids"])
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=mask,
            use_cache=False,
        ).logits[0]
        at = 5
        for d in docs:
            alone = model(input_ids=torch.tensor([d.input_ids])).logits[0]
            rest = len(d) - 5
            torch.testing.assert_close(logits[at : at + rest], alone[5:], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(logits[:5], alone[:5], atol=1e-5, rtol=1e-5)
            at += rest


@pytest.mark.parametrize("loss_agg", ["sample", "token"])
@pytest.mark.parametrize("trees", [False, True])
def test_split_step_gradient_equals_the_whole_batch(loss_agg, trees):
    """GRPO samples of unequal prompt and response lengths, weighted over the whole batch,
    then packed (or shared as trees), balanced over two ranks and cut into micro-batches of
    one row: the summed loss and gradient are those of ``aggregate`` over each sample alone.
    A bigram model (the logits at a token depend on it alone) checks that every response
    token, the last included, is predicted from the token before it in its own sample, with
    its own advantage and old logprob (some ratios clipped), and no prompt token is."""
    from rlcs.grpo import aggregate, ppo_clip_terms, token_logprobs, token_weights
    from rlcs.packing import share_prefix

    g = torch.Generator().manual_seed(0)
    vocab = 13
    w = torch.randn(vocab, vocab, generator=g, requires_grad=True)
    w_old = w.detach() + 0.5 * torch.randn(vocab, vocab, generator=g)
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (3, 5)]
    samples = [  # (prompt, response, advantage)
        (prompts[k], torch.randint(0, vocab, (n,), generator=g).tolist(), a)
        for k, n, a in ((0, 1, 1.0), (0, 5, -0.5), (0, 2, 2.0), (1, 3, -1.5), (1, 4, 0.7))
    ]

    # the whole batch: each sample alone, padded, aggregated
    width = max(len(p) + len(r) for p, r, _ in samples) - 1
    loss, mask = torch.zeros(len(samples), width), torch.zeros(len(samples), width)
    clipped = 0
    for i, (p, r, a) in enumerate(samples):
        ids = torch.tensor(p + r)
        old = token_logprobs(w_old[ids[:-1]], ids[1:])
        n = len(ids) - 1
        t = ppo_clip_terms(token_logprobs(w[ids[:-1]], ids[1:]), old, torch.full((n,), a))
        loss[i, :n] = t.loss
        mask[i, len(p) - 1 : n] = 1.0
        clipped += int(t.clipped[len(p) - 1 :].sum())
    assert clipped > 0
    want = aggregate(loss, mask, loss_agg)
    (want_grad,) = torch.autograd.grad(want, w)

    weights = token_weights([len(r) for _, r, _ in samples], loss_agg)
    docs = []
    for (p, r, a), wi in zip(samples, weights, strict=True):
        ids = torch.tensor(p + r)
        old = [0.0, *token_logprobs(w_old[ids[:-1]], ids[1:]).tolist()]
        extras = {"advantages": [0.0] * len(p) + [a] * len(r), "old": old}
        docs.append(Document(p + r, [0.0] * len(p) + [wi] * len(r), extras=extras))
    if trees:
        docs = share_prefix(docs[:3], 3, 16) + share_prefix(docs[3:], 5, 16)
        assert [d.branches is not None for d in docs] == [True, True]
    plan = plan_step([len(d) for d in docs], num_ranks=2, seq_len=16, micro_batch=1)
    got, grad, micro = 0.0, torch.zeros_like(w), 0
    for rank in plan.ranks:
        for rows in rank:
            b = collate([[docs[i] for i in row] for row in rows], pad_id=0)
            lp = token_logprobs(w[b["input_ids"]], b["targets"])
            part = (b["weights"] * ppo_clip_terms(lp, b["old"], b["advantages"]).loss).sum()
            grad += torch.autograd.grad(part, w)[0]
            got += part.item()
            micro += 1
    assert micro == (2 if trees else 3)  # rank 0 with two micro-batches when packed
    assert got == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(grad, want_grad, atol=1e-6, rtol=1e-5)
