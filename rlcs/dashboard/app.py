"""The dashboard's FastAPI app: one page, a JSON API over the run directory, local assets.

The charting library is the ``plotly.min.js`` shipped inside the ``plotly`` package and served
from here, so the page needs nothing from the internet.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse

from rlcs.dashboard.reader import SORT_KEYS, RunReader

#: the item table's sort keys, or none (the items' own order)
SORT_PATTERN = "^(" + "|".join(("", *SORT_KEYS)) + ")$"

STATIC = Path(__file__).parent / "static"


def plotly_js() -> Path:
    """The plotly.js bundle inside the installed ``plotly`` package."""
    try:
        import plotly
    except ImportError:
        raise RuntimeError(
            "the dashboard needs the plotly package for its charts: pip install 'rlcs[dashboard]'"
        ) from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RuntimeError(f"plotly is installed but {path} is missing")
    return path


def create_app(run_dir: str | Path, token: str | None = None) -> FastAPI:
    """The dashboard for one run directory; with ``token``, every data route requires it."""
    reader = RunReader(run_dir)
    js = plotly_js()
    # no API docs: a token-protected dashboard would otherwise list its routes to anyone
    app = FastAPI(
        title="rlcs curriculum dashboard", docs_url=None, redoc_url=None, openapi_url=None
    )

    def authorize(request: Request) -> None:
        if token is None:
            return
        given = request.query_params.get("token", "")
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            given = header[7:]
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong dashboard token")

    auth = [Depends(authorize)]

    @app.get("/", response_class=HTMLResponse, dependencies=auth)
    def index() -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    @app.get("/static/plotly.min.js")
    def plotly_bundle() -> FileResponse:
        return FileResponse(js, media_type="application/javascript")

    @app.get("/static/{name}")
    def asset(name: str) -> FileResponse:
        path = STATIC / name
        if name not in {"dashboard.js", "dashboard.css"} or not path.is_file():
            raise HTTPException(status_code=404)
        return FileResponse(path)

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    def healthz() -> dict:
        return {"ok": True}

    @app.get("/api/summary", dependencies=auth)
    def summary() -> dict:
        return reader.summary()

    @app.get("/api/series", dependencies=auth)
    def series() -> dict:
        return reader.series()

    @app.get("/api/items", dependencies=auth)
    def items(
        q: str = "",
        domain: str = "",
        tier: str = "",
        offset: int = Query(0, ge=0),
        limit: int = Query(50, ge=1, le=1000),
        sort: str = Query("", pattern=SORT_PATTERN),
        desc: bool = False,
    ) -> dict:
        return reader.items(
            q=q, domain=domain, tier=tier, offset=offset, limit=limit, sort=sort, desc=desc
        )

    return app
