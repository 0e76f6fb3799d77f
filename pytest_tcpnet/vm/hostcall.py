"""Analysis a --tcpnet-vm guest hands to the host: decoding pcaps with tshark, drawing plots.

Neither depends on the guest's kernel (they read a pcap, or plain numbers), but under software
emulation they are the slowest things a guest does: tshark takes seconds to start and matplotlib
seconds per plot, FreeType's text layout most (docs/vm.md, "What happens"). A fast-booted guest gets a
virtio-serial port, ``tcpnet.hostcall``, whose other end is a socket the runner serves; guest code
sends the pcap or the plot's data there and gets tshark's output or the PNG back. The host runs
the same tshark and matplotlib (the guest's root is the host's), so results are identical. The
guest also asks the host how busy its CPUs are (``cpu``: hostload.py), which only the host
can see, at the start and end of each measurement.

A User-Mode Linux guest has no virtio port: it shares a directory with the host instead, the mailbox
(``MailboxServer``; its path in ``TCPNET_VM_HOSTCALL_DIR``): a request is a file the guest renames into
place, the reply a file the host renames in beside it. Without either (a vng boot, a VM of the user's
own, ``TCPNET_VM_HOSTCALL=0``) or when the host does not answer, the guest does the work itself.

Frames, both ways: ``MAGIC``, u32 header length, u64 payload length, a JSON header, the payload.
A request's header has ``id`` and ``op``; its response echoes the ``id``.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import select
import socket
import struct
import tempfile
import threading
import time
import warnings

from . import HOSTCALL_ENV as ENV  # "1" in the guest's environment when the runner serves host calls

__all__ = [
    "ENV",
    "MAILBOX_ENV",
    "PORT_NAME",
    "MailboxServer",
    "Server",
    "Unavailable",
    "available",
    "call",
    "host_cpu_snapshot",
    "use_host_for_analysis",
]

#: The mailbox directory, in a User-Mode Linux guest's environment (a directory shared with the host).
MAILBOX_ENV = "TCPNET_VM_HOSTCALL_DIR"
# How often each side looks for the other's file: a host call costs a few of these, a measurement two calls.
MAILBOX_POLL_S = 0.003

#: The virtio-serial port's name, as the guest's /sys/class/virtio-ports lists it.
PORT_NAME = "tcpnet.hostcall"
MAGIC = b"TCPNETHC"
_PREFIX = struct.Struct("!8sIQ")
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 31
# How long a started frame may stall before the host drops it (a guest process killed mid-write).
FRAME_STALL_S = 30.0
# Unix socket paths longer than this do not fit sockaddr_un.
_MAX_SOCKET_PATH = 100


class Unavailable(Exception):
    """The host cannot be asked (no port, no answer, a broken frame); ``str(err)`` says why."""


def encode(header: dict, payload: bytes = b"") -> bytes:
    """One frame."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, len(head), len(payload)) + head + payload


