"""A local TCP proxy that adds round-trip time: a Prefect server "50 ms away" on loopback (issue
34: the round's orchestration against a remote API). Each direction's bytes are held for half
the added RTT and delivered in order; a new connection pays one added RTT before its first byte
reaches the server (its TCP handshake with a remote host).

    .venv/bin/python -m benchmarks.rtt_proxy --listen 4201 --target 127.0.0.1:4200 --rtt-ms 50
    PREFECT_API_URL=http://127.0.0.1:4201/api .venv/bin/python -m benchmarks.round_overhead ...

Loopback only: it listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, one_way_s: float) -> None:
    """Copy reader -> writer, each chunk delivered one_way_s after it arrived, in order."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            await asyncio.sleep(max(due - time.monotonic(), 0.0))
            writer.write(chunk)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    sender = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((time.monotonic() + one_way_s, chunk))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((time.monotonic() + one_way_s, b""))
    with contextlib.suppress(ConnectionError, OSError):
        await sender


async def _serve(listen_port: int, target: tuple[str, int], rtt_s: float,
                 started: threading.Event | None = None, bound: list[int] | None = None,
                 stop: asyncio.Event | None = None) -> None:
    one_way = rtt_s / 2

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        writers = [client_w]
        try:  # a cancelled connection (the proxy stopping) ends quietly: asyncio's start_server
            await asyncio.sleep(rtt_s)  # logs a handler that ends cancelled as an error (3.11)
            server_r, server_w = await asyncio.open_connection(*target)  # the handshake, rtt_s away
            writers.append(server_w)
            await asyncio.gather(_pump(client_r, server_w, one_way), _pump(server_r, client_w, one_way))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in writers:
                w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    if bound is not None:
        bound.append(server.sockets[0].getsockname()[1])
    if started is not None:
        started.set()
    async with server:
        if stop is None:
            await server.serve_forever()
        await stop.wait()
    open_connections = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in open_connections:
        task.cancel()
    await asyncio.gather(*open_connections, return_exceptions=True)


class RttProxy:
    """with RttProxy(("127.0.0.1", 4200), rtt_s=0.05) as port: ... (a thread runs the proxy)."""

    def __init__(self, target: tuple[str, int], rtt_s: float, listen_port: int = 0):
        if rtt_s < 0:
            raise ValueError(f"rtt_s must be >= 0, got {rtt_s}")
        self.target, self.rtt_s, self.listen_port = target, rtt_s, listen_port

    def __enter__(self) -> int:
        started, bound = threading.Event(), []
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(_serve(self.listen_port, self.target, self.rtt_s, started, bound, self.stop))
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True, name="rtt-proxy")
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError("the RTT proxy did not start listening within 10 s")
        return bound[0]

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, default=4201)
    parser.add_argument("--target", default="127.0.0.1:4200", help="host:port of the server")
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    print(f"127.0.0.1:{args.listen} -> {args.target}, +{args.rtt_ms:g} ms round trip", flush=True)
    asyncio.run(_serve(args.listen, (host, int(port)), args.rtt_ms / 1000))


if __name__ == "__main__":
    main()
