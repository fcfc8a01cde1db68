"""Dataset items, trajectories, and the JSONL/Parquet loader.

An item is one prompt with its verifiable answer. Images are paths relative to the dataset
file, or base64 strings (optionally ``data:image/...;base64,`` URLs). Loading validates every
row and fails on the first bad one with the file, the line (or row) and the reason.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

#: Domains with a built-in verifier. More can be registered through the reward registry.
KNOWN_DOMAINS: frozenset[str] = frozenset({"math", "chart", "ocr", "grounding", "gui", "vqa"})


class DatasetError(ValueError):
    """A dataset row that cannot be used: names the file, the line and the reason."""

    def __init__(self, file: str | Path, line: int | None, reason: str):
        self.file, self.line, self.reason = str(file), line, reason
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"{where}: {reason}")


class Item(BaseModel):
    """One training or evaluation prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    domain: str
    prompt: str
    images: list[str] = Field(default_factory=list)
    answer: Any = None
    difficulty: float | str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


@dataclass
class Trajectory:
    """One rollout of one item, as produced by a rollout worker and scored by the reward pool."""

    item_id: str
    response: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    forced_answer: bool = False
    prompt_token_ids: list[int] = field(default_factory=list)
    reward: float | None = None
    reward_detail: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decode_image(ref: str, base_dir: Path) -> Image.Image:
    """Open an image given as a path relative to ``base_dir`` or as base64; raises ValueError.

    ``data:image/...;base64,`` URLs are base64. A plain string is a path if such a file exists,
    and otherwise is tried as bare base64.
    """
    if ref.startswith("data:"):
        raw = _b64(ref.partition(",")[2])
    else:
        path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
        if path.is_file():
            raw = path.read_bytes()
        elif len(ref) >= 64 and _B64_RE.fullmatch(ref):
            raw = _b64(ref)
        else:
            raise ValueError(f"image not found: {path}")
    try:
        img = Image.open(io.BytesIO(raw))
        img.load()
    except UnidentifiedImageError:  # PIL's message names only its in-memory buffer
        raise ValueError(f"unreadable image (not an image format PIL can open; {len(raw)} "
                         "bytes)") from None  # fmt: skip
    except OSError as e:
        raise ValueError(f"unreadable image ({e.__class__.__name__}: {e})") from None
    return img.convert("RGB")


_B64_RE = re.compile(r"[A-Za-z0-9+/\s]+=*")


def inline_images(item: Item, base_dir: Path = Path("/")) -> Item:
    """The item with each image that is a file (a path, relative to ``base_dir``) replaced by
    its bytes as a ``data:`` URL, unchanged; base64 images stay as they are. The bytes are
    not decoded nor re-encoded. Raises ValueError naming the item when a file cannot be read."""
    refs = []
    for ref in item.images:
        path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
        if ref.startswith("data:") or not path.is_file():
            refs.append(ref)  # base64 already, or not a file: decode_image will say which
            continue
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise ValueError(f"item {item.id!r}: cannot read image {path}: {e.strerror}") from None
        mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
        refs.append(f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}")
    return item.model_copy(update={"images": refs}) if item.images else item


_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
         ".gif": "image/gif", ".bmp": "image/bmp", ".tif": "image/tiff", ".tiff": "image/tiff"}  # fmt: skip


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"invalid base64 image: {e}") from None


def read_rows(path: Path):
    """Yield (line_number, row) from a JSONL or Parquet file; bad JSON, a line that is not
    UTF-8 and a row that is not an object are each a ``DatasetError``."""
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".json"}:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(path, lineno, f"not UTF-8 text ({e.reason})") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetError(path, lineno, f"invalid JSON: {e.msg}") from None
                if not isinstance(row, dict):
                    raise DatasetError(path, lineno, "a row must be a JSON object")
                yield lineno, row
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        for i, row in enumerate(table.to_pylist(), start=1):
            yield i, {k: v for k, v in row.items() if v is not None}
    else:
        raise DatasetError(path, None, f"unsupported file type {suffix!r} (use .jsonl or .parquet)")


def load_items(
    paths: str | Path | list[str | Path],
    domains: frozenset[str] | set[str] | None = None,
    check_images: bool = True,
) -> list[Item]:
    """Load and validate items from one or more JSONL/Parquet files.

    Raises ``DatasetError`` on the first bad row: missing or duplicate ``id``, unknown domain,
    an unreadable image, or a malformed row.
    """
    allowed = frozenset(domains) if domains is not None else KNOWN_DOMAINS
    if isinstance(paths, (str, Path)):
        paths = [paths]
    items: list[Item] = []
    seen: dict[str, tuple[str, int]] = {}
    for p in map(Path, paths):
        if not p.is_file():
            raise DatasetError(p, None, "a directory, not a dataset file" if p.is_dir()
                               else "dataset file not found")  # fmt: skip
        for lineno, row in read_rows(p):
            if not isinstance(row, dict):
                raise DatasetError(p, lineno, "a row must be a JSON object")
            if "id" not in row or row["id"] in (None, ""):
                raise DatasetError(p, lineno, "missing 'id'")
            try:
                item = Item.model_validate(row)
            except ValidationError as e:
                first = e.errors()[0]
                key = ".".join(str(x) for x in first["loc"])
                msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
                raise DatasetError(p, lineno, f"{key}: {msg}") from None
            if item.domain not in allowed:
                raise DatasetError(
                    p,
                    lineno,
                    f"unknown domain {item.domain!r} (known: {', '.join(sorted(allowed))})",
                )
            if item.id in seen:
                f0, l0 = seen[item.id]
                raise DatasetError(p, lineno, f"duplicate id {item.id!r} (first at {f0}:{l0})")
            seen[item.id] = (str(p), lineno)
            if check_images:
                for ref in item.images:
                    try:
                        decode_image(ref, p.parent)
                    except ValueError as e:
                        raise DatasetError(p, lineno, f"image {_short(ref)}: {e}") from None
            items.append(item)
    return items


def _short(ref: str) -> str:
    return repr(ref if len(ref) <= 60 else ref[:57] + "...")


def check_output_file(path: str | Path, flag: str = "--out", overwrite: bool = True) -> Path:
    """Check, before any work, that a result can be written at ``path`` (its folder is made),
    so that a long run does not end in an error that loses what it computed; without
    ``overwrite``, an existing file there is refused rather than replaced."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    if not overwrite and path.exists():
        raise ValueError(f"{flag} {path} exists; give another file, or --overwrite to replace it")
    parent = path.parent
    existing = next(d for d in (parent, *parent.parents) if d.exists())
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, not a folder")
    make_writable_dir(parent, f"{flag} {path}: its folder")
    return path


def make_writable_dir(folder: Path, what: str) -> Path:
    """Create ``folder`` (and its parents) and check that it can be written in; a ValueError
    beginning with ``what`` otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what} {folder} cannot be created: {e.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what} {folder} is not writable")
    return folder


def write_jsonl(items: list[Item] | list[dict], path: str | Path) -> Path:
    """Write items as JSONL, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for it in items:
            row = it.model_dump(exclude_defaults=False) if isinstance(it, Item) else it
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
