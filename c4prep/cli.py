"""The `c4prep` command line root: one group, each stage contributes its commands."""
import click

from c4prep import __version__
from c4prep.pipelines.cli import run
from c4prep.tokenization.cli import tokenize, vocab


@click.group()
@click.version_option(__version__, prog_name="c4prep")
def main() -> None:
    """c4prep: turn raw web crawl into a C4-style pretraining corpus."""


main.add_command(run)
main.add_command(vocab)
main.add_command(tokenize)
