"""The three questions homelab asks an rpc-server, in llama.cpp's RPC wire protocol.

The pinned llama.cpp (b11312, ``ggml/src/ggml-rpc/ggml-rpc.cpp``, protocol 7.0.0) frames a
request as ``| command (1 byte) | size (u64) | payload |`` and a reply as ``| size (u64) |
payload |``, little-endian structs as the C code lays them out. A connection opens with
``HELLO`` (24 bytes of transport capabilities, zero for plain TCP; the reply is the
server's major, minor, patch, a pad byte and its own 24 capability bytes); after it
``DEVICE_COUNT`` (no payload; a u32) and ``GET_DEVICE_MEMORY`` (a u32 device index;
u64 free, u64 total, in bytes). Nothing here allocates or computes on the worker.

rpc-server serves one client at a time: while a llama-server holds a worker, another
connection is accepted by the kernel but not answered until that client leaves, which
:class:`RpcTimeout` on the handshake says.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
PROTO_MAJOR = 7
"""The RPC protocol major version of the pinned llama.cpp; a worker must speak the same."""
PROTO_MINOR = 0
CONN_CAPS_SIZE = 24
_HELLO_REPLY = 4 + CONN_CAPS_SIZE
_MAX_DEVICES = 64


class RpcProblem(Exception):
    """The worker did not answer as llama.cpp's rpc-server; ``str()`` says how, in words."""


class RpcRefused(RpcProblem):
    """Nothing listens there (connection refused or the host unreachable)."""


class RpcTimeout(RpcProblem):
    """No answer in time: host down, a firewall, or the worker busy with another client."""


@dataclass(frozen=True, slots=True)
class Hello:
    """The worker's protocol version."""

    major: int
    minor: int
    patch: int

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def compatible(self) -> bool:
        """What llama-server itself accepts: the same major, a minor not newer than ours."""
        return self.major == PROTO_MAJOR and self.minor <= PROTO_MINOR


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One device's memory as the worker reports it (bytes)."""

    index: int
    free: int
    total: int


class RpcConnection:
    """One connection to an rpc-server, handshake done on :meth:`open`. Use as a context manager."""

    def __init__(self, host: str, port: int, *, timeout_s: float) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._sock: socket.socket | None = None
        self._stage = "connecting"

    def open(self) -> Hello:
        """Connect and say HELLO; the worker's version.

        Raises:
            RpcRefused, RpcTimeout, RpcProblem: see the classes.
        """
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except socket.gaierror as error:
            raise RpcRefused(f"its host name does not resolve ({error.strerror})") from None
        except TimeoutError:
            raise RpcTimeout(f"no connection within {self.timeout_s:g} s") from None
        except OSError as error:
            raise RpcRefused(f"connection failed: {error.strerror or error}") from None
        self._stage = "the handshake"
        reply = self._call(CMD_HELLO, bytes(CONN_CAPS_SIZE), _HELLO_REPLY)
        hello = Hello(reply[0], reply[1], reply[2])
        self._stage = "its answers"
        return hello

    def device_count(self) -> int:
        """How many devices the worker serves."""
        (count,) = struct.unpack("<I", self._call(CMD_DEVICE_COUNT, b"", 4))
        if count > _MAX_DEVICES:
            raise RpcProblem(f"it claims {count} devices, which no rpc-server has")
        return int(count)

    def device_memory(self, index: int) -> DeviceMemory:
        """Free and total memory of device ``index``."""
        free, total = struct.unpack(
            "<QQ", self._call(CMD_GET_DEVICE_MEMORY, struct.pack("<I", index), 16)
        )
        return DeviceMemory(index, int(free), int(total))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> RpcConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, command: int, payload: bytes, reply_size: int) -> bytes:
        sock = self._sock
        if sock is None:
            raise RpcProblem("not connected")
        try:
            sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
            (size,) = struct.unpack("<Q", self._read(sock, 8))
            if size != reply_size:
                raise RpcProblem(
                    f"its reply to command {command} is {size} bytes, not {reply_size}: "
                    "not llama.cpp's rpc-server, or one of another protocol version"
                )
            return self._read(sock, reply_size)
        except TimeoutError:
            raise RpcTimeout(
                f"it accepted the connection but sent nothing back during {self._stage} within "
                f"{self.timeout_s:g} s"
            ) from None
        except ConnectionError as error:
            raise RpcProblem(
                f"it dropped the connection during {self._stage} ({error.strerror or error})"
            ) from None

    def _read(self, sock: socket.socket, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise RpcProblem(
                    f"it closed the connection during {self._stage}: not llama.cpp's rpc-server, "
                    "or one of another protocol version"
                )
            data += chunk
        return bytes(data)
