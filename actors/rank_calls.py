"""One call on every rank of a group whose ranks meet in collectives (the learner's), gathered
so that one rank's failure does not leave the caller waiting for ever on the others. Only Ray
here: the driver's modules that handle ``RanksStuck`` import it without torch."""

from __future__ import annotations

import time
from typing import Any

import ray


def own_error(e: BaseException) -> BaseException:
    """The exception a remote method raised itself: a ``RayTaskError`` carries it as its
    ``cause``; any other exception is its own."""
    return getattr(e, "cause", None) or e


class RanksStuck(RuntimeError):
    """A rank failed a collective call and others never finished it (see ``gather_ranks``)."""


def gather_ranks(refs: list[Any], what: str, grace_s: float) -> list[Any]:
    """The results of one call on every rank (``refs`` in rank order), like ``ray.get``, but a
    rank's failure does not leave the caller waiting on the others for ever: they are given
    ``grace_s`` to finish. If they all do, the first failure is raised as ``ray.get`` raises it
    (the group is intact: the ranks failed alike, e.g. a checkpoint folder that is not there).
    Ranks still busy by then wait for the failed one in a collective (a barrier, a gather, a
    gradient reduce) that can no longer complete; ``RanksStuck`` says which rank failed, how,
    and which ones are stuck."""
    index = {ref: rank for rank, ref in enumerate(refs)}
    pending = list(refs)
    failed: tuple[int, BaseException] | None = None
    deadline = None
    while pending:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        done, pending = ray.wait(pending, num_returns=1, timeout=timeout)
        if not done:
            break
        if failed is None:
            try:
                ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - any rank error, raised again below
                failed = (index[done[0]], e)
                deadline = time.monotonic() + grace_s
    if failed is None:
        return ray.get(refs)
    rank, error = failed
    if not pending:
        raise error
    stuck = ", ".join(str(index[r]) for r in pending)
    cause = own_error(error)
    raise RanksStuck(
        f"learner rank {rank} failed in {what} ({type(cause).__name__}: {cause}), "
        f"and rank(s) {stuck} had not finished it "
        f"{grace_s:.0f}s later: they wait for rank {rank} in a collective that cannot "
        "complete, so the learner group was shut down (the whole error is chained below)"
    ) from error
