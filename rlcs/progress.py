"""Progress bars that read well both in a terminal and in a log.

In a terminal a bar redraws itself in place. Written to a file or a pipe (CI, ``ray job
submit``'s job log, ``nohup ... > run.log``) the same redraws would be carriage-return updates
many times a second, run together on one line of the log. There, a bar instead writes a plain
line of its state at most every ``LOG_INTERVAL_S`` seconds (and when it starts and ends).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm import tqdm

#: seconds between a bar's lines in a log (not a terminal); ``RLCS_PROGRESS_INTERVAL`` overrides
LOG_INTERVAL_S = 30.0


def log_interval_s() -> float:
    """``RLCS_PROGRESS_INTERVAL`` if set (seconds, at least 0), else ``LOG_INTERVAL_S``."""
    raw = os.environ.get("RLCS_PROGRESS_INTERVAL")
    if raw is None or raw.strip() == "":
        return LOG_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"RLCS_PROGRESS_INTERVAL must be a number of seconds, got {raw!r}"
        ) from None
    if not value >= 0.0:  # also refuses nan
        raise ValueError(f"RLCS_PROGRESS_INTERVAL must be at least 0 seconds, got {raw!r}")
    return value


class LineWriter:
    """A text stream for a bar in a log: each redraw becomes one line of its own.

    tqdm draws a bar as ``"\\r" + state`` padded with spaces, and clears it with ``"\\r"`` and
    spaces; here the carriage returns and padding go, empty writes are dropped, and what is
    left ends with a newline."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


class _LogBar(tqdm):
    """A bar in a log: a new postfix waits for the next line instead of writing one at once."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(iterable: Iterable[Any] | None = None, **kwargs: Any) -> tqdm:
    """``tqdm(iterable, **kwargs)``, writing to ``kwargs["file"]`` (default stderr) as a bar in a
    terminal and as a line every ``log_interval_s()`` seconds anywhere else."""
    stream = kwargs.pop("file", None) or sys.stderr
    if not _is_terminal(stream):
        kwargs["file"] = LineWriter(stream)
        kwargs["mininterval"] = max(kwargs.get("mininterval", 0.0), log_interval_s())
        # tqdm's monitor would otherwise redraw a slow bar every maxinterval (10 s)
        kwargs["maxinterval"] = max(kwargs.get("maxinterval", 10.0), kwargs["mininterval"])
        kwargs.setdefault("ascii", True)
        kwargs.setdefault("ncols", 100)  # no terminal width to follow
        kwargs["dynamic_ncols"] = False
        return _LogBar(iterable, **kwargs)
    return tqdm(iterable, file=stream, **kwargs)
