"""What a command says when Ctrl-C or SIGTERM (a scheduler preempting the job, `kill`) stops it: one line on stderr,
exit status 128 + the signal's number (130, 143), as a shell reports a command the signal ended. Imports nothing
heavy, so the console scripts (`launch`) can say it while they import the rest. And a stop that a library swallowed
still stops the command (:func:`raise_if_stopped`)."""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT
STOPPED = ("stopped before finishing; run the command again (it cleans up what this run left, and a published output "
           "is replaced only by a complete one)")
TRAINING_STOPPED = ("run the same command again, without resume=never: a training stage resumes from its run "
                    "folder's latest checkpoint")

_stopped_by: list[int] = []


def stop_on_signals() -> Callable[[], None]:
    """From now on SIGINT and SIGTERM raise KeyboardInterrupt, as SIGINT does by default, and are remembered
    (:func:`stopped_by`); returns what puts the previous handlers back. A process forked from this one inherits the
    handler: a DataLoader worker ends quietly on either, as on Ctrl-C (killed by SIGTERM, the loader's clean-up
    printed a traceback). Outside the main thread, where Python takes no handler, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def remember_and_raise(signum: int, frame: object) -> None:
        _stopped_by.append(signum)
        raise KeyboardInterrupt

    _stopped_by.clear()
    previous = {signum: signal.signal(signum, remember_and_raise) for signum in STOP_SIGNALS}
    return lambda: [signal.signal(signum, handler) for signum, handler in previous.items()]


def stopped_by() -> int | None:
    """The signal that stopped the command since :func:`stop_on_signals`, or None."""
    return _stopped_by[0] if _stopped_by else None


def raise_if_stopped() -> None:
    """KeyboardInterrupt if a stop signal came since :func:`stop_on_signals`, though no exception carried it here:
    pyarrow's lazy import of pandas, which `to_numpy` starts, swallowed a Ctrl-C that came while it ran, and `train`
    went on to its last step."""
    if _stopped_by:
        raise KeyboardInterrupt


def stop_exit_code(signum: int | None) -> int:
    """128 + the signal's number; a KeyboardInterrupt no signal raised counts as Ctrl-C's."""
    return 128 + (signum or signal.SIGINT)


def stop_outcome(signum: int | None) -> str:
    """How the line names the stop: ``interrupted`` (Ctrl-C) or ``terminated (SIGTERM)``."""
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def stopped_line(signum: int | None) -> str:
    """`c4prep`'s line for a command the signal stopped."""
    outcome = stop_outcome(signum)
    return f"{outcome[0].upper()}{outcome[1:]}: {STOPPED}"


def training_stopped_line(signum: int | None) -> str:
    """`train`'s line for a run the signal stopped."""
    return f"train: {stop_outcome(signum)}: {TRAINING_STOPPED}"


INTERRUPTED = stopped_line(signal.SIGINT)
