"""A config's text, before the schema sees it: the YAML file (a key given twice in one mapping
is an error), ``--set key=value`` overrides, and validation errors that name the key and where
its value came from. The schema itself is :mod:`rlcs.config`."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


class _UniqueKeyLoader(yaml.SafeLoader):
    """The plain loader keeps the last of two equal keys and silently drops the first: for a
    config, a whole section."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, str] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first {seen[key]})", key_node.start_mark
                )
            seen[key] = f"on line {key_node.start_mark.line + 1}"
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, name: str | None = None) -> Any:
    """Parse YAML text as ``yaml.safe_load`` does; a repeated key raises ``yaml.YAMLError``.
    ``name`` (the file's) is what a syntax error's position names, in place of the reader's
    ``<unicode string>``."""
    loader = _UniqueKeyLoader(text)
    if name is not None:
        loader.name = name
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_config_file(path: str | Path) -> dict:
    """The mapping a YAML config file holds; a ``ConfigError`` says what is wrong with it."""
    source, p = str(path), Path(path)
    if p.is_dir():
        raise ConfigError(f"{source}: is a directory, not a config file")
    if not p.is_file():
        raise ConfigError(f"{source}: config file not found")
    try:
        loaded = load_yaml(p.read_text(encoding="utf-8"), name=source)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{source}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{source}: top level must be a mapping of sections")
    return loaded or {}


class ConfigError(ValueError):
    """A config problem, naming the key and where its value came from."""


def format_errors(
    err: ValidationError, source: str, overridden: set[str], schema: type[BaseModel] | None = None
) -> str:
    """One line per error: where the value came from, its key, what is wrong; an unknown key
    of ``schema`` with the nearest known one ("did you mean")."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        # a value set with --set is blamed on it: the key it set, the keys inside a mapping it
        # set, and the section holding a key it set (an unknown section, a section's own check)
        by_set = any(
            key == o or key.startswith(o + ".") or o.startswith(key + ".") for o in overridden
        )
        origin = "--set" if by_set else source
        msg = e["msg"]
        if e["type"] in ("value_error", "assertion_error"):
            # a check of the schema's own: its message is the text it raised, without the
            # "Value error, " pydantic puts before it
            msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
            known = _keys_of(schema, e["loc"][:-1]) if schema is not None else []
            if near := difflib.get_close_matches(str(e["loc"][-1]), known, n=1):
                msg += f" (did you mean {'.'.join([*map(str, e['loc'][:-1]), near[0]])}?)"
        elif (
            "input" in e
            and e["type"] != "missing"
            and not isinstance(e["input"], dict)
            and "got " not in msg  # a message that already shows the value
        ):
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"{origin}: {key}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)


def _keys_of(schema: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the section at ``loc`` of ``schema`` has (none if ``loc`` is no section)."""
    model: Any = schema
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        kinds = (field.annotation, *typing.get_args(field.annotation))  # a section, or one | None
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into its key path and a YAML-typed value."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected key=value, e.g. rollout.n=8")
    if any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key {key!r} has an empty part")
    try:
        value = load_yaml(raw, name=f"--set {key.strip()}") if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {e}") from None
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> set[str]:
    """Apply dotted overrides in place; return the keys they set."""
    keys = set()
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {'.'.join(path[: i + 1])} is not a section")
            node = child
        node[path[-1]] = value
        keys.add(".".join(path))
    return keys
