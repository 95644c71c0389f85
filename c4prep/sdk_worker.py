"""Beam's SDK worker processes of ``--direct_running_mode=multi_processing``, started through this module
(`python -m c4prep.sdk_worker`), which gives the root logger a handler before Beam is imported.

Without Beam's ``gcp`` extra (google-apitools, which `pip install c4prep` leaves out), `import apache_beam` logs a
warning through `logging.warning`, which installs a stderr handler on a root logger that has none
(`logging.basicConfig`). Beam's worker (`sdk_worker_main`) then sets the root level to INFO, so its records, which
it sends to the runner over the Fn API, reached the terminal too: about 40 lines a run with 2 workers. With a
`NullHandler` on the root first they go to the runner alone, as where the extra is installed.

A bundle that fails in a worker: Beam's worker prints its traceback to stderr before it sends the same traceback to
the runner in its response, from which c4prep reports the error (one line; with ``--debug`` the traceback). That print
is left out here (`no_print_to_stderr`), so the one line is all a failed run shows, as in memory.

Once the harness has returned (the runner closed its control stream), the process ends at once (`os._exit`), without
the interpreter's normal exit, which tears gRPC down while its threads may still run: `tokenize` of a damaged shard
with 2 workers, its worker run through `runpy` and exiting normally, had a worker abort at the end in 2 of 60 runs
("terminate called without an active exception", exit 134, which the runner printed as a thread's traceback); ending
with `os._exit`, in none of 60.

c4prep's own warnings (a skipped bad input) reach the runner too, but as the runner's Beam logs, which it keeps off
the terminal (`user_errors.quiet_engine_logs`): the worker prints them to its stderr, the terminal, as the runner
prints them in memory.

Ctrl-C reaches every process of the terminal's process group, these workers too: each printed a KeyboardInterrupt
traceback (60 lines with 2 workers). A worker now leaves its end to the interrupted runner's clean-up, which closes
its streams (a worker that ended at once broke them, and a runner thread printed a traceback), and ends by itself,
with status 0, if that has not come within a grace period: one that ignored the interrupt could keep the runner
waiting for it. Another status, or a shell between the runner and the worker killed by the signal, makes the runner
print a traceback (the command line starts the worker with `exec`, so there is no shell). SIGINT or SIGTERM to the
runner alone (`kill`, a scheduler preempting the job) reaches its workers as Ctrl-C: after SIGTERM they went on
without a runner, their threads printing about 90 lines of gRPC tracebacks; after SIGINT while a worker started, the
runner waited for that worker, which never connected, for ever. SIGTERM to them all is Ctrl-C to them too.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from c4prep.interrupted import STOP_SIGNALS

BEAM_WORKER = "apache_beam.runners.worker.sdk_worker_main"
THIS_MODULE = "c4prep.sdk_worker"
INTERRUPTED_GRACE_S = 3.0


@contextmanager
def workers_started_here() -> Iterator[None]:
    """While the block runs, the FnApiRunner starts its ``multi_processing`` workers through this module, and
    Ctrl-C or SIGTERM to the runner interrupts them before it stops the runner."""
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    from c4prep.patches import replaced

    beams = SubprocessSDKEnvironment.from_command_string

    def from_command_string(command_string: str) -> SubprocessSDKEnvironment:
        return beams("exec " + command_string.replace(f"-m {BEAM_WORKER}", f"-m {THIS_MODULE}"))

    with replaced((SubprocessSDKEnvironment, "from_command_string", from_command_string)), stops_reach_workers():
        yield


@contextmanager
def stops_reach_workers() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM send SIGINT to this process's workers, then do what they did
    before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def interrupt_workers_first(signum: int, frame: object) -> None:
        for worker in workers_of(os.getpid()):
            with suppress(ProcessLookupError):
                os.kill(worker, signal.SIGINT)
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)
        elif handler != signal.SIG_IGN:
            signal.signal(signum, handler)
            signal.raise_signal(signum)

    for signum in previous:
        signal.signal(signum, interrupt_workers_first)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def workers_of(runner: int) -> list[int]:
    """The processes of this module that ``runner`` started (on Linux; elsewhere none is found)."""
    children = (child for thread in Path(f"/proc/{runner}/task").glob("*/children") for child in _read(thread).split())
    return [int(child) for child in children if THIS_MODULE in _read(Path(f"/proc/{child}/cmdline"))]


def _read(path: Path) -> str:
    """The text of a file under /proc, or '' once its process or thread has ended."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def end_after_the_runner(signum: int, frame: object) -> None:
    """On Ctrl-C or SIGTERM, which the runner reports: let the interrupted runner's clean-up close this worker's
    streams, which ends it; end anyway, with status 0, if it has not after `INTERRUPTED_GRACE_S`. The threads that
    the closed streams end (with a gRPC error) end without a traceback."""
    threading.excepthook = lambda failure: None
    threading.Timer(INTERRUPTED_GRACE_S, os._exit, args=(0,)).start()


def c4prep_warnings_to_stderr() -> None:
    """c4prep's warnings on this worker's stderr, in the runner's format."""
    from c4prep.user_errors import LOG_FORMAT

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger("c4prep").addHandler(handler)


def no_print_to_stderr(*values: object, file=None, **options) -> None:
    """`print`, except to stderr: in place of the builtin in Beam's `sdk_worker` module, whose one print is a failed
    instruction's traceback."""
    if file is not sys.stderr:
        print(*values, file=file, **options)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, end_after_the_runner)
    signal.signal(signal.SIGTERM, end_after_the_runner)
    logging.getLogger().addHandler(logging.NullHandler())
    c4prep_warnings_to_stderr()
    from apache_beam.runners.worker import sdk_worker, sdk_worker_main

    sdk_worker.print = no_print_to_stderr
    sdk_worker_main.main(sys.argv)  # closes its Fn API log handler, which sent the worker's logs to the runner
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