class FrameReader:
    """Frames out of a byte stream fed in pieces; skips bytes up to the next MAGIC after garbage."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def partial(self) -> bool:
        """True while bytes of an unfinished frame are buffered."""
        return bool(self._buf)

    def drop(self) -> None:
        """Forget an unfinished frame (its sender is gone)."""
        self._buf.clear()

    def next(self) -> tuple[dict, bytes] | None:
        """The next whole frame, or None until more bytes arrive."""
        while True:
            start = self._buf.find(MAGIC)
            if start < 0:
                del self._buf[: max(0, len(self._buf) - len(MAGIC) + 1)]
                return None
            del self._buf[:start]
            if len(self._buf) < _PREFIX.size:
                return None
            _, head_len, payload_len = _PREFIX.unpack_from(self._buf)
            if head_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
                del self._buf[: len(MAGIC)]  # not a frame after all: look for the next MAGIC
                continue
            end = _PREFIX.size + head_len + payload_len
            if len(self._buf) < end:
                return None
            try:
                header = json.loads(bytes(self._buf[_PREFIX.size : _PREFIX.size + head_len]))
            except ValueError:
                del self._buf[: len(MAGIC)]
                continue
            payload = bytes(self._buf[_PREFIX.size + head_len : end])
            del self._buf[:end]
            if isinstance(header, dict):
                return header, payload


# ------------------------------------------------------------------ host side


def _decode_pcap(header: dict, payload: bytes) -> tuple[dict, bytes]:
    """Run the guest's tshark decode on the pcap it sent: the same argv as decode.py's own."""
    from ..capture import decode

    with tempfile.TemporaryDirectory(prefix="tcpnet-hostcall-") as workdir:
        pcap = os.path.join(workdir, "capture.pcap")
        with open(pcap, "wb") as f:
            f.write(payload)
        returncode, stdout, stderr = decode.run_tshark(pcap, timeout=float(header.get("timeout", 300)))
    return {"returncode": returncode, "stderr": stderr}, stdout.encode()


def _plot(header: dict, payload: bytes) -> tuple[dict, bytes]:
    """Draw one plot from the data the guest sent; return the PNG."""
    from ..analysis import plots

    with tempfile.TemporaryDirectory(prefix="tcpnet-hostcall-") as workdir:
        path = os.path.join(workdir, "plot.png")
        plots.draw(header["kind"], path, json.loads(payload), here=True)
        with open(path, "rb") as f:
            return {}, f.read()


def _cpu(header: dict, payload: bytes, root: int | None = None) -> tuple[dict, bytes]:
    """The host's CPU snapshot (hostload.py): what root's tree (default: the runner and its guests) used, and the
    whole host."""
    from ..hostload import cpu_snapshot

    return cpu_snapshot(root), b""


HANDLERS = {"decode_pcap": _decode_pcap, "plot": _plot, "cpu": _cpu}


def handle(header: dict, payload: bytes, **context) -> tuple[dict, bytes]:
    """Answer one request (context: what the server knows that the request does not, e.g. the guest's root
    process); errors become a response that names them (the guest re-raises)."""
    reply = {"id": header.get("id")}
    handler = HANDLERS.get(str(header.get("op")))
    if handler is None:
        return {**reply, "ok": False, "error": f"unknown host call {header.get('op')!r}"}, b""
    try:
        out, data = handler(header, payload, **context)
    except Exception as exc:  # reported to the guest, which raises it where it asked
        from ..errors import MissingCapability

        return {
            **reply,
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "missing": isinstance(exc, MissingCapability),
        }, b""
    return {**reply, "ok": True, **out}, data


class Server:
    """The runner's end: a unix socket qemu connects the guest's port to, served by one thread."""

    # Whose CPU time is the guest's own: None, the runner's whole tree; with guests side by side, the guest's own
    # process tree (set once it is spawned), so a sibling guest counts as the contention it is.
    root: int | None = None

    def __init__(self, path: str):
        if len(path) > _MAX_SOCKET_PATH:
            raise Unavailable(f"socket path too long for a unix socket: {path}")
        self.path = path
        self.calls = 0  # pcaps decoded and plots drawn for the guest: the analysis it handed over
        self.cpu_calls = 0  # snapshots of the host's CPU load, two per measurement
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        os.chmod(path, 0o600)
        self._listener.listen(1)
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, name="tcpnet-hostcall", daemon=True)

    def qemu_args(self) -> list:
        """qemu options that connect the guest's ``tcpnet.hostcall`` port to this socket."""
        return [
            "-chardev",
            f"socket,id=hostcall,path={self.path}",
            "-device",
            f"virtserialport,chardev=hostcall,name={PORT_NAME}",
        ]

    def start(self) -> Server:
        self._thread.start()
        return self

    def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        """handle() one request and count it: CPU-load questions apart from the analysis handed over."""
        try:
            if header.get("op") == "cpu":
                self.cpu_calls += 1
                return handle(header, payload, root=self.root)
            self.calls += 1
            return handle(header, payload)
        except Exception as exc:  # a bug here must not end the serving thread: every later call would time out
            return {"id": header.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}, b""

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                self._serve_connection(conn)

    def _serve_connection(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        reader, started = FrameReader(), None
        while not self._stop.is_set():
            try:
                data = conn.recv(1 << 16)
            except socket.timeout:
                if started is not None and time.monotonic() - started > FRAME_STALL_S:
                    reader.drop()  # its writer died mid-frame; the next one starts afresh
                    started = None
                continue
            except OSError:
                return
            if not data:
                return
            reader.feed(data)
            while (frame := reader.next()) is not None:
                reply, payload = self.answer(*frame)
                try:
                    conn.sendall(encode(reply, payload))
                except OSError:
                    return
            started = (started or time.monotonic()) if reader.partial else None


class MailboxServer(Server):
    """The runner's end for a User-Mode Linux guest: requests and replies are files in a shared directory."""

    def __init__(self, directory: str):  # no super().__init__(): it would bind a socket
        self.path = directory
        self.calls = 0
        self.cpu_calls = 0
        self._stop = threading.Event()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._thread = threading.Thread(target=self._serve, name="tcpnet-hostcall-mailbox", daemon=True)

    def qemu_args(self) -> list:
        return []

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _serve(self) -> None:
        while not self._stop.wait(MAILBOX_POLL_S):
            try:
                names = sorted(n for n in os.listdir(self.path) if n.endswith(".req"))
            except OSError:
                return
            for name in names:
                self._serve_file(os.path.join(self.path, name))

    def _serve_file(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.unlink(path)
        except OSError:
            return
        reader = FrameReader()
        reader.feed(data)
        frame = reader.next()
        if frame is None:
            return  # a torn request: its guest process died while writing; it will not wait for a reply
        reply, payload = self.answer(*frame)
        _put(os.path.join(self.path, f"{frame[0].get('id')}.rep"), encode(reply, payload))


def _put(path: str, data: bytes) -> None:
    """Write a mailbox file whole, then rename it into place: the other side never reads half of one."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # a guest's write reaches the host's file only on writeback (hostfs)
    os.rename(tmp, path)


# ------------------------------------------------------------------ guest side

_port = None
_warned = False


def _find_port() -> str | None:
    global _port
    if _port is None:
        base = "/sys/class/virtio-ports"
        try:
            names = os.listdir(base)
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(base, name, "name")) as f:
                    if f.read().strip() == PORT_NAME:
                        _port = os.path.join("/dev", name)
                        break
            except OSError:
                continue
        else:
            _port = ""
    return _port or None


def _mailbox() -> str | None:
    directory = os.environ.get(MAILBOX_ENV)
    return directory if directory and os.path.isdir(directory) else None


def available() -> bool:
    """True in a guest whose runner serves host calls."""
    return os.environ.get(ENV) == "1" and (_find_port() is not None or _mailbox() is not None)


def _open(port: str, deadline: float) -> int:
    # The kernel lets one process at a time open a port (EBUSY): that serialises the callers.
    while True:
        try:
            return os.open(port, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise Unavailable(f"cannot open {port}: {exc}") from exc
            time.sleep(0.01)


def _wait(fd: int, event: int, deadline: float) -> None:
    poller = select.poll()
    poller.register(fd, event)
    left = deadline - time.monotonic()
    if left <= 0 or not poller.poll(left * 1000):
        raise Unavailable("the host did not answer in time")


def call(op: str, header: dict | None = None, payload: bytes = b"", timeout: float = 300.0) -> tuple[dict, bytes]:
    """Ask the host to run ``op``; return its reply's header and payload, or raise Unavailable."""
    port = _find_port() if os.environ.get(ENV) == "1" else None
    mailbox = _mailbox() if os.environ.get(ENV) == "1" and port is None else None
    if port is None and mailbox is None:
        raise Unavailable("no host-call port in this guest")
    deadline = time.monotonic() + timeout
    request_id = secrets.token_hex(8)
    if mailbox is not None:
        return _call_mailbox(
            mailbox, request_id, encode({**(header or {}), "id": request_id, "op": op}, payload), deadline, op
        )
    assert port is not None  # no mailbox, so the port
    frame = memoryview(encode({**(header or {}), "id": request_id, "op": op}, payload))
    fd = _open(port, deadline)
    try:
        while frame:
            _wait(fd, select.POLLOUT, deadline)
            try:
                frame = frame[os.write(fd, frame) :]
            except BlockingIOError:
                continue
        reader = FrameReader()
        while True:
            _wait(fd, select.POLLIN, deadline)
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                time.sleep(0.005)  # the host end is not connected (yet): poll says readable
                continue
            reader.feed(data)
            while (reply := reader.next()) is not None:
                if reply[0].get("id") == request_id:  # replies to an earlier, abandoned call are skipped
                    return reply
    except OSError as exc:
        raise Unavailable(f"host call {op} failed: {exc}") from exc
    finally:
        os.close(fd)


def _call_mailbox(mailbox: str, request_id: str, frame: bytes, deadline: float, op: str) -> tuple[dict, bytes]:
    """One host call through the mailbox: put the request, wait for the reply file, take it."""
    reply_name = f"{request_id}.rep"
    try:
        _put(os.path.join(mailbox, f"{request_id}.req"), frame)
        while reply_name not in os.listdir(mailbox):  # a listing, not a lookup: hostfs caches a name it did not find
            if time.monotonic() > deadline:
                _discard(os.path.join(mailbox, f"{request_id}.req"))
                raise Unavailable("the host did not answer in time")
            time.sleep(MAILBOX_POLL_S)
        path = os.path.join(mailbox, reply_name)
        with open(path, "rb") as f:
            data = f.read()
        os.unlink(path)
    except OSError as exc:
        raise Unavailable(f"host call {op} failed: {exc}") from exc
    reader = FrameReader()
    reader.feed(data)
    reply = reader.next()
    if reply is None:
        raise Unavailable(f"host call {op}: a torn reply")
    return reply


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fall_back(op: str, why: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"tcpnet-vm: asking the host to {op} failed ({why}); the guest does it itself", stacklevel=3)


def decode_on_host(pcap, timeout):
    """decode.run_tshark's contract, by the host: (returncode, stdout, stderr), or None to decode here."""
    try:
        with open(pcap, "rb") as f:
            data = f.read()
        reply, out = call("decode_pcap", {"timeout": timeout}, data, timeout=timeout + 60)
    except (Unavailable, OSError) as exc:
        _fall_back("decode a pcap", exc)
        return None
    if not reply.get("ok"):
        raise RuntimeError(f"tshark on the host could not decode {pcap}: {reply.get('error')}")
    return reply["returncode"], out.decode(), reply.get("stderr", "")


def draw_on_host(kind, path, data):
    """plots.draw's contract, by the host: write the PNG to path and return True, or False to draw here."""
    try:
        reply, png = call("plot", {"kind": kind}, json.dumps(data).encode(), timeout=300)
    except Unavailable as exc:
        _fall_back("draw a plot", exc)
        return False
    if not reply.get("ok"):
        if reply.get("missing"):
            from ..analysis.plots import PlotsUnavailable

            raise PlotsUnavailable()
        raise RuntimeError(f"the host could not draw {path}: {reply.get('error')}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(png)
    return True


def host_cpu_snapshot() -> dict | None:
    """In a guest the runner serves: the host's CPU snapshot now (hostload.others_cpus of two); None elsewhere."""
    if os.environ.get(ENV) != "1":
        return None
    try:
        reply, _ = call("cpu", timeout=10)
    except Unavailable:
        return None  # a measurement does not need it: the flow is described without the host's load
    return reply if reply.get("ok") else None


def use_host_for_analysis() -> bool:
    """In a guest the runner serves: decode pcaps, draw plots and read the host's CPU load on the host from now on."""
    if not available():
        return False
    from .. import hostload
    from ..analysis import plots
    from ..capture import decode

    decode.run_elsewhere(decode_on_host)
    plots.draw_elsewhere(draw_on_host)
    hostload.snapshot_elsewhere(host_cpu_snapshot)
    return True
