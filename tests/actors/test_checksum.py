"""Weight-sync checksums: both algorithms see what they must, agree across devices and chunk
sizes, and the engine's staging hashes with the learner's algorithm for each transport."""

from __future__ import annotations

import pytest
import torch

from actors.weights import checksum
from actors.weights.checksum import BY_TRANSPORT, for_transport, tensor_checksum
from actors.weights.receiver import StagedWeights


@pytest.mark.parametrize("algorithm", ["xxh3", "fold"])
def test_checksum_sees_one_bit_swaps_dtype_and_shape(algorithm):
    t = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    ck = lambda x: tensor_checksum(x, algorithm)  # noqa: E731
    flipped = t.clone()
    flipped.view(torch.int32)[5, 7] ^= 1
    high = t.clone()
    high.view(torch.int32)[63, 31] ^= 1 << 30
    swapped = t.clone()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]
    assert ck(t) == ck(t.clone())
    assert len({ck(t), ck(flipped), ck(high), ck(swapped)}) == 4
    assert ck(t) != ck(t.reshape(32, 64))
    assert ck(t.to(torch.bfloat16)) != ck(t)
    assert ck(t.t()) == ck(t.t().contiguous())
    assert ck(t).startswith(f"{algorithm}:") and ck(t).endswith(":float32:64x32")


def _fold_reference(data: bytes) -> str:
    """The ``fold`` digest in plain Python integers, straight from its definition."""
    data += bytes(-len(data) % 4)
    acc = [0, 0]
    for i in range(len(data) // 4):
        word = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        lo, hi = word & 0xFFFF, word >> 16
        for lane, ((ma, oa), (mb, ob)) in enumerate(checksum._LANES):
            wa = (((i * ma + oa) >> 16) & 0x7FFF) + 1
            wb = (((i * mb + ob) >> 16) & 0x7FFF) + 1
            acc[lane] = (acc[lane] + lo * wa + hi * wb) % (2**31 - 1)
    return f"{acc[0]:08x}{acc[1]:08x}"


def test_fold_matches_its_definition_at_any_chunk_size(monkeypatch):
    # Learner and engines may run different builds: the digest is part of the wire contract.
    t = torch.randn(1003, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    want = f"fold:{_fold_reference(t.view(torch.uint8).numpy().tobytes())}:bfloat16:1003"
    assert tensor_checksum(t, "fold") == want
    monkeypatch.setattr(checksum, "_CHUNK", 7)
    assert tensor_checksum(t, "fold") == want


def test_fold_covers_tail_bytes_and_empty_tensors():
    a = torch.tensor([1, 2, 3, 4, 5], dtype=torch.uint8)
    b = a.clone()
    b[4] = 6
    assert tensor_checksum(a, "fold") != tensor_checksum(b, "fold")
    assert tensor_checksum(torch.empty(0), "fold") == "fold:0000000000000000:float32:0"


@pytest.mark.parametrize("algorithm", ["xxh3", "fold"])
def test_views_at_any_byte_offset_hash_like_their_copies(algorithm):
    # transports pack a bucket's tensors into one buffer: a tensor may start at any byte
    buf = torch.arange(64, dtype=torch.uint8)
    for t in (buf[2:42].view(torch.bfloat16), buf[1:40], buf[4:44].view(torch.float32)):
        assert tensor_checksum(t, algorithm) == tensor_checksum(t.clone(), algorithm)


def test_unknown_algorithm_and_transport_are_refused():
    with pytest.raises(ValueError, match="unknown checksum algorithm 'md5'"):
        tensor_checksum(torch.zeros(2), "md5")
    with pytest.raises(ValueError, match="unknown weight transport 'smoke'"):
        for_transport("smoke")


@pytest.mark.parametrize("kind", sorted(BY_TRANSPORT))
def test_staging_hashes_with_the_transports_algorithm(kind):
    """What the engine computes on arrival and on readback equals the learner's expectation."""
    tensors = [("a", torch.randn(33)), ("b", torch.randn(4, 4))]
    staged = StagedWeights(readable=lambda name, t: name == "b")
    staged.add(tensors, "v1", kind)
    expected = {n: tensor_checksum(t, for_transport(kind)) for n, t in tensors}
    assert staged.checksums == {"a": expected["a"]}
    assert staged.checksum(tensors[1][1].clone()) == expected["b"]
    assert expected["a"].startswith("fold:" if kind in ("cuda_ipc", "nccl") else "xxh3:")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is present")
def test_fold_on_the_gpu_equals_the_cpu():
    g = torch.Generator().manual_seed(1)
    pairs = [(t, t.cuda()) for t in (torch.randn(3, 1 << 20, generator=g),
                                     torch.randn(1001).to(torch.bfloat16))]  # fmt: skip
    buf = torch.arange(256, dtype=torch.uint8)
    # a view into a packed GPU buffer, starting at a byte offset not divisible by 4
    pairs.append((buf[2:202].view(torch.bfloat16), buf.cuda()[2:202].view(torch.bfloat16)))
    for host, gpu in pairs:
        assert tensor_checksum(gpu, "fold") == tensor_checksum(host, "fold")
        assert tensor_checksum(gpu, "xxh3") == tensor_checksum(host, "xxh3")
