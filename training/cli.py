"""The ``train`` command: ``train [group=option ...] [key=value ...]`` over the bundled ``configs/``."""
from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Sequence

from c4prep.interrupted import stop_exit_code, stopped_by, training_stopped_line
from c4prep.manifest import ManifestError
from c4prep.shards import UnsupportedUriError
from c4prep.user_errors import interrupts_noted

from .checkpoint import CheckpointError
from .config import TrainConfigError, config_dir, load_config, to_yaml
from .data.token_index import TokenDataError
from .distributed import launched_rank, shutdown_distributed
from .run_lock import release_run_folders
from .trainer import TrainingDiverged

USAGE = """usage: train [--print-config] [--debug] [group=option ...] [key=value ...]

A mistake in the config, data or checkpoint is one line on stderr (exit 2); --debug adds its full traceback.

Stages (stage=<name>: the model family or data.kind each runs with):
{stages}
Config groups (configs/<group>/<option>.yaml):
{groups}
Examples:
  train stage=pretrain model=t5_tiny trainer.max_steps=20
  train stage=evaluate init_from=c4prep_runs/pretrain      # the run's objective and data -> <run>/evaluate
  train stage=generate init_from=c4prep_runs/pretrain 'generate.prompts=["The <extra_id_0> walks."]'
  torchrun --nproc_per_node=2 -m c4prep.training.cli trainer.device=cpu   # DDP (gloo on CPU)
"""
USER_ERRORS = (TrainConfigError, TokenDataError, CheckpointError, ManifestError, UnsupportedUriError)


def _groups() -> str:
    lines = []
    for folder in sorted(p for p in config_dir().iterdir() if p.is_dir() and p.name not in ("corpus", "__pycache__")):
        options = sorted(f.stem for f in folder.glob("*.yaml"))
        lines.append(f"  {folder.name:<10} {', '.join(options)}")
    return "\n".join(lines)


def _stages() -> str:
    from .stages import STAGE_TABLE

    routes: dict[str, list[str]] = {}
    for stage, route in STAGE_TABLE:
        routes.setdefault(stage, []).append(route)
    return "\n".join(f"  {stage:<10} {', '.join(found)}" for stage, found in routes.items())


def _report(outcome: str, error: BaseException, debug: bool, line: str | None = None) -> None:
    """``line`` (by default ``train: <outcome>: <error>``) on stderr; with ``debug`` after the full traceback,
    including the low-level error that the one-line message replaced."""
    if debug:
        error.__suppress_context__ = False
        traceback.print_exception(error)
    print(line or f"train: {outcome}: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE.format(stages=_stages(), groups=_groups()))
        return 0
    print_only, debug = "--print-config" in args, "--debug" in args
    args = [a for a in args if a not in ("--print-config", "--debug")]
    unknown = next((a for a in args if a.startswith("-")), None)
    if unknown is not None:  # Hydra's own flags (--cfg, --multirun, -m) included: `train` composes, it runs no app
        sweep = " (it runs no Hydra sweeps: run it once per value, each with its own output_dir)" \
            if unknown in ("-m", "--multirun") else ""
        _report("error", ValueError(f"unknown option {unknown}: train takes key=value overrides, --print-config "
                                    f"(the settings a run would use), --debug and --help{sweep}"), debug)
        return 2
    main_rank = launched_rank() == 0  # under torchrun the others say only what goes wrong
    logging.basicConfig(level=logging.INFO if main_rank else logging.WARNING, format="%(message)s")
    with interrupts_noted() as stopped:
        try:
            return _run(args, print_only, debug, main_rank)
        except BaseException as error:
            if not (isinstance(error, KeyboardInterrupt) or stopped()):
                raise
            _report("stopped", error, debug, training_stopped_line(stopped_by()))
            return stop_exit_code(stopped_by())


def _run(args: list[str], print_only: bool, debug: bool, main_rank: bool) -> int:
    """The command once its arguments are read: its exit status; a user's mistake is one line."""
    try:
        cfg = load_config(args)
        if print_only:
            print(to_yaml(cfg), end="")
            return 0
        from .stages import run_stage

        summary = run_stage(cfg)
    except USER_ERRORS as error:
        release_run_folders(refused=True)
        _report("error", error, debug)
        return 2
    except TrainingDiverged as error:
        _report("stopped", error, debug)
        return 1
    finally:
        release_run_folders()
        shutdown_distributed()
    if main_rank:
        print(json.dumps({k: v for k, v in summary.items() if k != "losses"}, default=str))
    return 0

if __name__ == "__main__":
    sys.exit(main())
