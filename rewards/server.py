"""The standalone reward server: FastAPI over a ``RewardScorer``; no Ray, torch or vLLM.

Endpoints (see docs/rewards.md): ``POST /v1/score``, ``POST /v1/score/batch``,
``GET /v1/domains``, ``GET /healthz``, ``GET /metrics`` (Prometheus), OpenAPI at ``/docs``, and
``POST /get_reward``, the OpenRLHF remote reward protocol (``--remote_rm_url``).

Scoring handlers await the worker pool through a future that its dispatcher thread resolves, so
a request waiting on a slow item holds neither a thread nor the event loop, and the pool keeps
serving the others.
"""

from __future__ import annotations

import argparse
import gc
import hmac
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import Query, Security
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.security import HTTPBearer
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from starlette.responses import Response

from rewards import argtypes, registry
from rewards.argtypes import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY_BYTES
from rewards.openrlhf import openrlhf_item, unscorable
from rewards.scoring import RewardScorer
from rewards.server_metrics import Metrics

#: The API docs' scripts and styles, served by the server itself (an offline cluster has no CDN)
DOCS_ASSETS = "/docs/assets"
OPEN_PATHS = ("/", "/healthz", "/docs", "/openapi.json", "/docs/oauth2-redirect")
SCORING = ("/v1/score", "/v1/score/batch", "/get_reward")
ROUTES = (*SCORING, "/v1/domains", "/metrics", *OPEN_PATHS)


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(DOCS_ASSETS + "/")


class ScoreRequest(BaseModel):
    domain: str = Field(examples=["math"])
    response: str = Field(
        examples=["<think>…</think><answer><|begin_of_box|>1/2<|end_of_box|></answer>"]
    )
    answer: Any = Field(examples=["0.5"], description="str, a list of boxes, or an action object")
    options: dict[str, Any] = Field(default_factory=dict, examples=[{"format": "glm"}])


class ScoreResponse(BaseModel):
    reward: float
    format_ok: bool
    extracted: str | None
    error: str | None
    detail: str | None
    domain: str
    cached: bool


class BatchRequest(BaseModel):
    items: list[ScoreRequest]


class BatchResponse(BaseModel):
    results: list[ScoreResponse]


class OpenRLHFRequest(BaseModel):
    """What OpenRLHF's remote reward model client posts."""

    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


class OpenRLHFResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


