"""Argument types and checks shared by the ``rlcs`` command and ``python -m rewards.server``.

Standard library only, so the reward server's command line keeps working on a bare host.
"""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Callable


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
