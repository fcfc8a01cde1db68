"""Dataset items, trajectories, and the JSONL/Parquet loader (images: ``rlcs.images``).

An item is one prompt with its verifiable answer. Images are paths relative to the dataset
file, or base64 strings, standard or URL-safe, padded or not (optionally
``data:image/...;base64,`` URLs). Loading validates every row and fails on the first bad one
with the file, the line (or row) and the reason.
"""

from __future__ import annotations

import base64
import difflib
import json
import math
import os
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlcs.images import IMAGE_CHECKS, ImageCheck, check_image

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
    #: a multiple-choice item's options, lettered A, B, ... in order; its ``answer`` is then
    #: the right one's letter. How the item is asked is ``data.multiple_choice`` (``as_asked``)
    choices: list[str] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_str(cls, v: Any) -> Any:
        """An integer id as its text; an id of only whitespace is refused: it prints as
        nothing in every log, report and sample that names the item."""
        if isinstance(v, str) and v and not v.strip():
            raise ValueError(
                f"only whitespace ({v!r}); give each item a unique id that is not blank"
            )
        if isinstance(v, str) and "\x00" in v:
            # the curriculum keeps ids as NUL-padded bytes: "a\x00" would come back as "a"
            raise ValueError(f"holds a NUL character ({v!r}); give each item an id without one")
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("difficulty", mode="before")
    @classmethod
    def _difficulty_rate_or_tier(cls, v: Any) -> Any:
        """A pass rate in [0, 1] or a tier name (checked against the tiers where the curriculum's
        are known: ``load_items(tiers=...)``); a bool, NaN or a rate out of range is an error."""
        if isinstance(v, bool) or not isinstance(v, (int, float, str, type(None))):
            raise ValueError(f"must be a pass rate in [0, 1] or a tier name, got {v!r}")
        if isinstance(v, (int, float)) and not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ValueError(f"a pass rate must be in [0, 1], got {v!r}")
        if isinstance(v, str) and not v.strip():
            raise ValueError("an empty tier name")
        return v

    @field_validator("choices")
    @classmethod
    def _lettered_options(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not 2 <= len(v) <= len(LETTERS):
            raise ValueError(f"give 2 to {len(LETTERS)} options (lettered A-Z), got {len(v)}")
        blank = [LETTERS[k] for k, text in enumerate(v) if not text.strip()]
        if blank:
            raise ValueError(f"option {blank[0]} is blank")
        return v

    @model_validator(mode="after")
    def _something_to_answer(self) -> Item:
        if not self.prompt.strip() and not self.images:
            raise ValueError("prompt: empty, and the item has no images: nothing to answer")
        if self.choices is not None and choice_index(self.answer, len(self.choices)) is None:
            last = LETTERS[len(self.choices) - 1]
            raise ValueError(
                f"answer: an item with choices is answered by the right option's letter, A to "
                f"{last}; got {self.answer!r}"
            )
        return self


#: the letters a multiple-choice item's options are named by, in order
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LETTER = re.compile(r"^\(?([A-Za-z])\)?\.?$")
#: how a multiple-choice item is asked (``data.multiple_choice``)
MULTIPLE_CHOICE = ("fill_in", "letter")


def choice_index(answer: Any, n: int) -> int | None:
    """The option ``answer`` names (``B``, ``(b)``, ``B.``) among ``n``, or None."""
    m = _LETTER.match(answer.strip()) if isinstance(answer, str) else None
    k = LETTERS.index(m.group(1).upper()) if m else -1
    return k if 0 <= k < n else None


def as_asked(item: Item, multiple_choice: str = "fill_in") -> Item:
    """A multiple-choice item as a run asks it; any other item as it is. ``fill_in`` (the
    recipe's: a guess among four letters is right a quarter of the time, a reward for
    nothing): the prompt alone, and the right option's text as the answer, which the domain's
    verifier compares by value. ``letter``: the options listed under the prompt as ``(A)
    ...``, and the letter as the answer. For questions that need their options to make sense
    ("which of these ..."), use ``letter``."""
    if item.choices is None:
        return item
    if multiple_choice not in MULTIPLE_CHOICE:
        raise ValueError(f"multiple_choice must be one of {', '.join(MULTIPLE_CHOICE)}, got "
                         f"{multiple_choice!r}")  # fmt: skip
    k = choice_index(item.answer, len(item.choices))
    if k is None:  # Item's own check refuses such an item; a copy made without it may not
        raise ValueError(f"item {item.id!r}: answer {item.answer!r} names none of its choices")
    if multiple_choice == "fill_in":
        return item.model_copy(update={"choices": None, "answer": item.choices[k]})
    listed = "\n".join(f"({LETTERS[j]}) {text}" for j, text in enumerate(item.choices))
    prompt = f"{item.prompt.rstrip()}\n{listed}" if item.prompt.strip() else listed
    return item.model_copy(update={"choices": None, "prompt": prompt, "answer": LETTERS[k]})


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
    #: indices in ``token_ids`` of the tokens the budget appended (``</think><answer>`` of a
    #: force-answered rollout): chosen, not sampled, so the learner does not train on them
    forced_positions: list[int] = field(default_factory=list)
    reward: float | None = None
    reward_detail: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_rows(path: Path):
    """Yield (line_number, row) from a JSONL or Parquet file; bad JSON, a key given twice in
    one object, a line that is not UTF-8, a row that is not an object and a file that cannot
    be read are each a ``DatasetError``. A UTF-8 byte order mark before the first line is
    skipped. A Parquet row leaves out its null columns and the null fields of its structs
    (Parquet gives every row of a struct column every field any row has); its map columns
    become objects, raw image bytes base64 ``data:`` URLs, and the index column pandas may
    write is left out."""
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".json"}:
        # a .json file is read as JSON Lines too; one holding a whole document is told so
        hint = " (a .json file is read as JSON Lines: one object per line)" * (suffix == ".json")
        try:
            f = path.open("rb")
        except OSError as e:
            raise DatasetError(path, None, f"cannot read: {e.strerror}") from None
        with f:
            first = True
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(path, lineno, f"not UTF-8 text ({e.reason})") from None
                if lineno == 1:
                    line = line.removeprefix("\ufeff")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line, object_pairs_hook=_unique_keys)
                except json.JSONDecodeError as e:
                    raise DatasetError(path, lineno, f"invalid JSON: {e.msg}"
                                       + (hint if first else "")) from None  # fmt: skip
                except _RepeatedKey as e:
                    raise DatasetError(path, lineno, str(e)) from None
                if not isinstance(row, dict):
                    raise DatasetError(path, lineno, "a row must be a JSON object"
                                       + (hint if first else ""))  # fmt: skip
                first = False
                yield lineno, row
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
            # the index pandas' to_parquet writes as a column (of a filtered frame) is no field
            index = [c for c in table.column_names if re.fullmatch(r"__index_level_\d+__", c)]
            rows = table.drop_columns(index).to_pylist(maps_as_pydicts="strict")
        except OSError as e:  # a missing or unreadable file
            raise DatasetError(path, None, f"cannot read: {e.strerror or e}") from None
        except (pa.ArrowException, KeyError) as e:  # not Parquet; a map with a repeated key
            raise DatasetError(path, None, f"not a readable Parquet file ({e})") from None
        for i, row in enumerate(rows, start=1):
            row = {k: _without_nulls(v) for k, v in row.items() if v is not None}
            if isinstance(row.get("images"), list):
                row["images"] = [_bytes_as_data_url(x) for x in row["images"]]
            yield i, row
    else:
        raise DatasetError(path, None, f"unsupported file type {suffix!r} (use .jsonl or .parquet)")


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (``json`` keeps the last silently)."""
    row = dict(pairs)
    if len(row) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _RepeatedKey(f"key {key!r} given twice in one object")
    return row


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _bytes_as_data_url(ref: Any) -> Any:
    if isinstance(ref, bytes):
        return "data:application/octet-stream;base64," + base64.b64encode(ref).decode("ascii")
    return ref


def load_items(
    paths: str | Path | list[str | Path],
    domains: frozenset[str] | set[str] | None = None,
    check_images: bool | ImageCheck = True,
    tiers: Collection[str] | None = None,
) -> list[Item]:
    """Load and validate items from one or more JSONL/Parquet files.

    Raises ``DatasetError`` on the first bad row: missing or duplicate ``id``, unknown domain,
    a ``difficulty`` that is no pass rate in [0, 1] nor one of ``tiers`` (the curriculum's
    tier names; any name where None), or a malformed row; then on the first unreadable image,
    checked as ``check_images`` says (``check_image``; True is ``decode``, False ``off``).
    """
    how = image_check_mode(check_images, "check_images")
    allowed = frozenset(domains) if domains is not None else KNOWN_DOMAINS
    if isinstance(paths, (str, Path)):
        paths = [paths]
    items: list[Item] = []
    seen: dict[str, tuple[str, int]] = {}
    with_images: list[tuple[Path, int | None, list[str]]] = []
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
                msg = first["msg"].removeprefix("Value error, ")
                if first["type"] == "extra_forbidden":
                    near = difflib.get_close_matches(key, Item.model_fields, n=1)
                    msg = "unknown field" + (f" (did you mean {near[0]!r}?)" if near else "")
                raise DatasetError(p, lineno, f"{key}: {msg}" if key else msg) from None
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
            tier = item.difficulty if isinstance(item.difficulty, str) else None
            if tiers is not None and tier is not None and tier not in tiers:
                raise DatasetError(p, lineno, f"difficulty: unknown tier {tier!r}: give "
                                   f"a pass rate in [0, 1], or one of {', '.join(tiers)}")  # fmt: skip
            if item.images:
                with_images.append((p, lineno, item.images))
            items.append(item)
    check_row_images(with_images, how)  # after every cheaper check: it may take long
    return items


def image_check_mode(value: bool | str, name: str) -> ImageCheck:
    """``value`` as an ``ImageCheck`` (True: ``decode``, False: ``off``); a ValueError naming
    ``name`` otherwise."""
    if isinstance(value, bool):
        return "decode" if value else "off"
    if value not in IMAGE_CHECKS:
        raise ValueError(f"{name} must be {', '.join(IMAGE_CHECKS[:-1])} or {IMAGE_CHECKS[-1]}, "
                         f"got {value!r}")  # fmt: skip
    return value  # type: ignore[return-value]


#: rows with images above which their check shows a progress bar
PROGRESS_MIN_ROWS = 1000


def check_row_images(rows: list[tuple[Path, int | None, list[str]]], how: ImageCheck) -> None:
    """Check the images of ``rows`` (dataset file, line, image references) as ``how`` says
    (``check_image``); a ``DatasetError`` naming the first that fails. Over
    ``PROGRESS_MIN_ROWS`` rows, under a progress bar: a large corpus takes minutes."""
    if how == "off" or not rows:
        return
    from rlcs.progress import progress_bar

    quiet = len(rows) <= PROGRESS_MIN_ROWS
    with progress_bar(
        total=len(rows), desc=f"checking images ({how})", unit="row", disable=quiet
    ) as bar:
        for path, line, refs in rows:  # a failure closes the bar before its message shows
            open_images(refs, path, line, how)
            bar.update()


def open_images(refs: list[str], path: Path, line: int | None, how: ImageCheck = "decode") -> None:
    """Check that each image of the row at ``path:line`` opens (a path relative to the
    dataset file's folder, or base64), as ``how`` says (``check_image``); a ``DatasetError``
    naming the first that does not."""
    for ref in refs:
        try:
            check_image(ref, path.parent, how)
        except ValueError as e:
            raise DatasetError(path, line, f"image {_short(ref)}: {e}") from None


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
            if isinstance(it, Item) and it.choices is None:
                del row["choices"]  # an item without options is written as it always was
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
