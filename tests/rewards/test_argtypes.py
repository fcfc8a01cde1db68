"""``rewards.argtypes``' helpers shared by the servers' command lines."""

from __future__ import annotations

import pytest

from rewards.argtypes import http_url


@pytest.mark.parametrize(
    ("host", "port", "path", "url"),
    [
        ("127.0.0.1", 8266, "/", "http://127.0.0.1:8266/"),
        ("localhost", 8000, "", "http://localhost:8000"),
        ("0.0.0.0", 80, "/", "http://0.0.0.0:80/"),
        ("::1", 8266, "/", "http://[::1]:8266/"),
        ("::", 8000, "", "http://[::]:8000"),
        ("2001:db8::5", 9, "/", "http://[2001:db8::5]:9/"),
        ("fe80::1%eth0", 8266, "/", "http://[fe80::1%25eth0]:8266/"),  # a zone, as a URL has it
    ],
)
def test_http_url_brackets_ipv6_literals_only(host, port, path, url):
    assert http_url(host, port, path) == url