class _Gate:
    """ASGI middleware: bearer auth, the request size limit, and per-path request metrics."""

    def __init__(self, app: Any, metrics: Metrics, token: str | None, max_body: int) -> None:
        self.app, self.metrics, self.token, self.max_body = app, metrics, token, max_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"] if scope["path"] in ROUTES else "other"
        start, status = time.perf_counter(), [500]
        body, held = b"", []

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if status[0] == 400:  # held until its body shows whether it is FastAPI's
                    held.append(message)
                    return
            elif held:
                head = held.pop()
                if message.get("body") == _GENERIC_PARSE_ERROR and (why := _parse_problem(body)):
                    await JSONResponse({"detail": why}, status_code=400)(scope, receive, send)
                    return
                await send(head)
            await send(message)

        try:
            refusal = self._refuse(scope)
            if refusal is None:
                body, refusal = await self._read_body(scope, receive)
            if refusal is None and scope["method"] == "POST" and scope["path"] in SCORING:
                refusal = _not_text(body)
            if refusal is not None:
                await refusal(scope, receive, send_status)
                return
            sent = False

            async def replay() -> dict:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send_status)
        finally:
            self.metrics.requests.labels(path, str(status[0])).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - start)

    def _refuse(self, scope: dict) -> Response | None:
        if self.token and not _open(scope["path"]):
            headers = dict(scope.get("headers") or [])
            # the scheme's name in any case (HTTP's rule); the token's bytes as sent (UTF-8)
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            token_ok = hmac.compare_digest(given.strip(), self.token.encode())
            if scheme.lower() != b"bearer" or not token_ok:
                return JSONResponse(
                    {"detail": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        if scope["method"] == "POST" and scope["path"] in SCORING:
            given = dict(scope.get("headers") or []).get(b"content-type", b"").decode("latin-1")
            if media := _not_json(given):
                return JSONResponse(
                    {"detail": f"expected Content-Type application/json, got {media}"},
                    status_code=415,
                )
        for name, value in scope.get("headers") or []:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body:
                return self._too_large()
        return None

    async def _read_body(self, scope: dict, receive: Callable) -> tuple[bytes, Response | None]:
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return b"", self._too_large()
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks), None

    def _too_large(self) -> Response:
        return JSONResponse(
            {"detail": f"request body larger than the limit of {self.max_body} bytes"},
            status_code=413,
        )


def _not_json(content_type: str) -> str | None:
    """The media type of a Content-Type that is not JSON (``none`` when there is no header, or
    an empty one), or None. As in FastAPI, any ``*/json`` or ``*/*+json`` reads as JSON; FastAPI
    leaves any other body unparsed, a body without the header too (a request a web page could
    send without the browser asking first), and would answer 422 "not a valid dictionary",
    which does not say that the header is the cause."""
    media = content_type.split(";", 1)[0].strip().lower()
    subtype = media.rpartition("/")[2]
    if not media:
        return "none"
    return None if subtype == "json" or subtype.endswith("+json") else media


#: FastAPI's whole answer to a body its JSON parser raised on, which says nothing of why
_GENERIC_PARSE_ERROR = b'{"detail":"There was an error parsing the body"}'


def _parse_problem(body: bytes) -> str | None:
    """Why ``json.loads`` cannot read ``body``, where FastAPI answers only with the generic
    message above: an integer longer than Python converts, or nesting deeper than its stack."""
    try:
        json.loads(body)
    except RecursionError:
        return "request body is nested too deeply for the JSON parser; send flatter JSON"
    except ValueError as e:
        if "integer string conversion" in str(e):
            return (
                f"request body holds an integer of more than {sys.get_int_max_str_digits()} "
                "digits, which JSON parsing refuses; send such a value as a string"
            )
    return None


def _not_text(body: bytes) -> Response | None:
    """A 400 for a body that is not JSON text in the encoding it appears to be in (UTF-8, or
    UTF-16/32 by its first bytes, as ``json.loads`` reads it), naming the first bad byte;
    FastAPI would say only "There was an error parsing the body"."""
    encoding = json.detect_encoding(body)
    try:
        body.decode(encoding)
    except UnicodeDecodeError as e:
        return JSONResponse(
            {"detail": f"request body is not valid {encoding.upper()} text: byte "
                       f"0x{body[e.start]:02x} at offset {e.start} ({e.reason}); "
                       f"send JSON as UTF-8"},
            status_code=400,
        )  # fmt: skip
    return None


def _json_response(content: Any, status_code: int = 200) -> Response:
    """JSON as FastAPI renders it (UTF-8), or ASCII-escaped when the content holds a lone
    surrogate: JSON text may carry one (``"\\ud800"``) and a result or an error echoes it, but
    UTF-8 cannot encode it, and rendering it as FastAPI does would be a 500."""
    try:
        return JSONResponse(content, status_code)
    except UnicodeEncodeError:
        body = json.dumps(content, ensure_ascii=True)
        return Response(body, status_code=status_code, media_type="application/json")


def create_app(
    scorer: RewardScorer,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_batch: int = DEFAULT_MAX_BATCH,
    default_domain: str = "math",
) -> Any:
    """The FastAPI app, wrapped in the auth/size/metrics gate."""
    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        redoc_url=None,  # ReDoc's page fetches its logo from a CDN; Swagger UI needs nothing
        title="rlcs reward server",
        description="Verifiable rewards for math, chart, OCR, grounding, GUI and VQA answers.",
        version="0.1.0",
    )
    metrics = Metrics(scorer.pool)
    # With a token, the guarded endpoints declare the bearer scheme in the OpenAPI document,
    # so that the docs page offers "Authorize" and sends the header from "Try it out". The
    # declaration only documents: the gate below checks the token before FastAPI sees the
    # request, and this dependency never refuses one (auto_error=False).
    bearer = [Security(HTTPBearer(auto_error=False, description="the server's --token"))]
    guarded = bearer if token else []

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Any, exc: RequestValidationError) -> Response:
        # FastAPI's own answer, rendered so that an echoed lone surrogate cannot make it a 500
        return _json_response({"detail": jsonable_encoder(exc.errors())}, 422)

    def too_many(n: int) -> JSONResponse:
        return JSONResponse(
            {"detail": f"batch of {n} items is over the limit of {max_batch}"}, status_code=422
        )

    @app.post("/v1/score", response_model=ScoreResponse, dependencies=guarded)
    async def score_one(req: ScoreRequest) -> Any:
        results = await scorer.score_batch_async([req.model_dump()])
        metrics.observe(results)
        return _json_response(results[0].to_dict())

    @app.post("/v1/score/batch", response_model=BatchResponse, dependencies=guarded)
    async def score_batch(req: BatchRequest) -> Any:
        if len(req.items) > max_batch:
            return too_many(len(req.items))
        results = await scorer.score_batch_async([item.model_dump() for item in req.items])
        metrics.observe(results)
        return _json_response({"results": [r.to_dict() for r in results]})

    @app.post("/get_reward", response_model=OpenRLHFResponse, dependencies=guarded)
    async def get_reward(
        req: OpenRLHFRequest,
        domain: str = Query(default_domain, description="domain for labels that name none"),
    ) -> Any:
        n = len(req.query)
        if n > max_batch:
            return too_many(n)
        if domain not in registry.domains():
            return JSONResponse(
                {"detail": f"unknown domain {domain!r} in ?domain=; known: "
                           f"{', '.join(registry.domains())}"},
                status_code=422,
            )  # fmt: skip
        prompts = req.prompts if req.prompts is not None else [""] * n
        labels = req.labels if req.labels is not None else [None] * n
        if len(prompts) != n or len(labels) != n:
            return JSONResponse(
                {
                    "detail": f"query, prompts and labels differ in length ({n}, {len(prompts)}, {len(labels)})"
                },
                status_code=422,
            )
        items = [
            openrlhf_item(q, p, lab, domain)
            for q, p, lab in zip(req.query, prompts, labels, strict=True)
        ]
        scored = iter(await scorer.score_batch_async([i for i in items if "problem" not in i]))
        results = [unscorable(i, domain) if "problem" in i else next(scored) for i in items]
        metrics.observe(results)
        rewards = [r.reward for r in results]
        return JSONResponse(
            {
                "rewards": rewards,
                "scores": rewards,
                "extra_logs": {
                    "format_ok": [float(r.format_ok) for r in results],
                    "timeout": [float(r.error == "timeout") for r in results],
                    "error": [float(r.error is not None) for r in results],
                },
            }
        )

    @app.get("/v1/domains", dependencies=guarded)
    def list_domains() -> dict[str, Any]:
        return {"domains": registry.domains(), "counters": scorer.counters()}

    @app.head("/healthz", include_in_schema=False)  # for load balancers' probes
    @app.get("/healthz")
    def healthz() -> Any:
        if not scorer.pool.healthy:
            return JSONResponse({"status": "down", "detail": "the verifier pool stopped"}, 503)
        return {"status": "ok", "workers": len(scorer.pool.worker_pids)}

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        # the address the server prints: a browser opened there lands on the API docs
        return RedirectResponse("/docs")

    @app.get("/metrics", dependencies=guarded)
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return _Gate(app, metrics, token, max_body_bytes)


