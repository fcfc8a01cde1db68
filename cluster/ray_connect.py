"""Joining the Ray cluster a run is told to use (``cluster.address`` or ``$RAY_ADDRESS``, as
under ``ray job submit``), or starting a local one; an address where no Ray head answers fails
within seconds, with one line naming it, instead of Ray's minutes of retries."""

from __future__ import annotations

import os
import socket

import ray

from cluster.placement import ray_address
from rlcs.config import Config

#: How long a Ray address may take to accept a TCP connection, and then to open a gRPC
#: channel, before the run gives up on it. Left to itself, ray.init retries an address where
#: nothing answers, or where something other than a Ray head does, for minutes.
CONNECT_TIMEOUT_S = 10.0


class ClusterUnreachable(ValueError):
    """Nothing answers at the Ray address the run was told to join."""


def address_problem(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[str, bool] | None:
    """Why no Ray head can be joined at ``address`` (``host:port``, ``ray://`` included), and
    whether something else answers there; None when a head may, or for an address without a
    port (``auto``, ``local``), which is left to Ray.

    Within ``timeout_s`` the address must accept a TCP connection and, unless the cluster uses
    TLS (``RAY_USE_TLS``), open a gRPC channel as a head's GCS (or Ray Client server) does:
    pointed at the dashboard or another service, ray.init retries for minutes."""
    scheme, _, rest = address.rpartition("://")
    if scheme in ("http", "https"):
        return (
            "that is an HTTP address, the dashboard's (what `ray job submit --address` takes); "
            "a run joins the head's GCS address, host:port (port 6379 by default), or is "
            "submitted with `ray job submit`, which sets the address itself",
            True,
        )
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        return None
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except TimeoutError:
        return f"no answer within {timeout_s:g}s", False
    except OSError as e:
        return e.strerror or str(e), False
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true") or _speaks_grpc(
        host, int(port), timeout_s
    ):
        return None
    return (
        f"port {port} accepts connections but does not speak gRPC as a Ray head does within "
        f"{timeout_s:g}s (the dashboard's port, 8265 by default, is for `ray job submit`; the "
        "head's GCS listens on 6379 by default)",
        True,
    )


def _speaks_grpc(host: str, port: int, timeout_s: float) -> bool:
    """Whether an HTTP/2 gRPC channel to ``host:port`` becomes ready within ``timeout_s``: no
    call is made, so neither Ray's token nor its protocol version matters."""
    import grpc

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def _unreachable(cfg: Config, problem: str, answered: bool) -> ClusterUnreachable:
    """The one-line error for ``problem``; ``answered``: something other than a Ray head
    answers there, so the fix is another address, not starting a head."""
    source = "cluster.address" if cfg.cluster.address else "$RAY_ADDRESS"
    fix = "give the head's address" if answered else "start its head there (`ray start --head`)"
    return ClusterUnreachable(
        f"cannot join the Ray cluster at {ray_address(cfg)} ({source}): {problem}; {fix}, or "
        f"unset {source} to run on a new local cluster"
    )


def check_ray_address(cfg: Config) -> str | None:
    """The address ``connect_ray`` will join (None: a new local cluster); ClusterUnreachable,
    naming it, when nothing answers there."""
    address = ray_address(cfg)
    if address and (problem := address_problem(address)):
        raise _unreachable(cfg, *problem)
    return address


def connect_ray(cfg: Config) -> None:
    """Join the cluster named by the config or RAY_ADDRESS (as under `ray job submit`), else
    start a local one."""
    if ray.is_initialized():
        return
    address = check_ray_address(cfg)
    if address:
        try:
            ray.init(address=address, log_to_driver=True)
        except ConnectionError as e:  # something answers there, but not a Ray head's GCS
            raise _unreachable(cfg, f"no Ray head answers there ({e})", True) from None
    else:
        ray.init(address="local", include_dashboard=False)
