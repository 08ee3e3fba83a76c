"""A PostgreSQL-protocol proxy on loopback that makes a commit ambiguous.

The client (the product's engine) connects to the proxy, which forwards every byte to the
real server. Once a transaction has sent a statement matching :attr:`CommitCutProxy.pattern`,
its ``COMMIT`` is where the proxy cuts the connection, in one of three ways:

- ``after``: the COMMIT reaches the server, which commits; its answer is dropped and the client
  connection closed. The client cannot tell whether it committed (it did).
- ``before``: the COMMIT never reaches the server; both sides are closed and the server rolls the
  transaction back. The client cannot tell either (it did not).
- ``held``: the client connection is closed at once, while the COMMIT is held and sent to the
  server only when :meth:`CommitCutProxy.release` is called: the client's retry runs while the
  first attempt's transaction is still open on the server, as when the network is slow to tell.

The proxy answers the client's SSL and GSSAPI encryption requests itself with "no", so the
whole conversation is plain text it can read. The product's driver (psycopg2) sends every
statement as a simple Query message, so the statements are read from ``Q`` messages.
"""

from __future__ import annotations

import asyncio
import re
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
Cut = Literal["after", "before", "held"]


@dataclass
class CommitCutProxy:
    """``port`` on 127.0.0.1 → PostgreSQL on ``upstream``; cuts the first matching transaction's COMMIT."""

    port: int
    upstream: int
    pattern: re.Pattern[str] | None = None
    cut: Cut = "after"
    cuts: int = 0  # commits cut so far (at most one per :meth:`arm`)
    _released: threading.Event = field(default_factory=threading.Event)
    _cut_done: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _stopped: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def arm(self, pattern: str, cut: Cut) -> None:
        """Cut the COMMIT of the next transaction that sends a statement matching ``pattern``."""
        self.pattern, self.cut = re.compile(pattern, re.DOTALL), cut
        self._released.clear()
        self._cut_done.clear()

    def release(self) -> None:
        """``held``: send the held COMMIT to the server now."""
        self._released.set()

    def wait_cut(self, seconds: float) -> bool:
        """Wait until the armed cut happened and its COMMIT's fate is settled on the server side."""
        return self._cut_done.wait(seconds)

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(ready)), name="cut-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"commit-cut proxy did not start on port {self.port}")

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._released.set()
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    async def _run(self, ready: threading.Event) -> None:
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        async with await asyncio.start_server(self._serve, "127.0.0.1", self.port):
            ready.set()
            await self._stopped.wait()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        muted = asyncio.Event()  # the server's answers no longer reach the client
        answered = asyncio.Event()  # the server answered the cut COMMIT (ReadyForQuery)

        async def answers() -> None:
            while message := await _read_typed(up_r):
                if muted.is_set():
                    if message[:1] == b"Z":
                        answered.set()
                    continue
                client_w.write(message)

        pump: asyncio.Task[None] | None = None
        try:
            # Startup: untyped packets; refuse encryption so the rest is readable.
            while True:
                packet = await _read_untyped(client_r)
                if not packet:
                    return
                (code,) = struct.unpack_from(">i", packet, 4)
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    client_w.write(b"N")
                    continue
                up_w.write(packet)
                break
            pump = asyncio.create_task(answers())
            marked = False
            while message := await _read_typed(client_r):
                if message[:1] == b"Q":
                    statement = message[5:-1].decode(errors="replace").strip().rstrip(";").strip().upper()
                    if self.pattern is not None and self.pattern.search(message[5:-1].decode(errors="replace")):
                        marked = True
                    if statement == "ROLLBACK":
                        marked = False
                    if statement in ("COMMIT", "END") and marked:
                        await self._cut_commit(message, client_w, up_w, muted, answered)
                        return
                up_w.write(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if pump is not None:
                pump.cancel()
            up_w.close()
            client_w.close()

    async def _cut_commit(
        self,
        commit: bytes,
        client_w: asyncio.StreamWriter,
        up_w: asyncio.StreamWriter,
        muted: asyncio.Event,
        answered: asyncio.Event,
    ) -> None:
        """Make this COMMIT ambiguous to the client, as :attr:`cut` says."""
        self.pattern = None  # one cut per arm
        self.cuts += 1
        muted.set()
        if self.cut == "before":
            client_w.transport.abort()
        elif self.cut == "after":
            up_w.write(commit)
            await asyncio.wait_for(answered.wait(), 60)
            client_w.transport.abort()
        else:  # held
            client_w.transport.abort()
            await asyncio.to_thread(self._released.wait)
            up_w.write(commit)
            await asyncio.wait_for(answered.wait(), 60)
        self._cut_done.set()


async def _read_untyped(stream: asyncio.StreamReader) -> bytes:
    """A startup-phase packet (length first), or b"" at the end of the stream."""
    try:
        head = await stream.readexactly(4)
        return head + await stream.readexactly(struct.unpack(">i", head)[0] - 4)
    except asyncio.IncompleteReadError:
        return b""


async def _read_typed(stream: asyncio.StreamReader) -> bytes:
    """One typed message (type byte, length, body), or b"" at the end of the stream."""
    try:
        head = await stream.readexactly(5)
        return head + await stream.readexactly(struct.unpack(">i", head[1:])[0] - 4)
    except asyncio.IncompleteReadError:
        return b""


@contextmanager
def commit_cut_proxy(db_url: str) -> Iterator[tuple[CommitCutProxy, str]]:
    """A running proxy in front of ``db_url``'s server, and the same URL pointed at the proxy."""
    from urllib.parse import urlsplit, urlunsplit

    from devstack.process import free_port

    parts = urlsplit(db_url)
    if parts.port is None or parts.hostname is None:
        raise ValueError("the database URL names no host and port")
    proxy = CommitCutProxy(free_port(), parts.port)
    proxy.start()
    netloc = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{proxy.port}" if "@" in parts.netloc else None
    try:
        yield proxy, urlunsplit(parts._replace(netloc=netloc or f"127.0.0.1:{proxy.port}"))
    finally:
        proxy.stop()