def _env_domains() -> dict[str, str]:
    """``RLCS_REWARD_DOMAINS="name=pkg.mod:Class,other=pkg.mod:Other"`` adds custom domains,
    each registered (its class imported) here. ``ValueError`` names an entry that is not
    ``name=pkg.mod:Class`` or whose class cannot be loaded: the server would otherwise stop
    with a traceback, or leave out an entry with no ``=`` and answer its items "unknown
    domain"."""
    spec = os.environ.get("RLCS_REWARD_DOMAINS", "")
    found = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, path = (x.strip() for x in part.partition("="))
        if not (name and eq and path):
            raise ValueError(f"{part!r} is not name=package.module:Class")
        try:
            registry.register(name, path)
        except Exception as e:  # the user's module may raise anything as it is imported
            raise ValueError(
                f"domain {name!r}: cannot load {path!r}: {type(e).__name__}: {e}"
            ) from None
        found[name] = path
    return found


def main(args: argparse.Namespace) -> int:
    """``rlcs serve-rewards``: serve until interrupted; returns the exit code."""
    if problem := argtypes.listen_error(args.host, args.port):
        print(f"rlcs serve-rewards: {problem}", file=sys.stderr)
        return 2
    try:
        custom = _env_domains()
    except ValueError as e:
        print(f"rlcs serve-rewards: RLCS_REWARD_DOMAINS: {e}", file=sys.stderr)
        return 2
    scorer = RewardScorer(args.workers, timeout_s=args.timeout, max_timeout_s=args.timeout,
                          custom_domains=custom)  # fmt: skip
    default = getattr(args, "default_domain", "math")
    if default not in registry.domains():
        scorer.close()
        print(f"rlcs serve-rewards: --default-domain {default!r} is not a domain; known: "
              f"{', '.join(registry.domains())}", file=sys.stderr)  # fmt: skip
        return 2
    app = create_app(
        scorer,
        token=args.token or None,
        max_body_bytes=getattr(args, "max_body_bytes", DEFAULT_MAX_BODY_BYTES),
        max_batch=getattr(args, "max_batch", DEFAULT_MAX_BATCH),
        default_domain=default,
    )
    for domain in registry.domains():  # import every verifier now, not on the first request
        registry.load(registry.path_for(domain))
    # Everything loaded so far (SymPy, FastAPI, the verifiers) lives as long as the server:
    # keep it out of the cyclic collector, whose full passes would otherwise stall requests.
    gc.collect()
    gc.freeze()
    url = argtypes.http_url(args.host, args.port)
    print(f"rlcs reward server on {url} (docs at /docs)", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        scorer.close()
    return 0


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rewards.server", description=__doc__)
    argtypes.add_reward_server_arguments(p)
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main(_parse()))
