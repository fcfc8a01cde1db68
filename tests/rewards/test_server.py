"""The reward server as a real process (``rlcs serve-rewards``) on 127.0.0.1, over HTTP.

Ray, torch and vLLM are shadowed by packages that raise ImportError, so these tests also prove
that the server needs none of them.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import INJECTION, glm

HERE = Path(__file__).resolve().parent
TOKEN = "s3cret-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE / "no_heavy"), str(HERE), env.get("PYTHONPATH", "")]
    )
    env["RLCS_REWARD_DOMAINS"] = "hang=adversarial_verifiers:Hang"
    cmd = [sys.executable, "-m", "cluster.cli", "serve-rewards", "--port", str(port), "--workers", "2",
           "--timeout", "2", "--token", TOKEN, "--max-body-bytes", "2000000", "--max-batch", "256"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited early:\n{proc.stdout.read()}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("server did not come up within 60 s")
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    yield client
    client.close()
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


CASES = [
    ("math", glm("\\frac{1}{2}"), "0.5", 1.0),
    ("math", glm("[1,2]"), "[1,2)", 0.0),
    ("chart", glm("2019"), "2019", 1.0),
    ("ocr", glm("hello wrld"), "hello world", 0.9),
    ("grounding", glm("[10,10,100,100]"), [[12, 12, 100, 100]], 1.0),
    (
        "gui",
        glm('{"action": "click", "point": [500, 300]}'),
        {"action": "click", "box": [480, 280, 560, 330]},
        1.0,
    ),
    ("vqa", glm("Three"), "3", 1.0),
]


@pytest.mark.parametrize(("domain", "response", "answer", "reward"), CASES)
def test_score_each_domain(server, domain, response, answer, reward):
    r = server.post("/v1/score", json={"domain": domain, "response": response, "answer": answer})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["reward"] == pytest.approx(reward)
    assert body["format_ok"] is True and body["domain"] == domain


def test_batch_and_bare_format_option(server):
    items = [{"domain": d, "response": resp, "answer": a} for d, resp, a, _ in CASES]
    items.append(
        {"domain": "math", "response": "0.5", "answer": "1/2", "options": {"format": "bare"}}
    )
    items.append({"domain": "math", "response": "no tags", "answer": "1"})
    r = server.post("/v1/score/batch", json={"items": items})
    results = r.json()["results"]
    assert [x["reward"] for x in results[:-2]] == pytest.approx([c[3] for c in CASES])
    assert results[-2]["reward"] == 1.0
    assert results[-1]["error"] == "format" and results[-1]["format_ok"] is False


def test_openrlhf_get_reward(server):
    prompt = "<|user|>\nWhat is 1/4 + 1/4?<|assistant|>\n"
    good = prompt + glm("\\frac{1}{2}") + "<|endoftext|>"
    bad = prompt + glm("1/3")
    chart = "<|user|>When?<|assistant|>" + glm("2019")
    payload = {
        "query": [good, bad, chart],
        "prompts": [prompt, prompt, "<|user|>When?<|assistant|>"],
        "labels": ["0.5", "0.5", json.dumps({"domain": "chart", "answer": "2019"})],
    }
    r = server.post("/get_reward", json=payload)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["rewards"] == [1.0, 0.0, 1.0]
    assert body["scores"] == body["rewards"]
    assert body["extra_logs"]["format_ok"] == [1.0, 1.0, 1.0]
    r = server.post(
        "/get_reward", json={"query": [good], "prompts": [prompt, prompt], "labels": ["1"]}
    )
    assert r.status_code == 422 and "differ in length" in r.text


def test_concurrent_clients(server):
    def one(i: int) -> float:
        answer = str(i % 7)
        r = server.post(
            "/v1/score", json={"domain": "math", "response": glm(answer), "answer": answer}
        )
        return r.json()["reward"]

    with cf.ThreadPoolExecutor(32) as ex:
        rewards = list(ex.map(one, range(320)))
    assert rewards == [1.0] * 320


def test_a_hanging_item_does_not_block_other_requests(server):
    with cf.ThreadPoolExecutor(2) as ex:
        slow = ex.submit(
            server.post,
            "/v1/score",
            json={
                "domain": "hang",
                "response": "hang",
                "answer": None,
                "options": {"format": "bare"},
            },
        )
        time.sleep(0.2)
        start = time.monotonic()
        for i in range(20):
            r = server.post(
                "/v1/score", json={"domain": "ocr", "response": glm(f"t{i}"), "answer": f"t{i}"}
            )
            assert r.json()["reward"] == 1.0
        assert time.monotonic() - start < 1.5
        res = slow.result().json()
    assert res["error"] == "timeout" and res["reward"] == 0.0


def test_injection_through_the_server(server, tmp_path):
    canary = tmp_path / "CANARY"
    items = [{"domain": d, "response": glm(INJECTION.format(canary=canary)), "answer": "5"}
             for d in ["math", "chart", "ocr", "grounding", "gui", "vqa"]]  # fmt: skip
    r = server.post("/v1/score/batch", json={"items": items})
    assert r.status_code == 200
    time.sleep(0.2)
    assert not canary.exists()


def test_auth_and_limits(server):
    base = str(server.base_url)
    assert httpx.get(base + "/healthz").status_code == 200
    r = httpx.post(base + "/v1/score", json={"domain": "math", "response": "1", "answer": "1"})
    assert r.status_code == 401 and "bearer token" in r.text
    r = httpx.get(base + "/metrics", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    for scheme in ("bearer", "BEARER"):  # the scheme's name is case-insensitive in HTTP
        r = httpx.get(base + "/metrics", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert r.status_code == 200
    for header in (f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x", "Bearer"):
        assert httpx.get(base + "/metrics", headers={"Authorization": header}).status_code == 401
    r = server.post(
        "/v1/score", json={"domain": "ocr", "response": glm("x" * 3_000_000), "answer": "x"}
    )
    assert r.status_code == 413 and "2000000 bytes" in r.text
    items = [{"domain": "ocr", "response": glm("a"), "answer": "a"}] * 300
    r = server.post("/v1/score/batch", json={"items": items})
    assert r.status_code == 422 and "limit of 256" in r.text


def test_a_body_that_is_not_json_is_refused_naming_its_content_type(server):
    body = json.dumps({"domain": "math", "response": glm("1"), "answer": "1"})
    for path, ctype in [("/v1/score", "text/plain"), ("/v1/score/batch", "text/plain"),
                        ("/get_reward", "application/x-www-form-urlencoded")]:  # fmt: skip
        r = server.post(path, content=body, headers={"content-type": ctype})
        assert r.status_code == 415, (path, r.text)
        assert r.json() == {"detail": f"expected Content-Type application/json, got {ctype}"}
    for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
        r = server.post("/v1/score", content=body, headers={"content-type": ctype})
        assert r.status_code == 200 and r.json()["reward"] == 1.0, ctype
    url = str(server.base_url).rstrip("/") + "/v1/score"
    r = httpx.post(url, content=body, headers={"content-type": "text/plain"})
    assert r.status_code == 401  # without the token, the token is what is wrong
    assert 'rlcs_reward_requests_total{code="415",path="/v1/score"}' in server.get("/metrics").text


def test_a_body_without_a_content_type_is_refused_saying_so(server):
    # FastAPI leaves such a body unparsed: it was a 422 "Input should be a valid dictionary",
    # while the docs said it read as JSON
    body = json.dumps({"domain": "math", "response": glm("1"), "answer": "1"}).encode()
    for path in ("/v1/score", "/v1/score/batch", "/get_reward"):
        for headers in ({}, {"content-type": ""}):
            r = server.post(path, content=body, headers=headers)
            assert "content-type" not in r.request.headers or headers
            assert r.status_code == 415, (path, headers, r.text)
            assert r.json() == {"detail": "expected Content-Type application/json, got none"}


def test_domains_docs_and_metrics(server):
    # its own items, so that the metrics below do not rest on the tests before it: a math and
    # an OCR item scored, and a hung item whose worker is killed at the 2 s timeout
    for domain, response, answer in [("math", glm("2"), "2"), ("ocr", glm("ab"), "ab")]:
        assert server.post("/v1/score", json={"domain": domain, "response": response,
                                               "answer": answer}).json()["reward"] == 1.0  # fmt: skip
    hung = server.post("/v1/score", json={"domain": "hang", "response": "hang", "answer": None,
                                          "options": {"format": "bare"}}).json()  # fmt: skip
    assert hung["error"] == "timeout"
    assert {"math", "gui", "hang"} <= set(server.get("/v1/domains").json()["domains"])
    assert server.get("/docs").status_code == 200
    root = httpx.get(f"{server.base_url}/", follow_redirects=False)  # no token: it is open
    assert root.status_code == 307 and root.headers["location"] == "/docs"
    assert httpx.head(f"{server.base_url}/healthz").status_code == 200  # no token: a probe
    import warnings

    with warnings.catch_warnings():  # e.g. FastAPI's "Duplicate Operation ID" for a route
        warnings.simplefilter("error")
        paths = server.get("/openapi.json").json()["paths"]
    assert "/get_reward" in paths and list(paths["/healthz"]) == ["get"]
    text = server.get("/metrics").text
    assert 'rlcs_reward_items_total{domain="math"}' in text
    assert "rlcs_reward_request_seconds_bucket" in text
    assert 'rlcs_reward_value_bucket{domain="ocr"' in text
    assert 'rlcs_reward_timeouts_total{domain="hang"}' in text
    # the pool's own counts: the hung items' workers were killed, and replaced
    values = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("rlcs_reward_workers")
    )
    killed, started = (
        float(values[f"rlcs_reward_workers_{k}_total"]) for k in ("killed", "started")
    )
    assert killed >= 1 and started >= killed + 1
    assert float(values["rlcs_reward_workers_crashed_total"]) >= 0
    assert float(values["rlcs_reward_workers"]) >= 1
    assert "# TYPE rlcs_reward_workers_killed_total counter" in text


GUARDED = {("/v1/score", "post"), ("/v1/score/batch", "post"), ("/get_reward", "post"),
           ("/v1/domains", "get"), ("/metrics", "get")}  # fmt: skip


def _secured(spec: dict) -> set[tuple[str, str]]:
    """The operations of an OpenAPI document that name a security requirement."""
    return {(path, method) for path, ops in spec["paths"].items()
            for method, op in ops.items() if op.get("security")}  # fmt: skip


def test_the_openapi_document_declares_the_bearer_token_where_the_gate_asks_for_it(server):
    # Swagger UI offered no "Authorize" button, so "Try it out" always got a 401
    spec = httpx.get(f"{server.base_url}/openapi.json").json()  # no token: the docs are open
    schemes = spec["components"]["securitySchemes"]
    assert list(schemes.values()) == [
        {"type": "http", "scheme": "bearer", "description": "the server's --token"}
    ]
    [name] = schemes
    assert _secured(spec) == GUARDED
    for path, method in GUARDED:
        assert spec["paths"][path][method]["security"] == [{name: []}]
    # the declaration documents the gate and changes nothing: still 401 without the token
    r = httpx.get(f"{server.base_url}/v1/domains")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert server.get("/v1/domains").status_code == 200


def test_without_a_token_the_openapi_document_asks_for_none(scorer):
    from rewards.server import create_app

    spec = create_app(scorer).app.openapi()
    assert _secured(spec) == set()
    assert "securitySchemes" not in spec.get("components", {})
    spec = create_app(scorer, token="t").app.openapi()
    assert _secured(spec) == GUARDED


def test_the_api_docs_render_in_a_browser_without_internet(server):
    from rlcs.tasks.gui import CHROMIUM_ARGS, ChromiumMissing, find_chromium

    try:
        chromium = find_chromium()
    except ChromiumMissing as e:
        pytest.skip(str(e))
    from playwright.sync_api import sync_playwright

    base = str(server.base_url).rstrip("/")
    outside: list[str] = []

    def local_only(route):
        if route.request.url.startswith(base + "/"):
            route.continue_()
        else:  # a CDN the server relied on would leave the page blank on an offline cluster
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()  # no token: the docs are open, as /healthz is
            page.route("**/*", local_only)
            page.goto(base + "/docs")
            page.locator(".opblock-summary-path", has_text="/v1/score/batch").wait_for()
            assert page.locator(".opblock").count() >= 6
            # the token can be given on the page, and "Try it out" sends it
            page.locator("button.authorize").first.click()
            page.locator(".modal-ux input").fill(TOKEN)
            page.locator(".modal-ux button.authorize").click()
            page.locator(".modal-ux button.btn-done").click()
            with page.expect_response(lambda r: r.url.endswith("/v1/domains")) as answer:
                block = page.locator(".opblock", has_text="/v1/domains")
                block.locator(".opblock-summary").click()
                block.locator("button.try-out__btn").click()
                block.locator("button.execute").click()
            assert answer.value.status == 200
            assert answer.value.request.headers["authorization"] == f"Bearer {TOKEN}"
        finally:
            browser.close()
    assert outside == []


def test_odd_json_is_scored_or_refused_and_the_server_stays_whole(server):
    ok = glm("1")
    # a lone surrogate is valid JSON text; it is scored (here: an unknown domain) and echoed
    # ASCII-escaped, and it does not end up in a metric label
    surrogate = '{"domain": "\\ud800", "response": "1", "answer": "1"}'
    r = server.post("/v1/score", content=surrogate, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["error"] == "domain"
    assert r.json()["domain"] == "\ud800"
    boxed = '{"domain": "ocr", "response": "<think>t</think><answer><|begin_of_box|>a\\ud800<|end_of_box|></answer>", "answer": "a"}'
    r = server.post("/v1/score", content=boxed, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["extracted"] == "a\ud800"
    deep: object = "1"
    for _ in range(900):
        deep = [deep]
    r = server.post("/v1/score", json={"domain": "math", "response": ok, "answer": deep})
    assert r.status_code == 200 and r.json()["error"] == "answer"
    assert "nested deeper than" in r.json()["detail"]
    r = server.post("/get_reward", json={"query": [ok]})  # no labels: no ground truth
    assert r.status_code == 200 and r.json()["extra_logs"]["error"] == [1.0]
    for i in range(3):
        server.post("/v1/score", json={"domain": f"made-up-{i}", "response": ok, "answer": "1"})
    text = server.get("/metrics").text
    assert 'rlcs_reward_errors_total{domain="unknown",error="domain"}' in text
    assert "made-up-" not in text
    assert server.get("/v1/domains").status_code == 200
    assert server.get("/healthz").json()["status"] == "ok"
    assert (
        server.post("/v1/score", json={"domain": "math", "response": ok, "answer": "1"}).json()[
            "reward"
        ]
        == 1.0
    )


def test_get_reward_finds_the_response_in_queries_as_openrlhf_decodes_them(server):
    prompt = "[gMASK]<sop><|user|>\nWhat is 2+3?<|assistant|>\n"
    answer = "<|begin_of_box|>5<|end_of_box|></answer>"
    bare = json.dumps({"answer": "5", "options": {"format": "bare"}})
    image = "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>What is 2+3?<|assistant|>\n"
    expanded = image.replace("<|image|>", "<|image|>" * 40)  # one token per patch once decoded
    cases = [  # (query, prompt, label): all right answers
        ("<|pad|><|pad|>" + prompt + "5<|user|><|pad|>", prompt, bare),  # padding kept, both sides
        (prompt + glm("5") + "<|observation|>", prompt, "5"),  # GLM's other end-of-turn token
        # the template pre-fills the think block (GLM's /nothink; templates that open <think>)
        (prompt + "<think></think><answer>" + answer, prompt + "<think></think>", "5"),
        (prompt + "<think>\nadd</think><answer>" + answer, prompt + "<think>\n", "5"),
        (expanded + glm("5") + "<|user|>", image, "5"),  # the prompt's tail after the image
    ]
    r = server.post("/get_reward", json={"query": [q for q, _, _ in cases],
                                         "prompts": [p for _, p, _ in cases],
                                         "labels": [lab for _, _, lab in cases]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0] * len(cases)
    assert r.json()["extra_logs"]["error"] == [0.0] * len(cases)

    # the prompt's own text is never taken for the answer: an example \boxed{5} in the prompt,
    # with a BOS before it, and a response with no box; a prompt the query does not hold at all
    shown = "[gMASK]<sop><|user|>\nAnswer like \\boxed{5}. What is 2+3?<|assistant|>\n"
    boxed = json.dumps({"answer": "5", "options": {"format": "boxed"}})
    r = server.post("/get_reward", json={"query": ["<s>" + shown + "no idea", "Answer like \\boxed{5}. what"],
                                         "prompts": [shown, shown], "labels": [boxed, boxed]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [0.0, 0.0]
    assert r.json()["extra_logs"]["error"] == [1.0, 1.0]
    assert 'rlcs_reward_errors_total{domain="math",error="request"}' in server.get("/metrics").text


def test_get_reward_refuses_an_unknown_domain_and_a_short_prompts_list(server):
    ok = glm("1")
    r = server.post("/get_reward?domain=nope", json={"query": [ok], "labels": ["1"]})
    assert r.status_code == 422 and "unknown domain 'nope'" in r.json()["detail"]
    r = server.post("/get_reward", json={"query": [ok, ok], "prompts": [], "labels": ["1", "1"]})
    assert r.status_code == 422
    assert r.json()["detail"] == "query, prompts and labels differ in length (2, 0, 2)"
    r = server.post("/get_reward?domain=chart", json={"query": [glm("2019")], "labels": ["2019"]})
    assert r.status_code == 200 and r.json()["rewards"] == [1.0]


def test_a_body_that_is_not_utf8_gets_400_naming_the_byte(server):
    body = '{"domain": "ocr", "response": "caf\u00e9", "answer": "x"}'.encode("latin-1")
    r = server.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    at = body.index(b"\xe9")
    assert r.json()["detail"].startswith(
        f"request body is not valid UTF-8 text: byte 0xe9 at offset {at}"
    )
    utf16 = json.dumps(
        {"domain": "ocr", "response": "a", "answer": "a", "options": {"format": "bare"}}
    )
    r = server.post("/v1/score", content=utf16.encode("utf-16"),
                    headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 200 and r.json()["reward"] == 1.0  # JSON text may be UTF-16 too
    assert 'rlcs_reward_requests_total{code="400",path="/v1/score"}' in server.get("/metrics").text


def test_json_the_parser_refuses_gets_400_saying_why(server):
    """An integer past Python's digit limit and nesting past its stack: FastAPI's answer to
    both is "There was an error parsing the body"; the server's says what to change."""
    head = '{"domain": "math", "response": "x", "answer": '
    for body, why in (
        (head + "9" * 5000 + "}", "integer of more than 4300 digits"),
        (head + '"1", "options": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ):
        r = server.post("/v1/score", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and why in r.json()["detail"], r.text
    # other 400s pass through as they were
    r = server.post(
        "/v1/score", content=b'{"a": "\xe9"}', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "not valid UTF-8" in r.json()["detail"]
    assert server.get("/healthz").json()["status"] == "ok"


def test_a_polynomial_too_large_for_floats_is_not_equal_to_every_answer(server):
    # evaluated at the probe points, the product overflows a float; inf compared with inf once
    # made it "equal" to any ground truth at all
    big = "\\prod_{k=1}^{300}(x+k)"
    items = [{"domain": "math", "response": glm(big), "answer": a} for a in ("7", "x", "0")]
    items.append({"domain": "math", "response": glm(big), "answer": "\\prod_{k=1}^{300}(k+x)"})
    r = server.post("/v1/score/batch", json={"items": items})
    assert r.status_code == 200, r.text
    assert [x["reward"] for x in r.json()["results"]] == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("x=no_such_module:Cls", "domain 'x': cannot load 'no_such_module:Cls': ModuleNotFound"),
        ("x=rewards.verifiers.math:Nope", "domain 'x': cannot load 'rewards.verifiers.math:Nope'"),
        ("x=rewards.base:ScoreResult", "is not a rewards.base.Verifier subclass"),
        # no '=': the entry was left out, and its items answered "unknown domain"
        ("exact:rewards.verifiers.math:MathVerifier", "is not name=package.module:Class"),
    ],
)
def test_a_bad_custom_domain_stops_the_server_with_one_line_saying_which(spec, problem):
    """A custom domain that cannot be loaded stopped the server with a traceback."""
    cmd = [sys.executable, "-m", "cluster.cli", "serve-rewards", "--port", str(_free_port()),
           "--workers", "1"]  # fmt: skip
    env = {**os.environ, "RLCS_REWARD_DOMAINS": spec}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("rlcs serve-rewards: RLCS_REWARD_DOMAINS: "), r.stderr
    assert problem in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""  # it never said that it serves
