"""Reads a run directory for the dashboard: the SQLite aggregates and the latest snapshot.

Only files are read, never the sampler process, so the same code serves a live run (the
writer keeps appending) and a finished one. Snapshot arrays are memory-mapped, so a table
query over 10M items touches only the columns it filters on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from rlcs.curriculum import (
    CURRICULUM_DIR,
    STORE_NAME,
    CorruptSnapshotError,
    SnapshotError,
    merged_pass_rate,
    read_store,
)
from rlcs.curriculum.persistence import read_whole_snapshot
from rlcs.curriculum.snapshot import LATEST
from rlcs.curriculum.store import read_store_head
from rlcs.dashboard.metrics import MetricsLog


class RunReader:
    """One run directory; caches the memory-mapped snapshot until ``LATEST`` moves."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / CURRICULUM_DIR
        self._snap_key: str | None = None
        self._snap: tuple[dict[str, np.ndarray], dict[str, Any]] | None = None
        #: why the latest snapshot cannot be read (a damaged file), or None
        self.snapshot_error: str | None = None
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")

    def store(self) -> dict[str, Any]:
        """The SQLite aggregates; one that cannot be read (a truncated or damaged file) reads as
        empty, with ``error`` saying so, so that the rest of the run is still served."""
        path = self.folder / STORE_NAME
        try:
            return dict(read_store(path), error=None)
        except sqlite3.DatabaseError as e:
            return {"meta": {}, "iterations": [], "tiers": [], "subcategories": [], "error": str(e)}

    def store_head(self) -> dict[str, Any]:
        """The aggregates' metadata and last iteration's row (None before the first), all the
        page's header polls for: a read that does not grow with the run, unlike ``store``'s.
        An unreadable store reads as ``store`` reads it."""
        try:
            return dict(read_store_head(self.folder / STORE_NAME), error=None)
        except sqlite3.DatabaseError as e:
            return {"meta": {}, "last": None, "error": str(e)}

    def store_error(self, error: str | None) -> str | None:
        """What the page says in place of the curriculum's plots when the store is unreadable."""
        if error is None:
            return None
        snap = self.snapshot()
        if snap:
            saved = (
                "the header and the item table come from the run's latest saved state in "
                f"{self.folder} (iteration {snap[1]['iteration']}), which is read separately"
            )
        elif self.snapshot_error:
            saved = "nor can the run's latest saved state (see the item table)"
        else:
            saved = "the run has no saved state to show either"
        return (
            f"{self.folder / STORE_NAME} cannot be read ({error}): the curriculum's plots, drawn "
            f"from it, are not shown; {saved}."
        )

    def snapshot(self) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        pointer = self.folder / LATEST
        key = pointer.read_text().strip() if pointer.is_file() else None
        if key != self._snap_key or self._snap is None:
            snap, error = None, None
            try:
                snap = read_whole_snapshot(self.folder, mmap=True)
            except (SnapshotError, FileNotFoundError):
                pass
            except CorruptSnapshotError as e:  # the page names it; the rest is still served
                error = str(e)
            self._snap, self.snapshot_error, self._snap_key = snap, error, key
        return self._snap

    def summary(self) -> dict[str, Any]:
        """The page's header and what it polls for changes, every few seconds: read from the
        store's metadata and last iteration only."""
        store = self.store_head()
        snap = self.snapshot()
        last = store["last"]
        iteration = last["iteration"] if last else 0
        if store.get("error") and snap:  # the iteration the saved state is at, the last known
            iteration = snap[1]["iteration"]
        return {
            "run_dir": str(self.run_dir),
            "run": self.run_dir.name,
            # a demo's RL stage before RL begins, or a run directory removed while served
            "exists": self.run_dir.is_dir(),
            "policy": store["meta"].get("policy")
            or (snap[1]["config"]["policy"] if snap else None),
            "num_items": store["meta"].get("num_items") or (snap[1]["num_items"] if snap else 0),
            "domains": store["meta"].get("domains") or (snap[1]["domain_names"] if snap else []),
            "tiers": store["meta"].get("tiers") or (snap[1]["tier_names"] if snap else []),
            "iteration": iteration,
            "updated": last["time"] if last else None,
            "snapshot_iteration": snap[1]["iteration"] if snap else None,
            # the last step of metrics.jsonl: a held-out evaluation or an iteration's figures
            # can arrive after the curriculum's record of that iteration
            "metrics_step": self.metrics.last_step(),
            "store_error": self.store_error(store.get("error")),
            "snapshot_error": self.snapshot_error,
        }

    def series(self) -> dict[str, Any]:
        """Per-iteration curves, shaped for plotting: one list per quantity."""
        store = self.store()
        its = store["iterations"]
        tiers = store["meta"].get("tiers", [])
        domains = store["meta"].get("domains", [])
        x = [r["iteration"] for r in its]
        pos = {it: i for i, it in enumerate(x)}
        population = {t: [0] * len(x) for t in tiers}
        sampled = {t: [0] * len(x) for t in tiers}
        sums: dict[tuple[str, str], list[list[int]]] = {}
        for r in store["tiers"]:
            i = pos.get(r["iteration"])
            if i is None:
                continue
            population[r["tier"]][i] += r["population"]
            sampled[r["tier"]][i] += r["sampled"]
            for dom in (r["domain"], "all"):
                # not setdefault: its default, two lists as long as the run, would be built for
                # every row (quadratic in the iterations: 10 s a read for a run of 10,000)
                acc = sums.get((dom, r["tier"]))
                if acc is None:
                    acc = sums[(dom, r["tier"])] = [[0] * len(x), [0] * len(x)]
                acc[0][i] += r["successes"]
                acc[1][i] += r["rollouts"]
        pass_rate = {
            dom: {
                t: [s / n if n else None for s, n in zip(*sums[(dom, t)], strict=True)]
                for t in tiers
                if (dom, t) in sums
            }
            for dom in ["all", *domains]
        }
        # each subcategory's pass rate in the iterations that drew it (None in the others),
        # and with subcategory_prior the rate the sampler held after them
        subcategories: dict[str, list[float | None]] = {}
        held: dict[str, list[float | None]] = {}
        for r in store.get("subcategories", []):
            i = pos.get(r["iteration"])
            if i is not None and r["rollouts"]:
                name = r["subcategory"]
                if name not in subcategories:
                    subcategories[name] = [None] * len(x)
                subcategories[name][i] = r["successes"] / r["rollouts"]
                if r.get("rate") is not None:
                    if name not in held:
                        held[name] = [None] * len(x)
                    held[name][i] = r["rate"]
        return {
            "iterations": x,
            "tiers": tiers,
            "subcategories": dict(sorted(subcategories.items())),
            "subcategory_rates": {k: _carried(v) for k, v in sorted(held.items())},
            "heldout": self.metrics.heldout(),
            "training": self.metrics.training(),
            "domains": domains,
            "population": population,
            "sampled": sampled,
            "pass_rate": pass_rate,
            "expansion_ratio": [r["expansion_ratio"] for r in its],
            "expansion_ema": [r["expansion_ema"] for r in its],
            "valid_fraction": [r["valid_fraction"] for r in its],
            "pass_at_k": [r["pass_at_k"] for r in its],
            "mean_pass_rate": [r["mean_pass_rate"] for r in its],
            "histogram": its[-1]["histogram"] if its else [],
            "store_error": self.store_error(store.get("error")),
        }

    def items(
        self,
        q: str = "",
        domain: str = "",
        tier: str = "",
        offset: int = 0,
        limit: int = 50,
        sort: str = "",
        desc: bool = False,
    ) -> dict[str, Any]:
        """A filtered page of the item table from the latest snapshot, in the items' order or
        sorted by one of ``SORT_KEYS`` (ties in the items' order; items with no pass rate
        last either way)."""
        if sort and sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
        snap = self.snapshot()
        if snap is None:
            return {
                "total": 0,
                "rows": [],
                "snapshot_iteration": None,
                "snapshot_error": self.snapshot_error,
            }
        arrays, meta = snap
        n = int(meta["num_items"])
        mask = np.ones(n, dtype=bool)
        if domain:
            names = meta["domain_names"]
            code = names.index(domain) if domain in names else -1
            mask &= arrays["domain"] == code
        if tier:
            names = meta["tier_names"]
            mask &= arrays["tier"] == (names.index(tier) if tier in names else 255)
        q = q.strip()
        if q:
            if "\x00" in q:  # no id holds one (they are refused at load)
                mask &= False
            elif "ids" in arrays:
                mask &= _id_matches(arrays["ids"], q)
            else:
                hit = np.zeros(n, dtype=bool)
                # an index, read only when it can be one (int() refuses 4,300 digits and more)
                if q.isdecimal() and len(q) <= len(str(n)) and int(q) < n:
                    hit[int(q)] = True
                mask &= hit
        matches = np.flatnonzero(mask)
        if sort:
            matches = matches[_order(arrays, meta, matches, sort, desc)]
        page = matches[offset : offset + limit]
        categories = arrays.get("category")
        rate = _pass_rates(arrays, meta, page)
        rows = []
        for j, i in enumerate(page.tolist()):
            rows.append(
                {
                    "id": arrays["ids"][i].decode() if "ids" in arrays else str(i),
                    "domain": meta["domain_names"][int(arrays["domain"][i])],
                    "tier": meta["tier_names"][int(arrays["tier"][i])],
                    "attempts": int(arrays["attempts"][i]),
                    "successes": int(arrays["successes"][i]),
                    "pass_rate": None if np.isnan(rate[j]) else round(float(rate[j]), 4),
                    "last_seen": int(arrays["last_seen"][i]),
                }
            )
            name = None if categories is None else meta["category_names"][int(categories[i])]
            if name and name != rows[-1]["domain"]:  # items without one are keyed by domain
                rows[-1]["subcategory"] = name.removeprefix(rows[-1]["domain"] + "/")
        return {"total": int(len(matches)), "rows": rows, "snapshot_iteration": meta["iteration"]}


