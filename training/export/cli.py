"""The `c4prep export` command (torch and the export modules load only when it runs)."""
from __future__ import annotations

import click

from c4prep.user_errors import UserError, reported_as_user_errors

EXPORT_PACKAGES = ("safetensors", "tokenizers")


@click.command()
@click.argument("source", metavar="RUN_OR_CHECKPOINT")
@click.argument("output", metavar="OUT")
@click.option("--vocab", metavar="PATH",
              help="SentencePiece vocabulary (folder or .model) when the run's data no longer names where it is.")
def export(source: str, output: str, vocab: str | None) -> None:
    """Export a `train` run (its latest checkpoint) or one checkpoint file into the new folder OUT.

    T5 becomes a T5ForConditionalGeneration folder and a GPT a GPT2LMHeadModel folder, each with its tokenizer
    (AutoTokenizer.from_pretrained(OUT)); an AdaVAE, its tuned modules. A model card (README.md) records the run.
    """
    from c4prep.manifest import ManifestError

    from ..checkpoint import CheckpointError
    from ..config_errors import TrainConfigError
    from .hf_tokenizers import TokenizerExportError
    from .run_source import ExportError

    try:
        with reported_as_user_errors(ExportError, CheckpointError, TokenizerExportError, ManifestError,
                                     TrainConfigError):
            from .run_export import export_run

            result = export_run(source, output, vocab)
    except ModuleNotFoundError as error:
        if error.name not in EXPORT_PACKAGES:
            raise
        raise UserError(f"c4prep export needs {error.name}: pip install 'c4prep[export]'") from None
    click.echo(f"exported {result['architecture']} (step {result['step']}) to {result['output']}: "
               f"{', '.join(result['files'])}")
