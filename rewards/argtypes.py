"""Argument types and checks shared by the ``rlcs`` command and ``python -m rewards.server``.

Standard library only, so the reward server's command line keeps working on a bare host.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
from collections.abc import Callable

#: The reward server's request limits, shared with ``rewards.server.create_app``.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BATCH = 4096


def add_listen_arguments(p: argparse.ArgumentParser, port_default: int, token_env: str) -> None:
    """``--host``, ``--port`` and ``--token`` of a server; the token defaults to ``$token_env``."""
    p.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default %(default)s)"
    )
    p.add_argument("--port", type=port, default=port_default, help="default %(default)s")
    p.add_argument(
        "--token",
        default=os.environ.get(token_env),
        help=f"require this token (default: ${token_env}; none means no auth)",
    )


def add_reward_server_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``rlcs serve-rewards`` and ``python -m rewards.server``."""
    add_listen_arguments(p, 8000, "RLCS_REWARD_TOKEN")
    p.add_argument(
        "--workers", type=int_at_least(1), default=None, help="verifier processes (default: cores)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=5.0,
        help="per-item timeout in seconds; an item over it scores 0 with error 'timeout'; a "
        "request's timeout_s option may ask for less, not more (default %(default)s)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int_at_least(1),
        default=DEFAULT_MAX_BODY_BYTES,
        help="larger requests get 413 (default %(default)s)",
    )
    p.add_argument(
        "--max-batch",
        type=int_at_least(1),
        default=DEFAULT_MAX_BATCH,
        help="larger batches get 422 (default %(default)s)",
    )
    p.add_argument(
        "--default-domain",
        default="math",
        help="/get_reward domain for labels naming none (default %(default)s)",
    )


def port(text: str) -> int:
    """A TCP port to listen on: 1 to 65535 (the OS would take a larger number modulo 65536)."""
    value = _int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {value}")
    return value


def port_or_off(text: str) -> int:
    """A port, or 0 for none."""
    return 0 if _int(text) == 0 else port(text)


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in its messages
    return parse


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of at least 0, got {text}")
    return value


def http_url(host: str, port: int, path: str = "") -> str:
    """The address a server listening on ``host:port`` prints: an IPv6 literal in brackets
    (``http://[::1]:8266/``), its zone's ``%`` written ``%25`` as a URL needs; a name or an
    IPv4 address as it is."""
    if ":" in host and not host.startswith("["):  # no host name or IPv4 address has a colon
        host = "[" + host.replace("%", "%25") + "]"
    return f"http://{host}:{port}{path}"


def listen_error(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` (the port is taken, the host is not an
    address of this machine, no permission), or None. Checked before the server prints its
    address, so that a failure reads as one line instead of a URL and then a bind error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot listen on {host}:{port}: {e.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind(address)
        except OSError as e:
            return f"cannot listen on {host}:{port}: {e.strerror}"
    return None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value
