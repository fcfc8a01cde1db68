"""Domain name -> verifier class, by import path, so worker processes can load the same class.

Built-in domains are listed here; a user adds one with ``register("mydomain", "pkg.mod:Class")``
(or a class object defined at module level). Paths, not objects, cross the process boundary.
"""

from __future__ import annotations

import importlib
import threading

from rewards.base import Verifier

BUILTIN: dict[str, str] = {
    "math": "rewards.verifiers.math:MathVerifier",
    "chart": "rewards.verifiers.chart:ChartVerifier",
    "ocr": "rewards.verifiers.ocr:OCRVerifier",
    "grounding": "rewards.verifiers.grounding:GroundingVerifier",
    "gui": "rewards.verifiers.gui:GUIVerifier",
    "vqa": "rewards.verifiers.vqa:VQAVerifier",
}

_paths: dict[str, str] = dict(BUILTIN)
_instances: dict[str, Verifier] = {}
_lock = threading.Lock()


class UnknownDomain(KeyError):
    """Raised for a domain that is neither built in nor registered."""


def _path_of(target: str | type[Verifier]) -> str:
    if isinstance(target, str):
        if ":" not in target:
            raise ValueError(f"verifier path {target!r} must look like 'package.module:Class'")
        return target
    if not (isinstance(target, type) and issubclass(target, Verifier)):
        raise TypeError(f"{target!r} is not a Verifier subclass")
    if "<locals>" in target.__qualname__:
        raise ValueError("register a module-level class: workers import it by path")
    return f"{target.__module__}:{target.__qualname__}"


def load(path: str) -> Verifier:
    """Import ``package.module:Class`` and return a cached instance of it."""
    inst = _instances.get(path)
    if inst is not None:
        return inst
    module, _, qualname = path.partition(":")
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Verifier)):
        raise TypeError(f"{path} is not a rewards.base.Verifier subclass")
    inst = obj()
    with _lock:
        _instances[path] = inst
    return inst


def register(domain: str, target: str | type[Verifier]) -> None:
    """Add or replace a domain. The class is imported now, so a bad path fails here."""
    path = _path_of(target)
    load(path)
    with _lock:
        _paths[domain] = path


def path_for(domain: str) -> str:
    try:
        return _paths[domain]
    except KeyError:
        raise UnknownDomain(domain) from None


def domains() -> list[str]:
    return sorted(_paths)
