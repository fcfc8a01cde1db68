"""The reward server under load on loopback: batch throughput, then single-item latency with
32 concurrent clients, clean and with 5% pathological items mixed in.

Starts ``rlcs serve-rewards`` as a subprocess on 127.0.0.1 (a free port), warms it with one
pass over the item pool, then runs three bounded phases (count- and time-capped):
1. batch: concurrent clients posting ``/v1/score/batch`` with 256 items each;
2. clean: 32 clients, each sending single items to ``/v1/score`` one after another;
3. pathological: the same, with 5% of requests replaced by the inputs the issue names
   (``9^{9^{9^{9}}}``, a 100k-digit number, 5,000 nested parentheses, a 1 MB response).
Phases 2 and 3 alternate for ``--rounds`` rounds, so that drift in a shared machine's load
falls on both. p99 figures are over normal items only. The clients run in this process, on the same cores as
the server. Prints ``RESULT ...`` last.

    python benchmarks/reward_server_load.py [--requests-per-client 40] [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time

import httpx
from rounds import count

GLM = "<think>Working.</think><answer>The answer is <|begin_of_box|>{}<|end_of_box|>.</answer>"
PATHOLOGICAL = [
    {"domain": "math", "response": GLM.format("9^{9^{9^{9}}}"), "answer": "5"},
    {"domain": "math", "response": GLM.format("7" * 100_000), "answer": "5"},
    {"domain": "math", "response": GLM.format("(" * 5000 + "1" + ")" * 5000), "answer": "1"},
    {"domain": "ocr", "response": GLM.format("q" * 1_000_000), "answer": "hello"},
]


def normal_items(rng: random.Random, n: int) -> list[dict]:
    """A domain mix like an RL batch: math answers as models write them, OCR, boxes, actions."""
    items = []
    for i in range(n):
        kind = i % 6
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        if kind == 0:
            pred = rng.choice([str(a * b), f"{a * b}.0", f"\\frac{{{2 * a * b}}}{{2}}", str(a + b)])
            items.append({"domain": "math", "response": GLM.format(pred), "answer": str(a * b)})
        elif kind == 1:
            pred = rng.choice([f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}", f"{a}\\sqrt{{3}}"])
            items.append(
                {"domain": "math", "response": GLM.format(pred), "answer": f"{a}\\sqrt{{2}}"}
            )
        elif kind == 2:
            gt = " ".join(
                rng.choice(["total", "revenue", "by", "region", "in", "2019"]) for _ in range(8)
            )
            items.append({"domain": "ocr", "response": GLM.format(gt[:-2] + "xy"), "answer": gt})
        elif kind == 3:
            x, y = rng.randint(0, 800), rng.randint(0, 800)
            box = [x, y, x + 100, y + 80]
            pred = [x + rng.randint(-10, 10), y + rng.randint(-10, 10), x + 100, y + 80]
            items.append(
                {"domain": "grounding", "response": GLM.format(json.dumps(pred)), "answer": [box]}
            )
        elif kind == 4:
            x, y = rng.randint(0, 800), rng.randint(0, 800)
            pred = {"action": "click", "point": [x + rng.randint(0, 60), y + 10]}
            gt = {"action": "click", "box": [x, y, x + 50, y + 40]}
            items.append({"domain": "gui", "response": GLM.format(json.dumps(pred)), "answer": gt})
        else:
            items.append(
                {
                    "domain": "chart",
                    "response": GLM.format(str(2000 + a % 25)),
                    "answer": str(2000 + b % 25),
                }
            )
    return items


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, workers: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cluster.cli", "serve-rewards", "--port", str(port),
           "--workers", str(workers), "--timeout", "5"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the reward server did not start within 60 s")


async def capped(work, cap_s: float, phase: str):
    """``work`` within ``cap_s`` seconds, or a one-line error: a phase cut short would leave out
    its slowest requests, and the figures with them."""
    try:
        return await asyncio.wait_for(work, cap_s)
    except TimeoutError:
        raise SystemExit(
            f"the {phase} phase did not finish within --cap-s {cap_s:g} s; raise --cap-s or send "
            "fewer requests (--batches, --requests-per-client)"
        ) from None


async def batch_phase(
    base: str, items: list[dict], clients: int, batches: int, cap_s: float
) -> tuple[float, int]:
    """Items per second through ``/v1/score/batch``, and the items sent."""
    size = 256
    queue = [items[(i * size) % len(items) :][:size] or items[:size] for i in range(batches)]
    sent = sum(len(b) for b in queue)
    done = 0

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal done
        while queue:
            batch = queue.pop()
            r = await c.post(base + "/v1/score/batch", json={"items": batch})
            r.raise_for_status()
            done += len(r.json()["results"])

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as c:
        await capped(asyncio.gather(*(client(c) for _ in range(clients))), cap_s, "batch")
    return done / (time.perf_counter() - start), sent


class RawClient:
    """A minimal keep-alive HTTP/1.1 client over one asyncio connection. httpx costs about a
    millisecond of CPU per request, which on two shared cores would measure the client."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict | bytes) -> dict:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        self.writer.write(head + body)
        await self.writer.drain()
        status_and_headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(status_and_headers.split(b" ", 2)[1])
        length = 0
        for line in status_and_headers.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = await self.reader.readexactly(length)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {data[:200]!r}")
        return json.loads(data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def single_phase(
    base: str,
    items: list[dict],
    clients: int,
    per_client: int,
    bad_share: float,
    seed: int,
    cap_s: float,
) -> tuple[list[float], int]:
    rng = random.Random(seed)
    plan = [
        [(rng.random() < bad_share, rng.randrange(len(items))) for _ in range(per_client)]
        for _ in range(clients)
    ]
    latencies: list[float] = []
    bad_sent = 0
    # Bodies are encoded once, up front: encoding a megabyte per request would load the client.
    bodies = [json.dumps(item).encode() for item in items]
    bad_bodies = [json.dumps(item).encode() for item in PATHOLOGICAL]

    host, port = base.removeprefix("http://").split(":")

    async def client(steps: list[tuple[bool, int]]) -> None:
        nonlocal bad_sent
        c = RawClient(host, int(port))
        try:
            for bad, k in steps:
                item = bad_bodies[k % len(bad_bodies)] if bad else bodies[k]
                start = time.perf_counter()
                await c.post("/v1/score", item)
                elapsed = time.perf_counter() - start
                if bad:
                    bad_sent += 1
                else:
                    latencies.append(elapsed * 1000)
        finally:
            await c.close()

    phase = "pathological" if bad_share else "clean"
    await capped(asyncio.gather(*(client(p) for p in plan)), cap_s, phase)
    return latencies, bad_sent


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def share(text: str) -> float:
    """An argparse ``type`` for ``--pathological-share``: at least 0 and below 1, so that some
    normal items are left to time."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{value:g} is not in [0, 1)")
    return value


def counter_totals(metrics: str, name: str) -> dict[str, float]:
    """Per domain, the value of the Prometheus counter ``name`` in a ``/metrics`` page."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and "domain" in sample.labels:
                domain = sample.labels["domain"]
                out[domain] = out.get(domain, 0.0) + sample.value
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=count(1), default=os.cpu_count() or 1)
    ap.add_argument("--clients", type=count(1), default=32)
    ap.add_argument("--requests-per-client", type=count(1), default=40,
                    help="per client and round")  # fmt: skip
    ap.add_argument("--rounds", type=count(1), default=3, help="clean/pathological round pairs")
    ap.add_argument("--batches", type=count(1), default=40)
    ap.add_argument("--pathological-share", type=share, default=0.05)
    ap.add_argument("--cap-s", type=float, default=120.0, help="time cap per phase")
    args = ap.parse_args()

    items = normal_items(random.Random(0), 600)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.workers)
    try:
        httpx.post(base + "/v1/score/batch", json={"items": items}, timeout=120).raise_for_status()
        rate, sent = asyncio.run(batch_phase(base, items, 4, args.batches, args.cap_s))
        print(f"batch: {args.batches} batches, {sent} items, 4 clients: {rate:.0f} items/s",
              flush=True)  # fmt: skip
        # Clean and pathological rounds alternate, so drift in the machine's load hits both.
        clean: list[float] = []
        mixed: list[float] = []
        bad = 0
        for r in range(args.rounds):
            lat, _ = asyncio.run(
                single_phase(
                    base, items, args.clients, args.requests_per_client, 0.0, 10 + r, args.cap_s
                )
            )
            clean += lat
            lat, n_bad = asyncio.run(
                single_phase(
                    base,
                    items,
                    args.clients,
                    args.requests_per_client,
                    args.pathological_share,
                    20 + r,
                    args.cap_s,
                )
            )
            mixed += lat
            bad += n_bad
        p50, p99 = pct(clean, 50), pct(clean, 99)
        print(
            f"clean: {len(clean)} requests, {args.clients} clients: p50 {p50:.1f} ms, p99 {p99:.1f} ms",
            flush=True,
        )
        p99_bad = pct(mixed, 99)
        print(f"with {bad} pathological requests ({args.pathological_share:.0%}): {len(mixed)} normal "
              f"items p50 {pct(mixed, 50):.1f} ms, p99 {p99_bad:.1f} ms", flush=True)  # fmt: skip
        metrics = httpx.get(base + "/metrics").text
        errors = [
            line for line in metrics.splitlines() if line.startswith("rlcs_reward_errors_total")
        ]
        print("server error counters: " + "; ".join(errors), flush=True)
        # the warm-up pass leaves every math and chart item of the pool in the server's cache
        hits = counter_totals(metrics, "rlcs_reward_cache_hits_total")
        scored = counter_totals(metrics, "rlcs_reward_items_total")
        print("answered from the cache (warm-up included): " + ", ".join(
            f"{d} {hits.get(d, 0):.0f}/{n:.0f}" for d, n in sorted(scored.items())), flush=True)  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(
        f"RESULT batch_items_per_s={rate:.0f} p50_ms={p50:.1f} p99_ms={p99:.1f} "
        f"p99_pathological_ms={p99_bad:.1f} p99_ratio={p99_bad / p99:.2f}"
    )


if __name__ == "__main__":
    main()
