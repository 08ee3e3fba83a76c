"""A Kafka-protocol proxy that plays log retention in front of the local broker.

The local broker never deletes records (no retention, no DeleteRecords: DESIGN §5), so the
path Apache Kafka takes after retention ran cannot happen on it. This proxy sits on loopback
between the clients and a broker that advertises the proxy's port, forwards every request, and
for the partitions given a log start in :attr:`RetentionProxy.log_start` answers as Apache
Kafka does once the segments below it are deleted:

- a Fetch below the log start gets ``OFFSET_OUT_OF_RANGE`` (error 1) and no records;
- ListOffsets never answers an offset below the log start (earliest = the log start).

To keep the parsing small it caps the versions the broker offers in ApiVersions at the last
non-flexible ones (Fetch v11, ListOffsets v5), which librdkafka negotiates down to.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

API_FETCH = 1
API_LIST_OFFSETS = 2
API_VERSIONS = 18
MAX_VERSION = {API_FETCH: 11, API_LIST_OFFSETS: 5}
OFFSET_OUT_OF_RANGE = 1


class Reader:
    """Big-endian reads over one frame."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return int(value)

    def string(self) -> str:
        n = self.take("h")
        text = self.data[self.pos : self.pos + max(n, 0)].decode()
        self.pos += max(n, 0)
        return text

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


@dataclass
class RetentionProxy:
    """``port`` on 127.0.0.1 → the broker on ``upstream``; :meth:`start` runs it in a thread."""

    port: int
    upstream: int
    log_start: dict[tuple[str, int], int] = field(default_factory=dict)
    fetches_refused: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _stopped: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._run(ready)), name="retention-proxy", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"retention proxy did not start on port {self.port}")

    def stop(self) -> None:
        """Close the listener; asyncio.run then cancels the open connections."""
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    async def _run(self, ready: threading.Event) -> None:
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        async with await asyncio.start_server(self._serve, "127.0.0.1", self.port):
            ready.set()
            await self._stopped.wait()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        rewrites: dict[int, Callable[[bytes], bytes]] = {}  # correlation id → response rewrite

        async def responses() -> None:
            while frame := await _read_frame(up_r):
                (correlation,) = struct.unpack_from(">i", frame)
                client_w.write(_framed(rewrites.pop(correlation, _same)(frame)))

        pump = asyncio.create_task(responses())
        try:
            while frame := await _read_frame(client_r):
                api, version, correlation = struct.unpack_from(">hhi", frame)
                if api == API_FETCH and (refusal := self._refuse_fetch(frame, version, correlation)):
                    self.fetches_refused += 1
                    client_w.write(_framed(refusal))  # librdkafka matches responses by correlation id
                    continue
                if api == API_VERSIONS:
                    rewrites[correlation] = lambda data, v=version: _cap_versions(data, v)
                elif api == API_LIST_OFFSETS:
                    rewrites[correlation] = lambda data, v=version: self._raise_list_offsets(data, v)
                up_w.write(_framed(frame))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            pump.cancel()
            up_w.close()
            client_w.close()

    def _refuse_fetch(self, frame: bytes, version: int, correlation: int) -> bytes | None:
        """The OFFSET_OUT_OF_RANGE response for a Fetch that asks below a log start, else None."""
        r = _after_header(frame)
        r.pos += 16 if version >= 3 else 12  # replica id, max wait, min bytes, max bytes
        r.pos += 1 if version >= 4 else 0  # isolation level
        r.pos += 8 if version >= 7 else 0  # session id and epoch
        below: dict[str, list[int]] = {}
        for _ in range(r.take("i")):
            topic = r.string()
            for _ in range(r.take("i")):
                partition = r.take("i")
                r.pos += 4 if version >= 9 else 0  # current leader epoch
                offset = r.take("q")
                r.pos += (8 if version >= 5 else 0) + 4  # log start offset, partition max bytes
                if offset < self.log_start.get((topic, partition), 0):
                    below.setdefault(topic, []).append(partition)
        if not below:
            return None
        out = struct.pack(">ii", correlation, 0)  # throttle time
        out += struct.pack(">hi", 0, 0) if version >= 7 else b""  # error code, session id
        out += struct.pack(">i", len(below))
        for topic, partitions in below.items():
            out += _string(topic) + struct.pack(">i", len(partitions))
            for partition in partitions:
                out += struct.pack(">ihq", partition, OFFSET_OUT_OF_RANGE, -1)  # high watermark unknown
                out += struct.pack(">q", -1) if version >= 4 else b""  # last stable offset
                out += struct.pack(">q", -1) if version >= 5 else b""  # log start offset
                out += struct.pack(">i", -1) if version >= 4 else b""  # aborted transactions: null
                out += struct.pack(">i", -1) if version >= 11 else b""  # preferred read replica
                out += struct.pack(">i", 0)  # no records
        return out

    def _raise_list_offsets(self, data: bytes, version: int) -> bytes:
        """ListOffsets answers at or above the log start (earliest IS the log start)."""
        out = bytearray(data)
        r = Reader(data, 4)
        r.pos += 4 if version >= 2 else 0  # throttle time
        for _ in range(r.take("i")):
            topic = r.string()
            for _ in range(r.take("i")):
                partition = r.take("i")
                r.pos += 2 + 8  # error code, timestamp
                at = r.pos
                offset = r.take("q")
                r.pos += 4 if version >= 4 else 0  # leader epoch
                start = self.log_start.get((topic, partition), 0)
                if 0 <= offset < start:
                    struct.pack_into(">q", out, at, start)
        return bytes(out)


def _cap_versions(data: bytes, version: int) -> bytes:
    """ApiVersions answer with Fetch and ListOffsets capped at their last non-flexible version."""
    out = bytearray(data)
    r = Reader(data, 4)
    if r.take("h") != 0:  # an error answer (e.g. version unsupported) lists no versions to cap
        return data
    count = r.uvarint() - 1 if version >= 3 else r.take("i")
    for _ in range(count):
        api = r.take("h")
        r.pos += 2  # min version
        if api in MAX_VERSION:
            struct.pack_into(">h", out, r.pos, min(MAX_VERSION[api], struct.unpack_from(">h", data, r.pos)[0]))
        r.pos += 2
        if version >= 3:
            r.skip_tags()
    return bytes(out)


def _after_header(frame: bytes) -> Reader:
    """A request frame's reader placed after the v1 header (api, version, correlation, client id)."""
    r = Reader(frame, 8)
    r.string()
    return r


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _same(frame: bytes) -> bytes:
    return frame


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(stream: asyncio.StreamReader) -> bytes:
    """One size-prefixed frame, or b"" at the end of the stream."""
    try:
        (size,) = struct.unpack(">i", await stream.readexactly(4))
        return await stream.readexactly(size)
    except asyncio.IncompleteReadError:
        return b""


@contextmanager
def retention_broker(home: Path) -> Iterator[tuple[RetentionProxy, dict[str, Any]]]:
    """A memory-storage tansu of its own behind a :class:`RetentionProxy`, and the librdkafka
    settings that reach it through the proxy (every connection, as the broker advertises it)."""
    from devstack.broker import Broker
    from devstack.process import free_port

    proxy = RetentionProxy(free_port(), free_port())
    broker = Broker(proxy.upstream, "memory://tansu/", home, advertised_port=proxy.port)
    broker.start()
    proxy.start()
    try:
        yield proxy, {"bootstrap.servers": f"127.0.0.1:{proxy.port}"}
    finally:
        proxy.stop()
        broker.kill()
