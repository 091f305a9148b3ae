"""Feeder processes forked from a warm interpreter, not started cold at every query start.

A feeder (`_feeder`) is a fresh Python process, so that a busy source does not hold the
driver's GIL. Started cold, it spent 1-2.5 s before its first file (interpreter, riverbed,
pyarrow, and pandas, which pyarrow imports at the first ``pa.array``), and the query's first
micro-batch waited for that file. A fork server is started once per driver process (at
`spark_session`, beside the JVM's own start, or at the first feeder): an interpreter that
imported all of that and then only forks, one child per feeder, the way PySpark's own
daemon forks its Python workers. A child imports only what the graph's own pickle needs.

The child gets the driver's current working directory, ``sys.path``, environment and
standard output and error with each request, so it runs as a fresh feeder started at that
moment would. The server is single-threaded when it forks (imports start no thread that a
child would need), waits for its children as they exit (so their CPU time adds to its
children's times, as a cold feeder's did to the driver's), and exits when the driver's end
of its socket closes. The driver waits for a child through a pidfd; its exit status is not
known (the server reaped it), only whether it said ``done`` before leaving. The server opens
the pidfd before it can reap the child and passes it on, so a reused pid is never waited for.

``RIVERBED_SPARK_FORK_SERVER=0`` starts every feeder cold instead.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from typing import Any

__all__ = ["FeederProcess", "ForkedProcess", "cold_env", "fork_feeder", "fork_server_enabled",
           "fork_server_pid", "start_fork_server", "stop_fork_server"]

_PID = struct.Struct("<q")
# What every feeder imports, and the standard operators most graphs' pickles import: paid once.
_PRELOAD = ("riverbed.spark_bridge._feeder", "riverbed.spark_bridge._source", "riverbed.operators",
            "pyarrow", "pyarrow.parquet", "pandas")


def cold_env() -> dict[str, str]:
    """The environment of a fresh interpreter started by this process (a cold feeder, the fork
    server): this one's, with its ``sys.path`` as ``PYTHONPATH`` so it imports what we do."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def fork_server_enabled() -> bool:
    return os.environ.get("RIVERBED_SPARK_FORK_SERVER", "1") != "0"


class ForkedProcess:
    """A feeder forked by the server: not this process's child, so it is waited for through a
    pidfd (readable once the process has exited) and its exit code is unknown (None)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._fd: int | None = pidfd

    def wait(self, timeout: float | None = None) -> int | None:
        fd = self._fd
        if fd is not None:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"feeder process {self.pid}", timeout or 0.0)
            os.close(fd)
            self._fd = None
        return None

    def kill(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)


FeederProcess = subprocess.Popen[bytes] | ForkedProcess


class _ForkServer:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                env=cold_env(), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def fork(self, down_r: int, up_w: int) -> ForkedProcess:
        """A child running `_feeder._main` on the two pipe ends (which the caller still closes)."""
        context = pickle.dumps((os.getcwd(), list(sys.path), dict(os.environ)))
        with self.lock:
            socket.send_fds(self.sock, [context], [down_r, up_w, 1, 2])
            reply, fds, _flags, _addr = socket.recv_fds(self.sock, _PID.size, 1)
        if len(reply) != _PID.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("the feeder fork server has gone")
        return ForkedProcess(_PID.unpack(reply)[0], fds[0])

    def close(self) -> None:
        self.sock.close()  # the server reads EOF and leaves
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Current:
    """The driver process's one fork server."""

    server: _ForkServer | None = None
    lock = threading.Lock()


def start_fork_server() -> None:
    """Start the fork server now if it is enabled and not running (it imports in the
    background: nothing here waits for it)."""
    if not fork_server_enabled():
        return
    with _Current.lock:
        if _Current.server is None or _Current.server.process.poll() is not None:
            _Current.server = _ForkServer()


def fork_server_pid() -> int | None:
    """The running fork server's process id (None: none started, or it has left)."""
    server = _Current.server
    if server is None or server.process.poll() is not None:
        return None
    return server.process.pid


def stop_fork_server() -> None:
    """Stop the fork server (feeders it forked run on); the next feeder starts a new one."""
    with _Current.lock:
        server, _Current.server = _Current.server, None
    if server is not None:
        server.close()


def fork_feeder(down_r: int, up_w: int) -> ForkedProcess | None:
    """A feeder forked from the server (started now if needed, replaced once if it has gone),
    or None when the server is disabled or could not fork (the caller starts the feeder cold)."""
    if not fork_server_enabled():
        return None
    for _attempt in range(2):  # a server that has gone (killed, crashed) is replaced once
        start_fork_server()
        server = _Current.server
        if server is None:
            return None
        try:
            return server.fork(down_r, up_w)
        except OSError:
            stop_fork_server()
    return None


# ------------------------------------------------------------------ the server's process


def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    for name in _PRELOAD:
        with contextlib.suppress(ImportError):  # pandas is optional: pyarrow takes it if there
            __import__(name)
    signal.signal(signal.SIGCHLD, _reap)
    for stop in (signal.SIGINT, signal.SIGTERM):  # the driver ends it (by closing its socket)
        signal.signal(stop, signal.SIG_IGN)
    while True:
        try:
            context, fds, _flags, _addr = socket.recv_fds(sock, 1 << 22, 4)
        except OSError:
            return
        if not context:
            return  # the driver has gone
        # SIGCHLD waits until the child's pidfd is open: reaped before, its pid could be reused.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(context, fds)
        try:
            pidfd = os.pidfd_open(pid)
            for f in fds:
                os.close(f)
            socket.send_fds(sock, [_PID.pack(pid)], [pidfd])
            os.close(pidfd)
        except OSError:
            return
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})


def _reap(signum: int, frame: Any) -> None:
    """Wait for every child that has exited: its CPU time is then added to this process's
    children's times, as a cold feeder's is to the driver's (what CPU measures see)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(context: bytes, fds: list[int]) -> None:
    """The forked feeder: the driver's directory, path, environment and output, then the
    feeder's main; never returns to the server's loop."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        down_r, up_w, out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        cwd, path, env = pickle.loads(context)
        os.chdir(cwd)
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(env)
        from ._feeder import _main

        _main([str(down_r), str(up_w)])
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
