"""A kept-alive connection is answered at once: the sockets the server accepts send each write
without waiting (TCP_NODELAY). With Nagle's algorithm on, a response's body waited for the
client's delayed ACK of its headers, ~40 ms per request for the openai and tinker SDKs, which
keep their connections alive (`bench/serve_latency.py` measures it).

Traffic goes only to 127.0.0.1, to the server the test starts and stops.
"""

from __future__ import annotations

import socket

import httpx

from arena_core.models import load_policy
from arena_core.serve.server import serve_policy


def test_the_servers_connections_send_without_delay() -> None:
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with serve_policy(policy, name="tiny") as srv, httpx.Client(base_url=srv.url) as client:
        for _ in range(2):  # the second request rides the first one's connection
            assert client.get("/health").json()["status"] == "ok"
        connections = list(srv._uvicorn.server_state.connections)
        assert len(connections) == 1
        sock = connections[0].transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
