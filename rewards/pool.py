"""Verifier worker processes with a hard wall-clock limit per item, enforced by killing.

Why processes: a SymPy simplification or a C-level big-integer power cannot be interrupted from
inside (and ``signal``-based timeouts only work in a main thread, so inside Ray workers and
web servers they silently score 0). A process can always be killed.

How it stays fast: items travel in chunks, one pipe round-trip per chunk. Each worker writes
(chunk id, position, start time) of the item it is on into a small shared array, so the parent
sees per-item progress without any messages. When an item overruns, the parent kills that
worker, reports ``timeout`` for that item only, re-queues the rest of its chunk and starts a
replacement (a fork of the fork server: milliseconds). Items queued behind a slow one in its
chunk are taken back for other workers, and if every worker is stuck on a slow item while others
wait, spare workers are started, so slow items do not block the queue.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import wait as wait_any
from typing import Any

from rewards.pool_worker import Outcome, Task, context, worker_main

_TICK_S = 0.01
_SPARE_IDLE_S = 5.0


class _Job:
    __slots__ = ("results", "remaining", "done", "callback")

    def __init__(self, n: int, callback: Any = None) -> None:
        self.results: list[Outcome | None] = [None] * n
        self.remaining, self.callback = n, callback
        self.done = threading.Event()
        if n == 0:
            self.finish()

    def finish(self) -> None:
        self.done.set()
        if self.callback is not None:
            with contextlib.suppress(Exception):  # a caller's bug must not stop the dispatcher
                self.callback(self.results)


class _Entry:
    __slots__ = ("job", "index", "task", "attempts", "timeout_s")

    def __init__(self, job: _Job, index: int, task: Task, timeout_s: float) -> None:
        self.job, self.index, self.task, self.attempts = job, index, task, 0
        self.timeout_s = timeout_s


class _Worker:
    __slots__ = ("proc", "conn", "progress", "chunk", "chunk_id", "idle_since", "spare")

    def __init__(self, ctx: Any, memory_limit_mb: int, spare: bool) -> None:
        parent, child = ctx.Pipe()
        # chunk id, position, start time, chunk limit, started
        self.progress = ctx.RawArray("d", 5)
        self.proc = ctx.Process(
            target=worker_main, args=(child, self.progress, memory_limit_mb), daemon=True
        )
        self.proc.start()
        child.close()
        self.conn, self.chunk_id, self.spare = parent, 0, spare
        self.chunk: list[_Entry] | None = None
        self.idle_since = time.monotonic()

    def current(self) -> tuple[int, float] | None:
        """(position, start time) of the item the worker is on, or None between items."""
        p = self.progress
        start, pos, cid, again = p[2], p[1], p[0], p[2]
        if start <= 0.0 or start != again or int(cid) != self.chunk_id:
            return None
        return int(pos), start

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.join(1.0)
        with contextlib.suppress(Exception):
            self.conn.close()


def _await_started(workers: list[_Worker], timeout_s: float = 120.0) -> None:
    """Wait until the first workers run; one that exits first fails the pool at once (its
    replacements would otherwise be started forever while every caller waits)."""
    deadline = time.monotonic() + timeout_s
    for w in workers:
        while w.progress[4] != 1.0:
            if not w.proc.is_alive() and w.progress[4] != 1.0:
                raise RuntimeError(
                    f"a reward verifier worker exited as it started (exit code {w.proc.exitcode}; "
                    "its error is printed above). The workers are multiprocessing processes "
                    "(forkserver), which run the main script again as they start: a script that "
                    'scores rewards when it runs must do so under `if __name__ == "__main__":`.'
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"reward verifier workers did not start in {timeout_s:g}s")
            time.sleep(0.005)


class WorkerPool:
    """A fixed set of verifier processes (plus spares under load), shared by many callers."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        max_spares: int | None = None,
        memory_limit_mb: int = 4096,
        chunk_max: int = 256,
        spare_after_s: float = 0.1,
    ) -> None:
        self.size = max(1, workers or os.cpu_count() or 1)
        self.max_spares = self.size if max_spares is None else max_spares
        self.memory_limit_mb = memory_limit_mb
        self.chunk_max = chunk_max
        self.spare_after_s = spare_after_s
        self.stats = {"killed": 0, "crashed": 0, "started": 0, "spares_started": 0}
        self._ctx = context()
        self._pending: deque[_Entry] = deque()
        self._lock = threading.Lock()
        self._closed, self._next_chunk = False, 1
        self._workers: list[_Worker] = [self._start(spare=False) for _ in range(self.size)]
        try:
            _await_started(self._workers)
        except RuntimeError:
            for w in self._workers:
                w.kill()
            raise
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._loop, name="reward-pool", daemon=True)
        self._thread.start()

    # -- callers ---------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task], timeout_s: float | Sequence[float]) -> list[Outcome]:
        """Verify every task; each gets at most ``timeout_s`` of wall-clock time in a worker
        (one limit for all, or one a task)."""
        job = self.submit(tasks, timeout_s)
        while not job.done.wait(1.0):
            if not self._thread.is_alive():
                return [r or (0.0, "pool", "the worker pool stopped") for r in job.results]
        return job.results  # type: ignore[return-value]

    def submit(
        self, tasks: Sequence[Task], timeout_s: float | Sequence[float], callback: Any = None
    ) -> _Job:
        """Queue ``tasks``; ``callback(outcomes)`` runs on the dispatcher thread when done."""
        limits = [timeout_s] * len(tasks) if isinstance(timeout_s, (int, float)) else timeout_s
        if len(limits) != len(tasks):
            raise ValueError(f"{len(limits)} timeouts for {len(tasks)} tasks")
        job = _Job(len(tasks), callback)
        if self._closed or not self._thread.is_alive():
            job.results = [(0.0, "pool", "the worker pool is closed or stopped")] * len(tasks)
            job.remaining = 0
            job.finish()
            return job
        with self._lock:
            self._pending.extend(
                _Entry(job, i, t, float(lim))
                for i, (t, lim) in enumerate(zip(tasks, limits, strict=True))
            )
        self._wake()
        return job

    def close(self) -> None:
        self._closed = True
        self._wake()
        self._thread.join(5.0)
        for w in self._workers:
            with contextlib.suppress(Exception):
                w.conn.send(None)
            w.kill()
        self._workers = []
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    # -- dispatcher thread -----------------------------------------------------------------
    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _start(self, spare: bool) -> _Worker:
        self.stats["started"] += 1
        self.stats["spares_started"] += spare
        return _Worker(self._ctx, self.memory_limit_mb, spare)

    def _loop(self) -> None:
        try:
            while not self._closed:
                self._assign()
                busy = [w for w in self._workers if w.chunk is not None]
                waitables: dict[Any, tuple[_Worker, bool]] = {}
                for w in busy:
                    waitables[w.conn] = (w, True)
                    waitables[w.proc.sentinel] = (w, False)
                idle_wait = 1.0 if any(w.spare for w in self._workers) else None
                ready = wait_any([self._wake_r, *waitables], timeout=_TICK_S if busy else idle_wait)
                for obj in ready:
                    if obj == self._wake_r:
                        os.read(self._wake_r, 4096)
                    elif obj in waitables:
                        self._collect(*waitables[obj])
                self._check_overruns()
                self._steal()
                self._adjust_spares()
        except BaseException as e:  # fail every waiting caller loudly rather than hang them
            self._fail_all(f"pool dispatcher failed: {type(e).__name__}: {e}")
            raise
        self._fail_all("the worker pool is closed")

    def _assign(self) -> None:
        idle = [w for w in self._workers if w.chunk is None]
        if not idle:
            return
        with self._lock:
            if not self._pending:
                return
            share = math.ceil(len(self._pending) / len(self._workers))
            size = max(1, min(self.chunk_max, share))
            plan = []
            for w in idle:
                if not self._pending:
                    break
                plan.append(
                    (w, [self._pending.popleft() for _ in range(min(size, len(self._pending)))])
                )
        for w, chunk in plan:
            w.chunk, w.chunk_id = chunk, self._next_chunk
            w.progress[3] = len(chunk)
            self._next_chunk += 1
            try:
                w.conn.send((w.chunk_id, [e.task for e in chunk]))
            except (OSError, ValueError):
                self._lost(w, culprit=None, error="crash", detail="worker pipe broken")
            except Exception:  # a task that cannot be pickled: nothing was written to the pipe
                self._unsendable(w)

    def _unsendable(self, w: _Worker) -> None:
        """Fail the tasks of ``w``'s chunk that cannot be sent to a worker (nested too deep
        to pickle, an object of no picklable type) and queue the others again."""
        chunk, w.chunk = w.chunk or [], None
        sendable = []
        for entry in chunk:
            try:
                pickle.dumps(entry.task)
            except Exception as e:
                self._deliver(
                    entry, (0.0, "request", f"cannot pass to a verifier: {type(e).__name__}")
                )
            else:
                sendable.append(entry)
        with self._lock:
            self._pending.extendleft(reversed(sendable))
        self._wake()  # the loop would otherwise sleep with them queued and every worker idle

    @property
    def healthy(self) -> bool:
        """The dispatcher is running: submitted items will be scored."""
        return self._thread.is_alive() and not self._closed

    def _collect(self, w: _Worker, is_conn: bool) -> None:
        if w.chunk is None:
            return
        if is_conn or w.conn.poll():
            try:
                chunk_id, outcomes = w.conn.recv()
            except (EOFError, OSError):
                pass
            else:
                if chunk_id == w.chunk_id:
                    chunk, w.chunk = w.chunk, None
                    w.idle_since = time.monotonic()
                    for entry, outcome in zip(chunk, outcomes, strict=False):
                        self._deliver(entry, outcome)
                return
        if not w.proc.is_alive():
            cur = w.current()
            code = w.proc.exitcode
            self.stats["crashed"] += 1
            self._lost(w, cur[0] if cur else None, "crash", f"worker died (exit code {code})")

    def _check_overruns(self) -> None:
        now = time.monotonic()
        for w in list(self._workers):
            if w.chunk is None:
                continue
            cur = w.current()
            if cur is None:
                continue
            pos, start = cur
            if pos >= len(w.chunk):  # a taken-back item it started anyway; it runs elsewhere too
                pos, limit = -1, max(e.timeout_s for e in w.chunk)
            else:
                limit = w.chunk[pos].timeout_s
            if now - start > limit and not w.conn.poll():
                self.stats["killed"] += 1
                self._lost(w, pos, "timeout", f"no result within {limit:g} s; worker killed")

    def _steal(self) -> None:
        """Take back the unstarted rest of a chunk stuck behind a slow item."""
        now = time.monotonic()
        for w in self._workers:
            cur = w.current() if w.chunk is not None else None
            if cur is None or now - cur[1] < self.spare_after_s or len(w.chunk) <= cur[0] + 1:
                continue
            keep = cur[0] + 1
            w.progress[3] = keep
            rest, w.chunk = w.chunk[keep:], w.chunk[:keep]
            with self._lock:
                self._pending.extendleft(reversed(rest))

    def _lost(self, w: _Worker, culprit: int | None, error: str, detail: str) -> None:
        """Kill and replace ``w``; fail its culprit item, re-queue the innocent rest."""
        chunk, w.chunk = w.chunk or [], None
        w.kill()
        requeue = []
        for pos, entry in enumerate(chunk):
            if pos == culprit or culprit is None and entry.attempts >= 1:
                self._deliver(entry, (0.0, error, detail))
            else:
                entry.attempts += culprit is None
                requeue.append(entry)
        with self._lock:
            self._pending.extendleft(reversed(requeue))
        i = self._workers.index(w)
        if self._closed:
            del self._workers[i]
        else:
            self._workers[i] = self._start(spare=w.spare)

    def _adjust_spares(self) -> None:
        now = time.monotonic()
        spares = [w for w in self._workers if w.spare]
        for w in spares:
            if w.chunk is None and now - w.idle_since > _SPARE_IDLE_S:
                with contextlib.suppress(Exception):
                    w.conn.send(None)
                w.kill()
                self._workers.remove(w)
        if len(spares) >= self.max_spares or not self._pending:
            return
        for w in self._workers:
            cur = w.current() if w.chunk is not None else None
            if cur is None or now - cur[1] < self.spare_after_s:
                return
        self._workers.append(self._start(spare=True))

    def _deliver(self, entry: _Entry, outcome: Outcome) -> None:
        job = entry.job
        if job.results[entry.index] is None:
            job.results[entry.index] = outcome
            job.remaining -= 1
            if job.remaining == 0:
                job.finish()

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            entries, self._pending = list(self._pending), deque()
        for w in self._workers:
            entries.extend(w.chunk or [])
        for entry in entries:
            self._deliver(entry, (0.0, "pool", reason))
