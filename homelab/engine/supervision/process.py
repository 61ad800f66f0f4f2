"""One engine process: spawned in its own process group, watched, and stopped for sure.

Why a process group of its own: a stop reaches the engine and anything it
started (``killpg``), and a Ctrl-C typed at ``homelab serve`` reaches homelab
only, which then stops the engine cleanly instead of both racing.

Why the parent-death signal: if homelab itself is killed with SIGKILL it runs no
cleanup, and an engine left behind would hold gigabytes of VRAM. On Linux the
child asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, called between fork
and exec) to be killed when its parent goes. The kernel ties that signal to the
parent *thread* that forked, so the supervisor spawns from its one long-lived
run-loop thread. A detached engine is spawned without it, on purpose.

The engine's stdout and stderr go straight to a log file (not through a pipe to
homelab), so a detached engine keeps logging after homelab exits and an
adopting homelab can read the same file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import psutil

from homelab.errors import EngineError

PR_SET_PDEATHSIG = 1
_POLL_MIN_S = 0.01
_POLL_MAX_S = 0.1


def _load_prctl():
    """libc's ``prctl`` (resolved in the parent, before any fork), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    function.restype = ctypes.c_int
    return function


_PRCTL = _load_prctl()


def _preexec(parent_pid: int | None, memory_limit: int | None):
    """The ``preexec_fn`` (None: nothing to do in the child): the memory cap, then
    SIGKILL-on-parent-death armed for ``parent_pid``.

    It also closes the race where the parent died between fork and prctl: the
    child then already has another parent and kills itself.
    """
    if parent_pid is None and memory_limit is None:
        return None
    import resource

    prctl = _PRCTL

    def in_child() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        if parent_pid is not None:
            if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def _open_log(path: Path, header: str | None) -> BinaryIO:
    """The log file opened for appending, ``header`` written first.

    Raises:
        EngineError: the file cannot be created or written (disk full, no permission).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path, "ab")
        if header is not None:
            log.write(header.rstrip("\n").encode("utf-8", "replace") + b"\n")
            log.flush()
    except OSError as error:
        raise EngineError(f"cannot write the engine log {path}: {error.strerror}") from None
    return log


def alive(pid: int, create_time: float | None = None) -> bool:
    """True while ``pid`` runs and is the process that started at ``create_time``.

    A zombie counts as gone: it holds no memory, and an orphan whose new parent
    does not reap it stays a zombie forever. ``create_time`` guards against a
    recycled pid (a new process that happens to get the old number).
    """
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 0.05:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def create_time_of(pid: int) -> float | None:
    """The kernel's start time of ``pid`` (seconds since the epoch), None when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class EngineProcess:
    """A running engine: our child (spawned) or someone else's (adopted from the state file)."""

    def __init__(
        self,
        pid: int,
        *,
        pgid: int | None = None,
        create_time: float | None = None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.pgid = pid if pgid is None else pgid
        self.create_time = create_time if create_time is not None else create_time_of(pid)
        self._popen = popen
        self._exited = False
        self._pidfd: int | None = None
        self._pidfd_tried = False
        self._fd_lock = threading.Lock()

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        log_path: Path,
        *,
        die_with_parent: bool = True,
        env: Mapping[str, str] | None = None,
        header: str | None = None,
        memory_limit: int | None = None,
    ) -> EngineProcess:
        """Start ``argv`` (never through a shell) in a new session, output appended to ``log_path``.

        Args:
            argv: the engine's command line; ``argv[0]`` is the binary.
            log_path: file the engine's stdout and stderr are appended to.
            die_with_parent: arm the parent-death signal (off for a detached engine).
            env: extra environment variables on top of ours.
            header: a line written to the log just before the engine's own output.
            memory_limit: cap the engine's address space at this many bytes (``RLIMIT_AS``):
                an allocation past it fails in the engine, which logs it and exits.

        Raises:
            EngineError: the binary is missing or not executable, the log cannot be
                written, or the parent-death signal cannot be armed.
        """
        if die_with_parent and _PRCTL is None:
            raise EngineError(
                "this system cannot tie the engine's life to homelab's "
                "(no prctl(PR_SET_PDEATHSIG))",
                hint="run it with `detach` set, and `stop` it when done",
            )
        with _open_log(log_path, header) as log:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env={**os.environ, **(env or {})},
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=_preexec(os.getpid() if die_with_parent else None, memory_limit),
                )
            except FileNotFoundError:
                raise EngineError(f"the engine binary {argv[0]} does not exist") from None
            except PermissionError:
                raise EngineError(
                    f"the engine binary {argv[0]} cannot be executed (permission denied)"
                ) from None
            except (OSError, subprocess.SubprocessError) as error:
                raise EngineError(f"could not start {argv[0]}: {error}") from None
        return cls(popen.pid, pgid=popen.pid, popen=popen)

    @classmethod
    def adopt(cls, pid: int, *, pgid: int | None, create_time: float | None) -> EngineProcess:
        """Take over an engine another homelab started (recorded in the state file).

        Raises:
            EngineError: the process is gone, or its pid now belongs to another program.
        """
        if not alive(pid, create_time):
            raise EngineError(f"the recorded engine (pid {pid}) is no longer running")
        return cls(pid, pgid=pgid, create_time=create_time)

    @property
    def is_child(self) -> bool:
        """True when homelab spawned it in this process (its exit code is known)."""
        return self._popen is not None

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: killed by that signal); None while it runs or when unknown."""
        return None if self._popen is None else self._popen.returncode

    def is_alive(self) -> bool:
        """True while the engine runs."""
        if self._popen is not None:
            return self._popen.poll() is None
        if self._exited:
            return False
        self._exited = not alive(self.pid, self.create_time)
        return not self._exited

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait up to ``timeout_s`` (None: for ever) for the engine to exit; True once it has.

        Sleeps in the kernel on a pidfd where there is one (no polling while an
        engine serves for hours), else polls.
        """
        if self._popen is not None and self._popen.returncode is not None:
            return True
        if self._exited:
            return True
        fd = self._exit_fd()
        if fd is not None:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(None if timeout_s is None else max(0, int(timeout_s * 1000))):
                return False
            if self._popen is not None:
                self._popen.wait()
            self._exited = True
            return True
        return self._poll_wait(timeout_s)

    def _exit_fd(self) -> int | None:
        """A pidfd of the engine (readable once it exits), or None where the system has none."""
        with self._fd_lock:
            if not self._pidfd_tried:
                self._pidfd_tried = True
                try:
                    self._pidfd = os.pidfd_open(self.pid)
                except ProcessLookupError:
                    self._exited = self._popen is None
                except (AttributeError, OSError):
                    self._pidfd = None
            return self._pidfd

    def _poll_wait(self, timeout_s: float | None) -> bool:
        if self._popen is not None:
            try:
                self._popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = _POLL_MIN_S
        while self.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            remaining = pause if deadline is None else min(pause, deadline - time.monotonic())
            time.sleep(max(remaining, 0.0))
            pause = min(pause * 2, _POLL_MAX_S)
        return True

    def close(self) -> None:
        """Release the pidfd (the process itself is not touched)."""
        fd, self._pidfd = getattr(self, "_pidfd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()

    def watch(self, on_exit: Callable[[EngineProcess], None], until: threading.Event) -> None:
        """Call ``on_exit(self)`` from a daemon thread when the engine exits (unless ``until`` is
        set first)."""

        def wait_for_exit() -> None:
            while not self.wait(1.0):
                if until.is_set():
                    return
            on_exit(self)

        threading.Thread(target=wait_for_exit, name="homelab-engine-exit", daemon=True).start()

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the engine's process group while its leader runs; True if sent."""
        if not self.is_alive():
            return False
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError as error:
            raise EngineError(
                f"not allowed to signal the engine (pid {self.pid}): {error.strerror}",
                hint="it was started by another user; stop it as that user",
            ) from None
        return True

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the group, wait; SIGTERM again, wait; then SIGKILL the group.

        llama-server ignores a SIGTERM that arrives before its main loop runs
        (while loading) and exits at once on a second one, hence two; a process
        that ignores both is killed after ``grace_s`` in all.
        """
        for _ in range(2):
            if not self.signal_group(signal.SIGTERM):
                self.wait(5.0)
                return
            if self.wait(grace_s / 2):
                return
        self.kill()

    def kill(self) -> None:
        """SIGKILL the whole group and reap the leader (if it is our child)."""
        self.signal_group(signal.SIGKILL)
        self.wait(10.0)

    def __repr__(self) -> str:
        kind = "child" if self.is_child else "adopted"
        return f"EngineProcess(pid={self.pid}, pgid={self.pgid}, {kind})"