#: the item table's columns it can be sorted by
SORT_KEYS = ("id", "domain", "tier", "attempts", "pass_rate", "last_seen")


def _pass_rates(arrays: dict[str, np.ndarray], meta: dict[str, Any], idx: np.ndarray):
    """The pass rate the sampler gives items ``idx``: their own evidence merged with the
    offline prior, or (with subcategory_prior, for an item with no evidence of its own) its
    subcategory's rate."""
    categories = arrays.get("category")
    sibling = None
    if meta["config"].get("subcategory_prior") and "category_rate" in arrays:
        codes = (arrays["domain"] if categories is None else categories)[idx]
        sibling = arrays["category_rate"][codes]
    prior = meta["config"]["offline_prior_weight"]
    return merged_pass_rate(
        arrays["offline"][idx], arrays["attempts"][idx], arrays["ema"][idx], prior, sibling
    )


def _order(
    arrays: dict[str, np.ndarray], meta: dict[str, Any], idx: np.ndarray, key: str, desc: bool
) -> np.ndarray:
    """Positions that put items ``idx`` in order of ``key``: ties in item order, items without
    a pass rate last whichever the direction."""
    missing = np.zeros(len(idx), dtype=bool)
    if key == "id":
        values = arrays["ids"][idx] if "ids" in arrays else idx
    elif key == "domain":  # by name, not by code
        rank = np.argsort(np.argsort(np.array(meta["domain_names"], dtype=object)))
        values = rank[arrays["domain"][idx]]
    elif key == "pass_rate":
        values = _pass_rates(arrays, meta, idx)
        missing = np.isnan(values)
        values = np.where(missing, 0.0, values)
    else:  # tier (hardest first, unseen last), attempts, last_seen
        values = arrays[key][idx]
    rank = np.unique(values, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return np.lexsort((idx, -rank if desc else rank, missing))


def _carried(ys: list[float | None]) -> list[float | None]:
    """The sampler keeps a subcategory's rate through the iterations that do not draw it."""
    out, last = [], None
    for y in ys:
        last = y if y is not None else last
        out.append(last)
    return out


def _id_matches(ids: np.ndarray, q: str) -> np.ndarray:
    """Which of the stored (UTF-8 bytes) ids hold ``q``, case ignored; an ASCII query is
    matched on the bytes, any other on the decoded text (bytes lower only ASCII letters)."""
    needle = q.lower()
    if needle.isascii():
        return np.char.find(np.char.lower(ids), needle.encode()) >= 0
    text = np.char.lower(np.char.decode(ids, "utf-8", "replace"))
    return np.char.find(text, needle) >= 0
