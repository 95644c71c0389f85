"""How every `c4prep` command reports a user's mistake: one line on stderr and exit status 2.

A traceback appears only for a real bug, or for any error under ``c4prep --debug``.
"""
from __future__ import annotations

import difflib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import click

USAGE_EXIT_CODE = 2


class UserError(click.ClickException):
    """A mistake in what the user asked for or gave as input: printed as one line, exit status 2."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, message: object) -> None:
        super().__init__(" ".join(str(message).split()))


def debug_requested() -> bool:
    """Whether the command line asked for ``c4prep --debug``."""
    context = click.get_current_context(silent=True)
    return bool(context is not None and context.find_root().params.get("debug"))


@contextmanager
def reported_as_user_errors(*error_types: type[BaseException]) -> Iterator[None]:
    """Turn the listed errors into one-line :class:`UserError`s (kept as they are under ``--debug``)."""
    try:
        yield
    except error_types as error:
        if debug_requested():
            raise
        raise UserError(error) from None


def quiet_engine_logs() -> None:
    """Keep Beam's own error logs (worker tracebacks of an error c4prep reports in one line) off the terminal,
    unless ``--debug``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not debug_requested():
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def option_names(command: click.Command) -> list[str]:
    """Every option string of a click command (``--output``, ``--no-near-dedup``, ...)."""
    return [name for param in command.params for name in (*param.opts, *param.secondary_opts)]


def refuse_unknown_options(command: str, unknown: Sequence[str], known: Sequence[str]) -> None:
    """A :class:`UserError` naming the first unknown option (with the closest known one), if any."""
    if not unknown:
        return
    first = unknown[0]
    if not first.startswith("-"):
        raise UserError(f"unexpected argument {first!r}: `{command}` takes no positional arguments; "
                        f"see `{command} --help`")
    name = first.split("=", 1)[0]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UserError(f"unknown option {name}{hint}: neither `{command}` nor the Beam runner knows it, so nothing "
                    f"ran; see `{command} --help`")
