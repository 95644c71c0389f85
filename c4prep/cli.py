"""The `c4prep` command line root: one group, each stage contributes its commands."""
import click

from c4prep import __version__
from c4prep.pipelines.cli import run
from c4prep.tokenization.cli import tokenize, vocab
from c4prep.training.export.cli import export
from c4prep.user_errors import OneLineErrorsGroup


@click.group(name="c4prep", cls=OneLineErrorsGroup)
@click.version_option(__version__, prog_name="c4prep")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error instead of its one line.")
def main(debug: bool) -> None:
    """c4prep: turn raw web crawl into a C4-style pretraining corpus.

    A mistake in the command or its input is reported in one line with exit status 2.
    """


main.add_command(run)
main.add_command(vocab)
main.add_command(tokenize)
main.add_command(export)
