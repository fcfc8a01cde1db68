"""The SQLite store of per-iteration aggregates that the dashboard reads.

WAL mode lets the dashboard read while the sampler writes. Rows are keyed by iteration and
written with ``INSERT OR REPLACE``; a sampler that attaches to the store first drops the rows of
the iterations after its own (an attempt that went further), which it replays.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STORE_NAME = "aggregates.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS iterations (
    iteration INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    policy TEXT NOT NULL,
    sampled INTEGER NOT NULL,
    groups INTEGER NOT NULL,
    valid_groups INTEGER NOT NULL,
    valid_fraction REAL,
    pass_at_k REAL,
    expansion_ratio REAL NOT NULL,
    expansion_ema REAL NOT NULL,
    mean_pass_rate REAL,
    rejected INTEGER NOT NULL,
    histogram TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tiers (
    iteration INTEGER NOT NULL,
    domain TEXT NOT NULL,
    tier TEXT NOT NULL,
    population INTEGER NOT NULL,
    sampled INTEGER NOT NULL,
    groups INTEGER NOT NULL,
    rollouts INTEGER NOT NULL,
    successes INTEGER NOT NULL,
    pass_rate REAL,
    weight REAL NOT NULL,
    PRIMARY KEY (iteration, domain, tier)
);
CREATE TABLE IF NOT EXISTS subcategories (
    iteration INTEGER NOT NULL,
    subcategory TEXT NOT NULL,
    domain TEXT NOT NULL,
    rollouts INTEGER NOT NULL,
    successes INTEGER NOT NULL,
    rate REAL,
    PRIMARY KEY (iteration, subcategory)
);
"""

_ITER_COLS = [
    "iteration",
    "time",
    "policy",
    "sampled",
    "groups",
    "valid_groups",
    "valid_fraction",
    "pass_at_k",
    "expansion_ratio",
    "expansion_ema",
    "mean_pass_rate",
    "rejected",
    "histogram",
]
_TIER_COLS = [
    "iteration",
    "domain",
    "tier",
    "population",
    "sampled",
    "groups",
    "rollouts",
    "successes",
    "pass_rate",
    "weight",
]


class AggregateStore:
    """Writer side: one connection held by the sampler."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        # a store begun before the sampler's subcategory rate was kept (a resumed run)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(subcategories)")}
        if "rate" not in columns:
            self._db.execute("ALTER TABLE subcategories ADD COLUMN rate REAL")
        self._db.commit()

    def set_meta(self, **values: Any) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def write_iteration(
        self,
        row: dict[str, Any],
        tiers: list[dict[str, Any]],
        subcategories: Sequence[dict[str, Any]] = (),
    ) -> None:
        """One iteration's row, its (domain, tier) rows and, when items name subcategories,
        the rollouts and successes of each subcategory drawn in it, and the rate the sampler
        holds for it after the iteration (with ``subcategory_prior``; else None)."""
        row = dict(row, histogram=json.dumps(row["histogram"]))
        with self._db:
            self._db.execute(
                f"INSERT OR REPLACE INTO iterations VALUES ({','.join('?' * len(_ITER_COLS))})",
                [row[c] for c in _ITER_COLS],
            )
            self._db.execute("DELETE FROM tiers WHERE iteration = ?", (row["iteration"],))
            self._db.executemany(
                f"INSERT INTO tiers VALUES ({','.join('?' * len(_TIER_COLS))})",
                [[t[c] for c in _TIER_COLS] for t in tiers],
            )
            self._db.execute("DELETE FROM subcategories WHERE iteration = ?", (row["iteration"],))
            self._db.executemany(
                "INSERT INTO subcategories (iteration, subcategory, domain, rollouts, successes, "
                "rate) VALUES (?, ?, ?, ?, ?, ?)",
                [[row["iteration"], r["subcategory"], r["domain"], r["rollouts"], r["successes"],
                  r.get("rate")] for r in subcategories],
            )  # fmt: skip

    def drop_after(self, iteration: int) -> None:
        """Remove the rows of every iteration after ``iteration``: a sampler at that iteration
        replays them, and until it does they are those of an attempt that went further."""
        with self._db:
            for table in ("iterations", "tiers", "subcategories"):
                self._db.execute(f"DELETE FROM {table} WHERE iteration > ?", (iteration,))

    def close(self) -> None:
        self._db.close()


def read_store(path: str | Path) -> dict[str, Any]:
    """Everything the dashboard plots, read through a read-only connection."""
    path = Path(path)
    if not path.is_file():
        return {"meta": {}, "iterations": [], "tiers": [], "subcategories": []}
    db = _open_read_only(path)
    try:
        meta = {r["key"]: json.loads(r["value"]) for r in db.execute("SELECT * FROM meta")}
        iterations = [dict(r) for r in db.execute("SELECT * FROM iterations ORDER BY iteration")]
        for r in iterations:
            r["histogram"] = json.loads(r["histogram"])
        tiers = [dict(r) for r in db.execute("SELECT * FROM tiers ORDER BY iteration")]
        try:
            query = "SELECT * FROM subcategories ORDER BY iteration, subcategory"
            subcategories = [dict(r) for r in db.execute(query)]
        except sqlite3.OperationalError:  # a store written before subcategories were kept
            subcategories = []
    finally:
        db.close()
    return {"meta": meta, "iterations": iterations, "tiers": tiers, "subcategories": subcategories}


def read_store_head(path: str | Path) -> dict[str, Any]:
    """The store's metadata and its last iteration's row without its histogram (None before
    the first): what the dashboard polls for. Reads those rows only, through the iterations'
    primary key, however long the run."""
    path = Path(path)
    if not path.is_file():
        return {"meta": {}, "last": None}
    columns = ", ".join(c for c in _ITER_COLS if c != "histogram")
    db = _open_read_only(path)
    try:
        meta = {r["key"]: json.loads(r["value"]) for r in db.execute("SELECT * FROM meta")}
        query = f"SELECT {columns} FROM iterations ORDER BY iteration DESC LIMIT 1"
        last = db.execute(query).fetchone()
    finally:
        db.close()
    return {"meta": meta, "last": None if last is None else dict(last)}


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store at ``path``, its rows read as ``sqlite3.Row``."""
    # as a URI, percent-encoded: a folder named run#3 or exp?1 would otherwise end the path
    # early (and "exp?1" would open, even create, the file "exp" read-write)
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    db.row_factory = sqlite3.Row
    return db
