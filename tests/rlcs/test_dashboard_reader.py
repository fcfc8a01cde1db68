"""``RunReader``, the dashboard's view of a run directory: the item table from the latest
snapshot and the plotted series from the SQLite aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import curriculum_from_items, read_store
from rlcs.dashboard.reader import RunReader
from rlcs.data import Item


def test_item_table_shows_subcategories_and_the_rate_items_take_from_them(tmp_path):
    items = [
        Item(id=f"m{i}", domain="math", prompt="?", meta={"subcategory": ("add", "sub")[i % 2]})
        for i in range(200)
    ]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0, subcategory_prior=True))
    run = tmp_path / "run"
    cur.attach(run)
    idx = cur.next_batch(20)
    cur.report(cur.id_of(idx), np.where((idx % 2 == 0)[:, None], 1.0, np.arange(8) % 2))
    cur.end_iteration()
    cur.save(run)
    rows = RunReader(run).items(limit=200)["rows"]
    assert {r["subcategory"] for r in rows} == {"add", "sub"}
    drawn = set(cur.id_of(idx))
    never = [r for r in rows if r["id"] not in drawn]
    # an item never drawn shows its subcategory's rate, matching the tier it sits in
    assert {(r["subcategory"], r["pass_rate"], r["tier"]) for r in never} == {
        ("add", 1.0, "very_easy"),
        ("sub", 0.5, "medium"),
    }


def test_a_store_written_before_subcategories_reads_without_them(tmp_path):
    import sqlite3

    cur = curriculum_from_items([Item(id="a", domain="math", prompt="?")], CurriculumConfig())
    cur.attach(tmp_path)
    cur.next_batch(1)
    cur.end_iteration()
    path = tmp_path / "curriculum" / "aggregates.sqlite"
    cur.store.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE subcategories")
    stored = read_store(path)
    assert stored["subcategories"] == [] and len(stored["iterations"]) == 1
    series = RunReader(tmp_path).series()
    assert series["subcategories"] == {} and series["subcategory_rates"] == {}

    # a store whose table predates the sampler's rate gains the column when a run reopens it
    from rlcs.curriculum.store import AggregateStore

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE subcategories (iteration INTEGER NOT NULL, subcategory TEXT "
                   "NOT NULL, domain TEXT NOT NULL, rollouts INTEGER NOT NULL, successes "
                   "INTEGER NOT NULL, PRIMARY KEY (iteration, subcategory))")  # fmt: skip
    store = AggregateStore(path)
    row = dict(stored["iterations"][0], iteration=2)
    sub = {"subcategory": "math/add", "domain": "math", "rollouts": 8, "successes": 6}
    store.write_iteration(row, [], [dict(sub, rate=0.7)])
    store.close()
    assert read_store(path)["subcategories"] == [dict(sub, iteration=2, rate=0.7)]


def test_series_of_a_long_run_adds_up_every_row(tmp_path):
    """2,000 iterations of 4 domains, 6 tiers and 8 subcategories, summed per tier and domain.
    (The per-iteration lists were once built again for every row read: 10 s and more a poll
    at 10,000 iterations; the speed is not timed here.)"""
    n, domains = 2_000, ["math", "ocr", "chart", "gui"]
    tiers = ["very_hard", "hard", "medium", "easy", "very_easy", "unseen"]
    iterations = [{"iteration": i, "expansion_ratio": 2.0, "expansion_ema": 2.0,
                   "valid_fraction": 0.5, "pass_at_k": 0.75, "mean_pass_rate": 0.5,
                   "histogram": [1] * 20} for i in range(1, n + 1)]  # fmt: skip
    rows = [{"iteration": i, "domain": d, "tier": t, "population": 10, "sampled": 2,
             "rollouts": 16, "successes": 4 + tiers.index(t)}
            for i in range(1, n + 1) for d in domains for t in tiers]  # fmt: skip
    subs = [{"iteration": i, "subcategory": f"{d}/{k}", "domain": d, "rollouts": 8,
             "successes": 2 if k == "a" else 6, "rate": None if i % 2 else 0.5}
            for i in range(1, n + 1) for d in domains for k in "ab"]  # fmt: skip
    reader = RunReader(tmp_path)
    reader.store = lambda: {"meta": {"tiers": tiers, "domains": domains},
                            "iterations": iterations, "tiers": rows, "subcategories": subs}  # fmt: skip
    series = reader.series()
    assert series["population"]["easy"] == [40] * n
    assert series["pass_rate"]["all"]["hard"] == [5 / 16] * n
    assert series["pass_rate"]["ocr"]["very_easy"] == [8 / 16] * n
    assert series["subcategories"]["gui/a"] == [0.25] * n
    assert series["subcategory_rates"]["gui/b"] == [None] + [0.5] * (n - 1)


def test_item_search_ignores_case_beyond_ascii_and_a_nul_finds_nothing(tmp_path):
    ids = ["Café-1", "CAFÉ-2", "tea-3", "ÉCLAIR-4"]
    items = [Item(id=i, domain="ocr", prompt="?") for i in ids]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0))
    run = tmp_path / "run"
    cur.attach(run)
    cur.save(run)
    reader = RunReader(run)

    def found(q: str) -> set[str]:
        return {r["id"] for r in reader.items(q=q)["rows"]}

    assert found("café") == {"Café-1", "CAFÉ-2"}
    assert found("é") == {"Café-1", "CAFÉ-2", "ÉCLAIR-4"}
    assert found("TEA") == {"tea-3"}
    assert found("\x00") == set()  # it matched every id: NumPy drops the bytes' NUL padding
    assert found("a\x00") == set()


def test_without_ids_a_search_reads_an_index_and_any_other_text_finds_nothing(tmp_path):
    """A snapshot of a sampler made without ids names its items by index; a query of
    thousands of digits (more than int() reads) finds nothing instead of failing."""
    cur = curriculum_from_items([Item(id=f"x{i}", domain="math", prompt="?") for i in range(12)])
    run = tmp_path / "run"
    cur.attach(run)
    cur.save(run)
    for ids in run.rglob("ids.npy"):
        ids.unlink()
    reader = RunReader(run)
    assert [r["id"] for r in reader.items(q="11")["rows"]] == ["11"]
    for q in ("12", "1" * 5000, "x1"):
        assert reader.items(q=q)["rows"] == []


def test_item_table_sorts_by_a_column_with_ties_in_item_order_and_no_rate_last(tmp_path):
    ids = ["b", "a", "d", "c", "e"]
    items = [
        Item(
            id=i,
            domain=("ocr", "math")[k % 2],
            prompt="?",
            difficulty=(0.9, 0.2, 0.9, None, 0.5)[k],
        )
        for k, i in enumerate(ids)
    ]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0))
    run = tmp_path / "run"
    cur.attach(run)
    cur.save(run)
    reader = RunReader(run)

    def order(sort: str, desc: bool = False, **kw) -> list[str]:
        return [r["id"] for r in reader.items(sort=sort, desc=desc, **kw)["rows"]]

    assert order("") == ids
    assert order("id") == ["a", "b", "c", "d", "e"]
    assert order("id", desc=True) == ["e", "d", "c", "b", "a"]
    # pass rates 0.9, 0.2, 0.9, none, 0.5: ties keep item order, none is last both ways
    assert order("pass_rate") == ["a", "e", "b", "d", "c"]
    assert order("pass_rate", desc=True) == ["b", "d", "e", "a", "c"]
    assert order("domain") == ["a", "c", "b", "d", "e"]  # math before ocr, by name
    assert order("pass_rate", desc=True, limit=2, offset=1) == ["d", "e"]  # the page after sorting
    with pytest.raises(ValueError, match="sort must be one of id, domain, tier"):
        reader.items(sort="colour")


@pytest.mark.parametrize(
    ("damage", "named"),
    [("missing", "missing tier.npy"), ("short", "last_seen.npy do not match its 40 items")],
)
def test_a_snapshot_missing_an_array_or_with_one_too_short_is_named_not_a_traceback(
    tmp_path, damage, named
):
    """A snapshot whose arrays all load but do not make a whole state (one deleted, one of the
    wrong length) is named above the item table, as a truncated file is, instead of the item
    table's request failing with a KeyError or an IndexError."""
    items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(40)]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0))
    run = tmp_path / "run"
    cur.attach(run)
    idx = cur.next_batch(8)
    cur.report(cur.id_of(idx), np.ones((len(idx), 4)))
    cur.end_iteration()
    snap = cur.save(run)
    if damage == "missing":
        (snap / "tier.npy").unlink()
    else:
        np.save(snap / "last_seen.npy", cur.last_seen[:10])
    reader = RunReader(run)
    summary = reader.summary()
    assert summary["snapshot_iteration"] is None
    assert named in summary["snapshot_error"] and str(snap) in summary["snapshot_error"]
    for sort in ("", "last_seen", "pass_rate"):
        page = reader.items(limit=50, sort=sort)
        assert page["total"] == 0 and page["rows"] == []
        assert named in page["snapshot_error"]
    # the curves, from the store, are still drawn
    assert reader.series()["iterations"] == [1]


