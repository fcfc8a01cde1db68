"""Index pools, one per (domain, tier), so that a batch costs O(batch) and never O(N).

Each pool is an int32 array of item indices with spare capacity; ``pos[i]`` is item ``i``'s
slot in its pool. Removal swaps the pool's tail into the hole, so moves are O(1) per item and
are done for a whole report at once with numpy.
"""

from __future__ import annotations

import numpy as np


class TierPools:
    """Pools keyed by ``domain * num_tiers + tier``."""

    def __init__(self, keys: np.ndarray, num_keys: int):
        """Build from each item's pool key (a ``uint16``-sized array of length N)."""
        keys = np.asarray(keys, dtype=np.uint16)
        order = np.argsort(keys, kind="stable").astype(np.int32)
        sizes = np.bincount(keys, minlength=num_keys).astype(np.int64)
        self._init_from(order, sizes, len(keys))

    @classmethod
    def from_flat(cls, flat: np.ndarray, sizes: np.ndarray, n_items: int) -> TierPools:
        """Rebuild saved pools (their concatenation in key order) exactly, slot for slot."""
        self = cls.__new__(cls)
        self._init_from(np.asarray(flat, dtype=np.int32), np.asarray(sizes, np.int64), n_items)
        return self

    def _init_from(self, flat: np.ndarray, sizes: np.ndarray, n_items: int) -> None:
        self.sizes = sizes.copy()
        self.pos = np.empty(n_items, dtype=np.int32)
        self.arrays: list[np.ndarray] = []
        start = 0
        for size in self.sizes.tolist():
            pool = np.empty(max(16, size + size // 8), dtype=np.int32)
            pool[:size] = flat[start : start + size]
            self.pos[pool[:size]] = np.arange(size, dtype=np.int32)
            self.arrays.append(pool)
            start += size

    def members(self, key: int) -> np.ndarray:
        return self.arrays[key][: self.sizes[key]]

    def flat(self) -> np.ndarray:
        """All pools concatenated in key order, for saving."""
        return np.concatenate([self.members(k) for k in range(len(self.arrays))])

    def nbytes(self) -> int:
        return self.pos.nbytes + sum(a.nbytes for a in self.arrays)

    def move(self, items: np.ndarray, old_keys: np.ndarray, new_keys: np.ndarray) -> None:
        """Move distinct ``items`` from their ``old_keys`` pools to their ``new_keys`` pools."""
        for key in np.unique(old_keys).tolist():
            self._remove(key, items[old_keys == key])
        for key in np.unique(new_keys).tolist():
            self._append(key, items[new_keys == key])

    def _remove(self, key: int, items: np.ndarray) -> None:
        pool, size = self.arrays[key], int(self.sizes[key])
        new_size = size - len(items)
        slots = self.pos[items]
        tail_ids = pool[new_size:size]
        leaving = np.zeros(len(tail_ids), dtype=bool)
        tail_slots = slots[slots >= new_size]
        leaving[tail_slots - new_size] = True
        survivors = tail_ids[~leaving]
        holes = np.sort(slots[slots < new_size])
        pool[holes] = survivors
        self.pos[survivors] = holes
        self.sizes[key] = new_size

    def _append(self, key: int, items: np.ndarray) -> None:
        pool, size = self.arrays[key], int(self.sizes[key])
        need = size + len(items)
        if need > len(pool):
            grown = np.empty(max(need, len(pool) * 3 // 2), dtype=np.int32)
            grown[:size] = pool[:size]
            self.arrays[key] = pool = grown
        pool[size:need] = items
        self.pos[items] = np.arange(size, need, dtype=np.int32)
        self.sizes[key] = need

    def sample_many(
        self, keys: np.ndarray, counts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """``counts[j]`` distinct members of pool ``keys[j]``, for all pools in one go.

        Sparse draws (count well under the pool size) share one vectorised uniform draw, with
        repeats inside a pool drawn again until none is left, which gives a uniform subset.
        Near-full pools are permuted. A handful of numpy calls, however many pools.
        """
        keys = np.asarray(keys, np.int64)
        counts = np.minimum(np.asarray(counts, np.int64), self.sizes[keys])
        dense = counts * 4 >= self.sizes[keys]
        parts = [
            self.members(k)[rng.permutation(int(self.sizes[k]))[:c]]
            for k, c in zip(keys[dense].tolist(), counts[dense].tolist(), strict=True)
        ]
        sparse_keys, sparse_counts = keys[~dense], counts[~dense]
        if len(sparse_keys):
            owner = np.repeat(np.arange(len(sparse_keys)), sparse_counts)
            span = self.sizes[sparse_keys][owner]
            pos = (rng.random(len(owner)) * span).astype(np.int64)
            while True:
                _, first = np.unique((owner << 32) | pos, return_index=True)
                repeat = np.ones(len(pos), dtype=bool)
                repeat[first] = False
                if not repeat.any():
                    break
                pos[repeat] = (rng.random(int(repeat.sum())) * span[repeat]).astype(np.int64)
            ends = np.cumsum(sparse_counts)
            for j, key in enumerate(sparse_keys.tolist()):
                parts.append(self.members(key)[pos[ends[j] - sparse_counts[j] : ends[j]]])
        if not parts:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(parts).astype(np.int64)

    def sample(
        self,
        key: int,
        count: int,
        rng: np.random.Generator,
        taken: np.ndarray | None = None,
        iteration: int = 0,
    ) -> np.ndarray:
        """``count`` distinct members of a pool, skipping items with ``taken[i] == iteration``.

        The first draw of an iteration excludes nothing and costs O(count) (Floyd's method in
        ``Generator.choice``); later draws reject already-taken items and fall back to a scan
        of the pool only when most of it is taken.
        """
        members = self.members(key)
        size = len(members)
        if count <= 0 or size == 0:
            return np.empty(0, dtype=np.int64)
        if taken is None:
            if count >= size:
                return members[rng.permutation(size)].astype(np.int64)
            return members[rng.choice(size, count, replace=False)].astype(np.int64)
        got = np.empty(0, dtype=np.int64)
        for _ in range(4):
            want = min(size, 2 * (count - len(got)) + 8)
            draw = members[rng.choice(size, want, replace=False)].astype(np.int64)
            draw = draw[taken[draw] != iteration]
            draw = draw[~np.isin(draw, got)]
            got = np.concatenate([got, draw])[:count]
            if len(got) == count:
                return got
        free = members[taken[members] != iteration].astype(np.int64)
        free = free[~np.isin(free, got)]
        extra = free[rng.permutation(len(free))[: count - len(got)]]
        return np.concatenate([got, extra])
