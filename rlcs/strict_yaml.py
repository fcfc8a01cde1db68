"""YAML for config files: the safe loader, with a key given twice in one mapping an error."""

from __future__ import annotations

from typing import Any

import yaml


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


def load_yaml(text: str) -> Any:
    """Parse YAML text as ``yaml.safe_load`` does; a repeated key raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_UniqueKeyLoader)
