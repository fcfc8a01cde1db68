"""Fixtures shared by the actor tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local():
    """A fresh local Ray instance per test module (never another Ray running on the machine).

    Modules that need other resources (fewer CPUs, a loopback node address) define their own."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
