"""How every `c4prep` command reports a user's mistake: one line on stderr and exit status 2.

A traceback appears only for a real bug, or for any error under ``c4prep --debug``.
"""
from __future__ import annotations

import argparse
import difflib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from c4prep.interrupted import stop_exit_code, stop_on_signals, stopped_by, stopped_line

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"  # a warning on the terminal, from any process of a command
USAGE_EXIT_CODE = 2


class UserError(click.ClickException):
    """A mistake in what the user asked for or gave as input: printed as one line, exit status 2."""

    exit_code = USAGE_EXIT_CODE

    def __init__(self, message: object) -> None:
        super().__init__(" ".join(str(message).split()))


class CommandStopped(BaseException):
    """A command's KeyboardInterrupt on its way past click, whose own handler printed an empty line before it."""


class OneLineErrorsGroup(click.Group):
    """A click group whose usage errors (an unknown option, a bad value) are one line with exit 2, as every other
    user error, instead of click's usage block; and Ctrl-C or SIGTERM is one line with exit 130 or 143, however the
    engine wrapped the interrupt (Beam re-raises it as a RuntimeError naming its step, with a traceback)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        with interrupts_noted() as interrupted:
            try:
                exit_code = self._one_line_main(args, prog_name, complete_var, **extra)
            except BaseException as error:
                if not (interrupted() or isinstance(error, CommandStopped)):
                    raise
                click.echo(stopped_line(stopped_by()), err=True)
                sys.exit(stop_exit_code(stopped_by()))
        sys.exit(exit_code if isinstance(exit_code, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as interrupt:
            raise CommandStopped from interrupt

    def _named_command(self, args) -> str:
        """The command the arguments name (click gives no context for an option whose value is missing)."""
        named = next((arg for arg in (sys.argv[1:] if args is None else args) if arg in self.commands), None)
        return f"{self.name} {named}" if named else self.name

    def _one_line_main(self, args, prog_name, complete_var, **extra):
        """click's ``main`` with each error it handles printed as one line, then ``sys.exit``."""
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:  # bare `c4prep`: its help, as click gives it
            click.echo(error.format_message(), err=True)
            sys.exit(error.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else self._named_command(args)
            click.echo(f"Error: {error.format_message()} (see `{where} --help`)", err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.Abort as error:
            if isinstance(error.__cause__, KeyboardInterrupt):
                raise  # Ctrl-C: `main` says so
            click.echo("Aborted!", err=True)
            sys.exit(1)


@contextmanager
def interrupts_noted() -> Iterator[Callable[[], bool]]:
    """While the block runs, SIGINT and SIGTERM raise KeyboardInterrupt and are noted (`interrupted.stopped_by`);
    yields whether one came. Once one has, an exception that ends another thread (an engine's, whose peers the
    interrupt stopped) or that a finalizer raises (a DataLoader's, whose workers SIGTERM killed) is not printed,
    until the process ends. An interrupt raised in a finalizer (``__del__``) is lost, as Python loses it, but not
    printed: the command goes on."""
    def unless_interrupted(failure: threading.ExceptHookArgs) -> None:
        if stopped_by() is None:
            previous_hook(failure)

    def unless_interrupted_or_an_interrupt(unraisable) -> None:
        if stopped_by() is None and not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous_unraisable_hook(unraisable)

    restore_handlers, previous_hook = stop_on_signals(), threading.excepthook
    previous_unraisable_hook = sys.unraisablehook
    threading.excepthook, sys.unraisablehook = unless_interrupted, unless_interrupted_or_an_interrupt
    try:
        yield lambda: stopped_by() is not None
    finally:
        restore_handlers()
        if stopped_by() is None:
            threading.excepthook, sys.unraisablehook = previous_hook, previous_unraisable_hook


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
    """Keep Beam's own error logs (worker tracebacks of an error c4prep reports in one line) and its import-time
    notice about BigQuery's client off the terminal, unless ``--debug``. Call it before Beam is imported."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    if not debug_requested():
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
        logging.getLogger().addFilter(not_beams_bigquery_notice)  # a no-op when added before


def not_beams_bigquery_notice(record: logging.LogRecord) -> bool:
    """False for the warning ``import apache_beam`` logs on the root logger where google-apitools (Beam's ``gcp``
    extra) is not installed, as after `pip install c4prep`: c4prep uses no BigQuery client."""
    return not record.getMessage().startswith("apitools not found, and bigquery client libraries")


def refuse_unknown_options(ctx: click.Context, command: str) -> None:
    """A :class:`UserError` naming the first extra argument of ``command`` that Beam does not know either (with the
    closest option of the command or of Beam), if any: what the command passes on to Beam must be Beam's."""
    if not ctx.args:  # nothing passed on: Beam's parser (and the runner modules it imports) is not needed
        return
    from c4prep.beam_runs import split_beam_args

    try:
        unknown, beam_options = split_beam_args(ctx.args)
    except argparse.ArgumentError as error:
        raise UserError(f"{error}; nothing ran, see `{command} --help`") from None
    if not unknown:
        return
    own_options = [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)]
    first = unknown[0]
    if not first.startswith("-"):
        raise UserError(f"unexpected argument {first!r}: `{command}` takes no positional arguments; "
                        f"see `{command} --help`")
    name = first.split("=", 1)[0]
    close = difflib.get_close_matches(name, own_options + beam_options, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UserError(f"unknown option {name}{hint}: neither `{command}` nor the Beam runner knows it, so nothing "
                    f"ran; see `{command} --help`")
