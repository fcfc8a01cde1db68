"""What a pretraining or SFT run trains on, recorded when it starts from step 0: each training
file's path, size and SHA-256, in ``RUN_DIR/train_data.json``.

The run's checkpoints hold a step count, an optimizer state and a place in the shuffled order
of those files' examples, so a resumed run is given the same examples or is refused
(``cluster.resume_check.check_resume_examples``). The files may move; their content, their
number and their order may not. The images the rows name are not part of the record.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TRAIN_DATA_FILE = "train_data.json"


def fingerprint(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Each file's path, size and SHA-256 of its bytes, in the order given."""
    out = []
    for path in paths:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        out.append({"path": str(path), "bytes": path.stat().st_size,
                    "sha256": digest.hexdigest()})  # fmt: skip
    return out


def record_train_data(run_dir: Path, paths: Sequence[Path]) -> None:
    """Write the fingerprint of ``paths``, the run's training files, into its directory."""
    path = run_dir / TRAIN_DATA_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"files": fingerprint(paths)}, indent=1))
    tmp.replace(path)


def recorded_train_data(run_dir: Path) -> list[dict[str, Any]] | None:
    """The fingerprint the run recorded at its start; None for a run made before the record
    existed, or one whose record cannot be read (said in a warning: its data is not checked)."""
    path = run_dir / TRAIN_DATA_FILE
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        if all(isinstance(f["sha256"], str) for f in files):
            return files
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        pass
    log.warning("%s cannot be read: the resumed run's training data is not compared with the "
                "data it started with", path)  # fmt: skip
    return None


def data_changes(saved: list[dict[str, Any]], now: list[dict[str, Any]]) -> list[str]:
    """How the files ``now`` differ from those ``saved`` (their fingerprints); empty when they
    hold the same bytes in the same order, wherever they are."""
    if [f["sha256"] for f in saved] == [f["sha256"] for f in now]:
        return []
    was = {f["path"]: f for f in saved}
    paths_now = {f["path"] for f in now}
    digests_was, digests_now = {f["sha256"] for f in saved}, {f["sha256"] for f in now}
    out = []
    for f in now:
        old = was.get(f["path"])
        if old is not None and old["sha256"] != f["sha256"]:
            out.append(f"{f['path']} changed ({old['bytes']} -> {f['bytes']} bytes)")
        elif old is None and f["sha256"] not in digests_was:
            out.append(f"{f['path']} added")
    out += [f"{f['path']} left out" for f in saved
            if f["path"] not in paths_now and f["sha256"] not in digests_now]  # fmt: skip
    if not out:
        out.append("the same files in another order or number")
    return out
