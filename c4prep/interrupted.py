"""What a command says when Ctrl-C stops it: one line on stderr, exit status 130. Imports nothing heavy, so the
console scripts (`launch`) can say it while they import the rest. And an interrupt that a library swallowed still
stops the command (:func:`remember_interrupts`)."""
import signal
import threading

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
INTERRUPTED = ("Interrupted: stopped before finishing; run the command again (it cleans up what this run left, and "
               "a published output is replaced only by a complete one)")
TRAINING_INTERRUPTED = "run the same command again: a training stage resumes from its run folder's latest checkpoint"


_interrupted = threading.Event()


def remember_interrupts() -> None:
    """From now on, Ctrl-C raises KeyboardInterrupt as by default and is remembered: pyarrow's lazy import of pandas,
    which `to_numpy` starts, swallowed one that came while it ran, and `train` went on to its last step."""
    def remember_and_raise(signum, frame) -> None:
        _interrupted.set()
        raise KeyboardInterrupt

    _interrupted.clear()
    signal.signal(signal.SIGINT, remember_and_raise)


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if Ctrl-C came since :func:`remember_interrupts`, though no exception carried it here."""
    if _interrupted.is_set():
        raise KeyboardInterrupt
