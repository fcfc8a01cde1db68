"""Group filters: which scored groups of an RL iteration may be trained on.

A filter is a plain function named by import path in ``learner.grpo.group_filter``
(``"package.module:function"``) and called in the driver on every scored group::

    def keep(item: Item, rollouts: list[Trajectory], **options) -> bool

It sees the item and the group's scored rollouts (responses, token ids, rewards and their
``reward_detail``, ``finish_reason``). A group it rejects still counts as evidence for the
curriculum's pass rates; the policy (rlcs, uniform, dapo_filter) then selects the batch from
the groups it kept. ``learner.grpo.group_filter_options`` are passed as keyword arguments.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from rlcs.data import Item, Trajectory

GroupFilter = Callable[[Item, list[Trajectory]], bool]


def load_group_filter(path: str, options: Mapping[str, Any] | None = None) -> GroupFilter:
    """Import ``module:function`` and bind its options; raises ValueError saying what is wrong."""
    where = f"learner.grpo.group_filter {path!r}"
    module, sep, qualname = path.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"{where}: give it as 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"{where}: cannot import {module!r} ({e})") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{where}: {module!r} has no {qualname!r}")
        obj = getattr(obj, part)
    if not callable(obj) or isinstance(obj, type):
        raise ValueError(f"{where}: {qualname!r} is not a function")
    options = dict(options or {})
    try:
        inspect.signature(obj).bind(None, [], **options)
    except TypeError as e:
        raise ValueError(
            f"{where}: cannot be called as f(item, rollouts, **{options}) ({e})"
        ) from None
    except ValueError:  # no signature to check (a builtin): let the first call tell
        pass
    return functools.partial(obj, **options) if options else obj


def filtered_out(
    keep: GroupFilter, items: Mapping[str, Item], groups: Mapping[str, list[Trajectory]]
) -> list[str]:
    """The ids of the groups ``keep`` rejects; a result that is not a bool is an error."""
    out = []
    for item_id, rollouts in groups.items():
        verdict = keep(items[item_id], rollouts)
        if not isinstance(verdict, bool):
            raise TypeError(
                f"group filter {_name(keep)} returned {verdict!r} for item {item_id!r}; "
                "it must return True (train on the group) or False"
            )
        if not verdict:
            out.append(item_id)
    return out


def _name(f: Any) -> str:
    f = getattr(f, "func", f)
    return f"{getattr(f, '__module__', '?')}:{getattr(f, '__qualname__', repr(f))}"


def no_truncated(item: Item, rollouts: list[Trajectory]) -> bool:
    """Keep a group only if none of its rollouts was cut off at the answer budget.

    A cut-off answer is scored as wrong although the policy may have been on its way to a right
    one; DAPO leaves such samples out of the loss for that reason (overlong filtering).
    """
    return not any(t.finish_reason == "length" for t in rollouts)


def max_response_tokens(item: Item, rollouts: list[Trajectory], limit: int) -> bool:
    """Keep a group only if every rollout's response is at most ``limit`` tokens."""
    return all(len(t.token_ids) <= limit for t in rollouts)
