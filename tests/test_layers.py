"""The layer rules of ARCHITECTURE.md, checked on the real import graph.

`rewards` must import (and its server must be built) on a host with no Ray, torch or vLLM, and
`rlcs`/`rewards` must never import the layers above them.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("ray", "torch", "vllm", "deepspeed", "transformers")

# A meta-path finder that makes the heavy packages un-importable, as on a bare host.
BLOCKER = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked for this test)")
sys.meta_path.insert(0, Block())
"""


def run_blocked(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_blocker_really_blocks():
    r = run_blocked("import torch")
    assert r.returncode != 0 and "blocked for this test" in r.stderr


def test_rewards_imports_without_heavy_packages():
    modules = sorted(
        "rewards." + ".".join(p.relative_to(ROOT / "rewards").with_suffix("").parts)
        for p in (ROOT / "rewards").rglob("*.py")
        if p.name != "__init__.py"
    )
    code = "import importlib, rewards\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in modules
    )
    code += f"import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    r = run_blocked(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]"


def test_cli_help_needs_no_heavy_packages():
    r = run_blocked("import sys; from cluster.cli import main; sys.argv=['rlcs','--help']; main()")
    assert "serve-rewards" in r.stdout, r.stderr[-2000:]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "package, forbidden",
    [
        ("rlcs", {"actors", "cluster", "ray"}),
        (
            "rewards",
            {"rlcs", "actors", "cluster", "ray", "torch", "vllm", "deepspeed", "transformers"},
        ),
        ("actors", {"cluster"}),
    ],
)
def test_imports_point_down_only(package, forbidden):
    bad = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & forbidden)
        for p in (ROOT / package).rglob("*.py")
        if _imports(p) & forbidden
    }
    assert bad == {}


def test_all_four_packages_import():
    r = subprocess.run(
        [sys.executable, "-c", "import rlcs, rewards, actors, cluster"],
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
