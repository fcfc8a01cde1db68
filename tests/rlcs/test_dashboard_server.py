"""The dashboard's JSON API, served for real under uvicorn on 127.0.0.1 (or through FastAPI's
test client) over a run directory that the real ``Curriculum`` wrote; no browser."""

from __future__ import annotations

import shutil
import sqlite3

import httpx
import pytest

from rlcs.curriculum import read_store

TOKEN = "s3cret-dashboard-token"  # the token of conftest.py's DashboardHarness


def test_api_requires_the_token_and_reports_the_run(server):
    assert httpx.get(f"{server}/api/summary").status_code == 401
    assert httpx.get(f"{server}/?token=wrong").status_code == 401
    summary = httpx.get(
        f"{server}/api/summary", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert summary["iteration"] == 40 and summary["num_items"] == 1200
    assert summary["domains"] == ["math", "chart", "ocr"]
    # no API description to read without the token, and a health probe that HEAD answers
    assert httpx.get(f"{server}/openapi.json").status_code == 404
    assert httpx.head(f"{server}/healthz").status_code == 200
    js = httpx.get(f"{server}/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000  # served locally, no CDN


def test_finished_run_directory_copied_elsewhere_still_serves(run_dir, tmp_path):
    from fastapi.testclient import TestClient

    from rlcs.dashboard.app import create_app

    copy = tmp_path / "copy"
    shutil.copytree(run_dir[0], copy)
    client = TestClient(create_app(copy))
    series = client.get("/api/series").json()
    assert series["iterations"][-1] >= 40
    assert set(series["pass_rate"]) == {"all", "math", "chart", "ocr"}
    items = client.get("/api/items", params={"q": "math-000", "limit": 5}).json()
    assert [r["id"] for r in items["rows"]] == [f"math-000{i}" for i in range(5)]


def test_item_table_pages_through_every_match_and_refuses_bad_bounds(server):
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def page(**params) -> httpx.Response:
        return httpx.get(f"{server}/api/items", params=params, headers=auth)

    seen = []
    for offset in range(0, 1200, 500):
        data = page(offset=offset, limit=500).json()
        assert data["total"] == 1200
        seen += [r["id"] for r in data["rows"]]
    assert seen == [f"{d}-{i:04d}" for d in ("math", "chart", "ocr") for i in range(400)]
    by_id = page(sort="id", desc="true", limit=3).json()
    assert [r["id"] for r in by_id["rows"]] == ["ocr-0399", "ocr-0398", "ocr-0397"]
    past = page(offset=1200, limit=25).json()
    assert past["rows"] == [] and past["total"] == 1200
    ocr = page(domain="ocr", offset=390, limit=25).json()
    assert [r["id"] for r in ocr["rows"]] == [f"ocr-{i:04d}" for i in range(390, 400)]
    # a page is 1 to 1,000 rows from offset 0 on; anything else is refused naming the bound
    for params, problem in [
        ({"limit": 0}, "greater than or equal to 1"),
        ({"limit": 1001}, "less than or equal to 1000"),
        ({"limit": "ten"}, "valid integer"),
        ({"offset": -1}, "greater than or equal to 0"),
        ({"offset": "1.5"}, "valid integer"),
        ({"sort": "colour"}, "should match pattern"),
        ({"desc": "maybe", "sort": "id"}, "valid boolean"),
    ]:
        r = page(**params)
        assert r.status_code == 422, params
        (detail,) = r.json()["detail"]
        assert detail["loc"] == ["query", next(iter(params))] and problem in detail["msg"]


def test_a_truncated_aggregates_store_is_named_and_the_rest_still_served(
    truncated_store_run, dashboard
):
    run, store, whole = truncated_store_run
    with pytest.raises(sqlite3.DatabaseError):
        read_store(store)
    with dashboard.serve(run) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        summary = httpx.get(f"{url}/api/summary", headers=auth)
        assert summary.status_code == 200
        summary = summary.json()
        assert summary["store_error"] == (
            f"{store} cannot be read (database disk image is malformed): the curriculum's "
            "plots, drawn from it, are not shown; the header and the item table come from the "
            f"run's latest saved state in {run / 'curriculum'} (iteration 30), which is read "
            "separately."
        )
        # the header from the saved state
        assert summary["iteration"] == 30 and summary["num_items"] == 300
        assert summary["domains"] == ["math"] and summary["policy"] == "rlcs"
        series = httpx.get(f"{url}/api/series", headers=auth)
        assert series.status_code == 200
        series = series.json()
        assert series["store_error"] == summary["store_error"]
        assert series["iterations"] == [] and series["histogram"] == []
        assert series["training"]["steps"] == list(range(1, 31))  # from metrics.jsonl
        items = httpx.get(f"{url}/api/items", params={"limit": 3}, headers=auth)
        assert items.status_code == 200 and items.json()["total"] == 300
        # a store that reads again is served again
        store.write_bytes(whole)
        summary = httpx.get(f"{url}/api/summary", headers=auth).json()
        assert summary["store_error"] is None and summary["iteration"] == 30


def test_a_damaged_snapshot_is_named_and_the_rest_still_served(damaged_snapshot_run, dashboard):
    run, snap = damaged_snapshot_run
    with dashboard.serve(run) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        summary = httpx.get(f"{url}/api/summary", headers=auth)
        assert summary.status_code == 200
        summary = summary.json()
        problem = summary["snapshot_error"]
        assert problem.startswith(f"curriculum snapshot {snap} is damaged (ema.npy: ")
        assert "; nothing was changed or removed; older snapshots: state-00000020-" in problem
        # the header and the curriculum's plots from the store
        assert summary["iteration"] == 30 and summary["num_items"] == 300
        assert summary["store_error"] is None and summary["snapshot_iteration"] is None
        series = httpx.get(f"{url}/api/series", headers=auth).json()
        assert series["iterations"] == list(range(1, 31))
        items = httpx.get(f"{url}/api/items", headers=auth)
        assert items.status_code == 200
        assert items.json() == {
            "total": 0,
            "rows": [],
            "snapshot_iteration": None,
            "snapshot_error": problem,
        }
