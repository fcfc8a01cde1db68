"""Shared test fixtures. Folder-specific fixtures live in each folder's own conftest.py."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_text_model(tmp_path_factory):
    """An HF directory holding the tiny text-only causal LM and its tokenizer."""
    from rlcs.models import build_tiny_text_model

    return build_tiny_text_model(tmp_path_factory.mktemp("tiny-text") / "model")


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    """An HF directory holding the tiny GLM-4.1V-architecture VLM and its processor."""
    from rlcs.models import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "model")


@pytest.fixture(scope="session")
def tiny_vlm_moe(tmp_path_factory):
    """The tiny GLM-4.5V-architecture VLM (routed and shared experts) and its processor."""
    from rlcs.models import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm-moe") / "model", moe=True)


@pytest.fixture
def shapes_image():
    """A real RGB image with a few shapes on it, 112x84."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (112, 84), "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle([8, 8, 48, 40], fill="red")
    draw.ellipse([60, 30, 100, 76], fill="blue")
    return img


@pytest.fixture(scope="module")
def ray_local():
    """A fresh local Ray instance per test module (never another Ray running on the machine).

    Modules that need other resources (fewer CPUs, a loopback node address) define their own."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
