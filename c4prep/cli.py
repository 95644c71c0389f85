"""The `c4prep` command line root."""
import click


@click.group()
def main() -> None:
    """c4prep: build a C4-style corpus from raw web crawl."""
