"""What `rlcs grade` has graded so far, kept beside its output so that an interrupted grading
(Ctrl-C, a lost node, a killed job) goes on where it stopped when the same command runs again.

``OUT.partial`` is JSONL: a first line with the grading's settings (model, samples, temperature,
threshold, inputs), then one line per graded item with its passing and scored answers and its
answers' errors by kind, appended as each batch comes back. A partial file with other settings
is set aside, as ``OUT.partial.stale``, and the grading starts over. The file is removed when
the graded output has been written.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cluster.grade import tally
from rewards.base import is_unscorable

log = logging.getLogger(__name__)


class GradeProgress:
    """Each graded item's passing and scored answers and errors, by id; kept in
    ``OUT.partial`` when given ``out``, else in memory only. ``settings`` holds the pass
    ``threshold`` (and, with a file, whatever else must match to continue)."""

    def __init__(self, out: Path | None, settings: dict[str, Any]):
        self.path = out.with_name(out.name + ".partial") if out is not None else None
        self.settings = settings
        self.done: dict[str, dict[str, Any]] = {}
        if self.path is None:
            return
        if self.path.is_file():
            self._load()
        if not self.path.is_file():
            self._write_line(settings, mode="w")

    def _load(self) -> None:
        data = self.path.read_bytes()
        lines = data.decode("utf-8", errors="replace").splitlines()
        try:
            head = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            head = None
        if head != self.settings:
            stale = self.path.with_name(self.path.name + ".stale")
            log.warning("%s is from a grading with other settings: set aside as %s; grading "
                        "starts over", self.path, stale)  # fmt: skip
            self.path.replace(stale)
            return
        if not data.endswith(b"\n"):
            self._mend_last_line(data)
        for line in lines[1:]:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # the last line, cut short by the interruption
                continue
            self.done[rec["id"]] = rec

    def _mend_last_line(self, data: bytes) -> None:
        """End the kept file with a newline before anything is appended to it. The
        interruption left its last line without one: a line that reads whole (only its newline
        was lost) gets it; a line cut short is cut off, as its item is graded again. Appended
        onto such a line, the next batch's first item would be unreadable on the next resume."""
        start = data.rfind(b"\n") + 1
        try:
            whole = isinstance(json.loads(data[start:]), dict)
        except ValueError:  # cut short, or cut inside a character
            whole = False
        with self.path.open("r+b") as f:
            if whole:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
            else:
                f.truncate(start)
            f.flush()
            os.fsync(f.fileno())

    def _write_line(self, obj: dict[str, Any], mode: str = "a") -> None:
        with self.path.open(mode, encoding="utf-8") as f:
            f.write(json.dumps(obj) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        """Record one batch's scored answers (`cluster.evaluate.answer_records`' records),
        item by item: its answers reaching the threshold, those the verifiers scored, and the
        errors by kind (counted as `cluster.grade.tally` counts them)."""
        by_item: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            by_item.setdefault(r["id"], []).append(r)
        per = {}
        for i, rs in by_item.items():
            passed, errors = tally(rs, self.settings["threshold"])
            scored = sum(not is_unscorable(r["error"]) for r in rs)
            per[i] = {"id": i, "passed": passed[i], "scored": scored, "errors": dict(errors)}
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                for rec in per.values():
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self.done.update(per)

    def rates(self, ids: Sequence[str]) -> tuple[dict[str, float | None], Counter[str]]:
        """Each item's pass rate over its scored answers (None without any), and the errors by
        kind (an item without a record: None, no errors)."""
        errors: Counter[str] = Counter()
        out: dict[str, float | None] = {}
        for i in ids:
            rec = self.done.get(i, {"passed": 0, "scored": 0, "errors": {}})
            errors.update(rec["errors"])
            out[i] = rec["passed"] / rec["scored"] if rec["scored"] else None
        return out, errors

    def finish(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
