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
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    if (refused := _grpc_problem(host, int(port), timeout_s)) is None:
        return None
    return (
        f"port {port} accepts connections but {refused} (the dashboard's port, 8265 by "
        "default, is for `ray job submit`; the head's GCS listens on 6379 by default)",
        True,
    )


#: After a failed gRPC handshake, how long the channel may take to become ready on gRPC's own
#: reconnection (about a second later) before the address counts as not a Ray head's: a head
#: that listens completes the handshake at once.
HANDSHAKE_RETRY_S = 2.5


def _grpc_problem(host: str, port: int, timeout_s: float) -> str | None:
    """None when an HTTP/2 gRPC channel to ``host:port`` becomes ready within ``timeout_s``,
    else what the server did instead. No call is made, so neither Ray's token nor its protocol
    version matters. A server that fails the handshake (an HTTP/1 service answers HTTP/2's
    preface with an error) is named within seconds rather than at the timeout."""
    import threading

    import grpc

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    settled, states = threading.Event(), []
    done = (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE)

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state in done:
            states.append(state)
            settled.set()

    channel.subscribe(watch, try_to_connect=True)
    try:
        if not settled.wait(timeout_s):
            return f"does not complete gRPC's handshake as a Ray head does within {timeout_s:g}s"
        if states[0] is grpc.ChannelConnectivity.READY:
            return None
        try:
            grpc.channel_ready_future(channel).result(timeout=min(HANDSHAKE_RETRY_S, timeout_s))
            return None
        except grpc.FutureTimeoutError:
            return "refuses gRPC's handshake, which a Ray head accepts"
    finally:
        channel.unsubscribe(watch)
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
