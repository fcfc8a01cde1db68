"""The verifier worker process: what runs inside each of the pool's workers (``rewards.pool``).

A worker takes chunks of tasks over its pipe and reports, in a small shared array, the item it
is on and when it started it, so that the parent can kill it on an overrun without a message.
Workers are forks of a fork server with the verifiers preloaded.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from typing import Any

from rewards import degenerate, registry
from rewards.extract import FormatError, extract
from rewards.registry import BUILTIN

#: (verifier import path, extracted answer, ground truth, options[, gate]); see ``run_one``
Task = tuple
#: (reward, error, detail[, extracted])
Outcome = tuple

_PRELOAD = ["rewards.pool_worker", *sorted({p.partition(":")[0] for p in BUILTIN.values()})]


def context() -> mp.context.BaseContext:
    """A fork server with the verifiers preloaded: replacing a worker costs a fork, not an
    interpreter start, and no worker is forked from a threaded parent (Ray, uvicorn)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def run_one(
    path: str, extracted: str | None, answer: Any, options: dict, gate: tuple | None = None
) -> Outcome:
    """Verify one task, turning every failure into an outcome. ``gate`` is
    ``(response, format, max_answer_chars, limits)`` for responses too large to gate in the
    caller: the format gate (with the degenerate-thinking check and its ``limits``) then runs
    here, under the time limit, and the outcome carries the extracted text as a fourth
    element."""
    if gate is None:
        return _verify(path, extracted, answer, options)
    response, fmt, max_chars, limits = gate
    try:
        extracted = extract(response, fmt, registry.load(path).answer_box)
    except FormatError as e:
        return 0.0, "format", str(e), None
    if len(extracted) > max_chars:
        return 0.0, "parse", f"answer longer than {max_chars} characters", None
    if fmt == "glm" and (problem := degenerate.problem(response, limits)):
        return 0.0, "format", problem, extracted
    return (*_verify(path, extracted, answer, options), extracted)


def _verify(path: str, extracted: Any, answer: Any, options: dict) -> Outcome:
    try:
        reward, error, detail = registry.load(path).verify(extracted, answer, options)
        reward = float(reward)
    except RecursionError:
        return 0.0, "crash", "recursion too deep"
    except MemoryError:
        return 0.0, "crash", "out of memory"
    except Exception as e:
        return 0.0, "verifier", f"{type(e).__name__}: {e}"[:200]
    if not 0.0 <= reward <= 1.0:  # also catches NaN
        return 0.0, "verifier", f"reward {reward!r} outside [0, 1]"
    return reward, error, detail


def worker_main(conn: Any, progress: Any, memory_limit_mb: int) -> None:
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress[4] = 1.0  # started: the parent waits for this before its first work
    if memory_limit_mb > 0:
        limit = memory_limit_mb * 1024 * 1024
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        chunk_id, tasks = msg
        progress[2] = 0.0
        progress[0] = chunk_id
        out = []
        for pos, task in enumerate(tasks):
            if pos >= progress[3]:  # the parent took the rest back for other workers
                break
            progress[2] = 0.0
            progress[1] = pos
            progress[2] = time.monotonic()
            out.append(run_one(*task))
        progress[2] = 0.0
        conn.send((chunk_id, out))
