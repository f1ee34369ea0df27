"""Data-parallel training over MPI (SPEC §9.2): the process's place among the workers and
the collective operations the distributed kvstore and the Module use.

A program started by ``mpiexec -n N python train.py`` is one of N workers. ``world()`` gives
this process's ``MPICollective`` (mpi4py's ``COMM_WORLD``) — or None for a single process,
without importing mpi4py at all. The collective implements the core's ``Collective`` trait
(``_native.CollectiveHandle``): gradient sums run in a fixed order (every worker sums its
slice of the buffer over the ranks in rank order, then the slices are gathered), so every
worker gets the same bits whatever the timing.

Failure handling: once a multi-worker collective exists, an uncaught exception on any worker
prints its traceback and calls ``MPI_Abort``, which ends every worker at once; a collective
that waits longer than ``MXFN_DIST_TIMEOUT`` seconds (default 300) for the other workers (a
worker that exited, hangs, or ran a different number of batches) prints what it waited for
and aborts every worker too. A worker killed by a signal makes ``mpiexec`` end the others.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import numpy as np

from . import _native
from ._errors import MXFNError

__all__ = ["launcher_world", "world", "bucket_bytes", "MPICollective"]

# What MPI launchers put in each process's environment: (rank variable, size variable).
_LAUNCHER_VARS = (
    ("PMI_RANK", "PMI_SIZE"),                            # MPICH / Intel MPI (hydra), srun --mpi=pmi2
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),    # Open MPI
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),      # MVAPICH2
)

_DEFAULT_TIMEOUT = 300.0
_FORWARD_SECONDS = 0.5
_WORLD = None
_WORLD_LOCK = threading.Lock()


def launcher_world() -> tuple:
    """``(rank, size)`` as the MPI launcher set them in the environment; ``(0, 1)`` for a
    process not started by ``mpiexec`` (or started as a single process). Reading the
    environment needs no MPI library, so iterators made before any kvstore can use it."""
    for rank_var, size_var in _LAUNCHER_VARS:
        r, s = os.environ.get(rank_var), os.environ.get(size_var)
        if r is not None and s is not None:
            try:
                return int(r), int(s)
            except ValueError:
                continue
    return 0, 1


def bucket_bytes() -> int:
    """The size of the gradient buckets summed in one collective call: ``MXFN_DIST_BUCKET_BYTES``
    (default 4 MiB; 0 sums every gradient alone)."""
    raw = os.environ.get("MXFN_DIST_BUCKET_BYTES", str(4 << 20))
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise MXFNError(f"MXFN_DIST_BUCKET_BYTES: expected a number of bytes >= 0, got {raw!r}")
    return n


def _timeout() -> float:
    raw = os.environ.get("MXFN_DIST_TIMEOUT")
    if raw is None:
        return _DEFAULT_TIMEOUT
    try:
        t = float(raw)
    except ValueError:
        raise MXFNError(f"MXFN_DIST_TIMEOUT: expected a number of seconds, got {raw!r}") from None
    if not t > 0:
        raise MXFNError(f"MXFN_DIST_TIMEOUT: expected a positive number of seconds, got {raw!r}")
    return t


def world(fname="kvstore.create"):
    """This process's ``MPICollective`` when it is one of several MPI workers, else None.

    Started by ``mpiexec`` with N > 1 processes, mpi4py is imported (once) and must be
    installed; otherwise nothing MPI-related is imported.
    """
    global _WORLD
    _, size = launcher_world()
    if size <= 1:
        return None
    with _WORLD_LOCK:
        if _WORLD is None:
            try:
                from mpi4py import MPI
            except ImportError as e:
                raise MXFNError(
                    f"{fname}: this process is one of {size} started by mpiexec, and distributed "
                    f"training needs mpi4py, which cannot be imported ({e}); "
                    f'pip install "mxfn[mpi]" (mpi4py and the mpich wheel)') from None
            _WORLD = MPICollective(MPI.COMM_WORLD, _timeout())
        return _WORLD


def _f32(fname, buf) -> np.ndarray:
    """A writable float32 view of ``buf`` (a memoryview from the core or a numpy array)."""
    a = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.float32)
    if a.dtype != np.float32 or not a.flags.c_contiguous or not a.flags.writeable:
        raise MXFNError(f"{fname}: buf: expected a writable contiguous float32 buffer, "
                        f"got {a.dtype} (contiguous={a.flags.c_contiguous}, writeable={a.flags.writeable})")
    return a.reshape(-1)


class MPICollective:
    """The collective operations over an MPI communicator (``rank``, ``size``,
    ``allreduce_sum``, ``broadcast``, ``allgather_bytes``, ``barrier``), with a watchdog
    that aborts every worker when a call waits more than ``timeout`` seconds."""

    def __init__(self, comm, timeout=_DEFAULT_TIMEOUT):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = float(timeout)
        self._scratch = {}
        self._waiting = None  # (what, deadline) while a collective runs
        from mpi4py import MPI  # imported only for a communicator, i.e. under mpiexec
        self._in_place, self._sum = MPI.IN_PLACE, MPI.SUM
        self.handle = _native.CollectiveHandle(self)
        if self.size > 1:
            self._install_excepthook()
            threading.Thread(target=self._watch, name="mxfn-dist-watchdog", daemon=True).start()

    def __repr__(self):
        return f"<MPICollective rank={self.rank} size={self.size} timeout={self.timeout:g}s>"

    # -- failure handling ---------------------------------------------------------------------

    def _install_excepthook(self):
        previous = sys.excepthook
        comm, rank, size = self.comm, self.rank, self.size

        def abort_all(etype, value, tb):
            try:
                previous(etype, value, tb)
            except Exception:  # noqa: BLE001 - the traceback is printed either way
                traceback.print_exception(etype, value, tb)
            sys.stderr.write(f"mxfn: worker {rank} of {size} stopped with {etype.__name__}; "
                             f"aborting every worker (MPI_Abort)\n")
            sys.stderr.flush()
            time.sleep(_FORWARD_SECONDS)  # lets mpiexec forward the traceback before the abort
            comm.Abort(1)
        sys.excepthook = abort_all

    def _watch(self):
        step = min(1.0, self.timeout / 10)
        while True:
            time.sleep(step)
            waiting = self._waiting
            if waiting is not None and time.monotonic() > waiting[1]:
                sys.stderr.write(
                    f"mxfn: worker {self.rank} of {self.size}: {waiting[0]} waited more than "
                    f"{self.timeout:g} s for the other workers (one exited, hangs, or ran a "
                    f"different number of batches); aborting every worker (MPI_Abort). "
                    f"MXFN_DIST_TIMEOUT sets the limit.\n")
                sys.stderr.flush()
                time.sleep(_FORWARD_SECONDS)
                self.comm.Abort(1)
                return

    def _run(self, what, f, *args):
        self._waiting = (what, time.monotonic() + self.timeout)
        try:
            return f(*args)
        finally:
            self._waiting = None

    def _buffer(self, slot, n):
        b = self._scratch.get(slot)
        if b is None or b.size < n:
            b = np.empty(max(n, 1024), dtype=np.float32)
            self._scratch[slot] = b
        return b[:n]

    # -- the operations -----------------------------------------------------------------------

    def allreduce_sum(self, buf):
        """Sums ``buf`` over the workers in place, the same bits on every worker whatever the
        timing. Two workers: MPI's allreduce (each value is x0 + x1, and IEEE addition is
        commutative, so every algorithm gives every worker the same bits). More: every worker
        sums its slice over the ranks in rank order (all-to-all), then the slices are gathered
        (all-gather), at the traffic of a ring allreduce."""
        a = _f32("collective.allreduce_sum", buf)
        p, n = self.size, a.size
        if p == 1 or n == 0:
            return
        if p == 2:
            self._run("allreduce", self.comm.Allreduce, self._in_place, a, self._sum)
            return
        chunk = -(-n // p)
        m = chunk * p
        if m == n:
            send = a
        else:
            send = self._buffer("send", m)
            send[:n] = a
            send[n:] = 0
        recv = self._buffer("recv", m).reshape(p, chunk)
        mine = self._buffer("mine", chunk)

        def run():
            self.comm.Alltoall(send, recv)
            np.copyto(mine, recv[0])
            for r in range(1, p):
                np.add(mine, recv[r], out=mine)
            self.comm.Allgather(mine, send)
        self._run("allreduce", run)
        if send is not a:
            a[:] = send[:n]

    def broadcast(self, buf, root=0):
        """Overwrites ``buf`` with worker ``root``'s."""
        a = _f32("collective.broadcast", buf)
        if self.size > 1:
            self._run("broadcast", self.comm.Bcast, a, root)

    def allgather_bytes(self, mine) -> list:
        """Every worker's ``mine`` (bytes), in rank order."""
        if self.size == 1:
            return [bytes(mine)]
        return self._run("allgather", self.comm.allgather, bytes(mine))

    def allgather(self, obj) -> list:
        """Every worker's picklable ``obj``, in rank order."""
        if self.size == 1:
            return [obj]
        return self._run("allgather", self.comm.allgather, obj)

    def barrier(self):
        """Returns once every worker has called it."""
        if self.size > 1:
            self._run("barrier", self.comm.Barrier)