def _long_store(run, n: int) -> None:
    """An aggregates store of ``n`` iterations of 4 domains and 6 tiers, written as a sampler
    writes it."""
    from rlcs.curriculum.store import AggregateStore

    domains, tiers = ["math", "ocr", "chart", "gui"], ["t0", "t1", "t2", "t3", "t4", "unseen"]
    store = AggregateStore(run / "curriculum" / "aggregates.sqlite")
    store.set_meta(policy="rlcs", num_items=900, domains=domains, tiers=tiers)
    for i in range(1, n + 1):
        row = {"iteration": i, "time": 1000.0 + i, "policy": "rlcs", "sampled": 48, "groups": 48,
               "valid_groups": 20, "valid_fraction": 0.4, "pass_at_k": 0.75,
               "expansion_ratio": 2.0, "expansion_ema": 2.0, "mean_pass_rate": 0.5,
               "rejected": 0, "histogram": [i] * 20}  # fmt: skip
        rows = [{"iteration": i, "domain": d, "tier": t, "population": 10, "sampled": 2,
                 "groups": 2, "rollouts": 16, "successes": 5, "pass_rate": 0.3, "weight": 1.0}
                for d in domains for t in tiers]  # fmt: skip
        store.write_iteration(row, rows)
    store.close()


def test_summary_is_read_from_the_stores_metadata_and_last_iteration(tmp_path, monkeypatch):
    """The page polls the summary every few seconds: it is what the whole store says of the run
    (checked against ``read_store``), read with as much work at 2,000 iterations as at 10
    (SQLite's virtual-machine steps are counted, not timed)."""
    from rlcs.curriculum import store as store_module

    steps = []
    opened = store_module._open_read_only

    def counted(path):
        db = opened(path)
        steps.append(0)

        def step():
            steps[-1] += 1
            return 0

        db.set_progress_handler(step, 1)
        return db

    monkeypatch.setattr(store_module, "_open_read_only", counted)
    work = {}
    for n in (10, 2_000):
        run = tmp_path / f"run{n}"
        _long_store(run, n)
        whole = read_store(run / "curriculum" / "aggregates.sqlite")
        read_all = steps.pop()
        summary = RunReader(run).summary()
        (work[n],) = steps
        steps.clear()
        last, meta = whole["iterations"][-1], whole["meta"]
        assert summary == {
            "run_dir": str(run), "run": run.name, "exists": True, "policy": meta["policy"],
            "num_items": meta["num_items"], "domains": meta["domains"], "tiers": meta["tiers"],
            "iteration": last["iteration"], "updated": last["time"], "snapshot_iteration": None,
            "metrics_step": None, "store_error": None, "snapshot_error": None,
        }  # fmt: skip
        assert (last["iteration"], last["time"]) == (n, 1000.0 + n)
        assert work[n] * 20 < read_all  # not the whole store, even at 10 iterations
    assert work[2_000] == work[10]


def test_summary_does_not_read_the_tier_rows_and_the_series_names_their_damage(tmp_path):
    """A store whose tier rows cannot be read (their table's root page overwritten): the
    summary, which reads only the metadata and the last iteration, is served in full; the
    series, which reads every row, names the damage."""
    import sqlite3

    run = tmp_path / "run"
    _long_store(run, 30)
    path = run / "curriculum" / "aggregates.sqlite"
    with sqlite3.connect(path) as db:
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tiers'").fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    data = bytearray(path.read_bytes())
    data[(root - 1) * size : root * size] = b"\xff" * size
    path.write_bytes(bytes(data))
    with pytest.raises(sqlite3.DatabaseError):
        read_store(path)
    reader = RunReader(run)
    summary = reader.summary()
    assert summary["store_error"] is None
    assert (summary["iteration"], summary["updated"], summary["num_items"]) == (30, 1030.0, 900)
    series = reader.series()
    assert series["iterations"] == []
    assert series["store_error"].startswith(f"{path} cannot be read (")
