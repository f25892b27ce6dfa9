"""The rig's redirecting front answers a TLS ClientHello as Go's HTTP servers do, so an engine falls back to HTTP."""

from __future__ import annotations

import socket

from kvbake_rig.redirect_front import RedirectFront
from kvbake_rig.registry import RegistryEndpoint

UPSTREAM = RegistryEndpoint("127.0.0.1:9", "http")  # never reached: the handshake is answered before any proxying


def test_the_reply_to_a_client_hello_is_a_400_with_a_status_line() -> None:
    with RedirectFront(UPSTREAM) as front:
        host, port = front.address.split(":")
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64))  # the start of a ClientHello, no newline
            reply = conn.recv(200)
    assert reply.startswith(b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.")
