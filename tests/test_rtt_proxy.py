"""The RTT proxy of the remote-server benchmark (benchmarks/rtt_proxy.py): it adds the round trip
it is asked for, to each request and not more, and delivers the bytes unchanged and in order."""

import socket
import threading
import time

import pytest

from benchmarks.rtt_proxy import RttProxy


def echo_server() -> tuple[int, threading.Thread]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)
        sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return sock.getsockname()[1], thread


def round_trips(port: int, messages: list[bytes]) -> list[float]:
    times = []
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for message in messages:
            t0 = time.perf_counter()
            conn.sendall(message)
            got = b""
            while len(got) < len(message):
                got += conn.recv(65536)
            times.append(time.perf_counter() - t0)
            assert got == message
    return times


def test_each_request_pays_the_added_round_trip_and_the_first_one_the_handshake_too():
    target, _ = echo_server()
    proxy = RttProxy(("127.0.0.1", target), rtt_s=0.06)
    with proxy as port:
        first, *rest = round_trips(port, [b"a" * 10, b"b" * 200_000, b"c"])
    assert not proxy.thread.is_alive()  # stopped with its connections
    assert first >= 0.11  # connect (one RTT, from the accept, a little before t0) + its own RTT
    assert all(0.06 <= t < 0.06 + 0.1 for t in rest), rest


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="rtt_s"):
        RttProxy(("127.0.0.1", 1), rtt_s=-1)
