"""Which settings a resumed run may change: how it executes, logs and checkpoints, and how long it runs; not what it
trains (model, objective, optimizer, schedule, batch size, seed, stage, the ``init_from`` it started from, which
exports name and AdaVAE takes its vocabulary from). The data is checked by its fingerprint (`restore`), since its
paths may move while its content stays; how it is scored (GPT-1's ``data.lm_weight``) is compared here. The
settings of the stages that use a trained run (``evaluate.``, ``generate.``, ``classify.``) are no training stage's
(`check_section_settings` refuses them changed there), so they are not compared: ``classify.folder`` follows
``C4PREP_SHARED_DATA``, which a resume in another shell may set otherwise.

A resume restores the optimizer and schedule state from the checkpoint, so a changed ``optimizer.lr`` would be
silently ignored and a changed model would not load; the run folder's ``config.yaml`` (the settings it trained
with) must then stay as it is.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

CHANGEABLE_ON_RESUME = frozenset({
    "trainer.max_steps", "trainer.micro_batch_size", "trainer.precision", "trainer.device", "trainer.tf32",
    "trainer.num_workers", "trainer.num_threads", "trainer.compile", "trainer.compile_mode", "trainer.compile_scope",
    "trainer.loss_check", "trainer.capture_steps", "trainer.log_every", "trainer.eval_every", "trainer.eval_batches",
    "trainer.checkpoint_every", "trainer.keep_checkpoints", "trainer.tensorboard", "trainer.progress",
    "resume", "output_dir",
})
CHECKED_BY_FINGERPRINT = "data."
SCORING_DATA_SETTINGS = frozenset({"data.lm_weight"})  # how the data is scored, which its fingerprint leaves out
MODEL = "model."
TOTAL_STEPS = "schedule.options.total_steps"  # follows trainer.max_steps in the bundled schedules
USING_STAGES = ("evaluate.", "generate.", "classify.")  # settings of the stages that use a trained run, never resumed
PATHS = frozenset({"init_from"})  # the weights (and vocabulary) a run started from: 'runs/a/' is 'runs/a'


def flat_settings(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``{"section.key": value}``."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def resume_conflicts(recorded: Mapping[str, Any], current: Mapping[str, Any], unread: tuple[str, ...] = ()
                     ) -> list[tuple[str, Any, Any]]:
    """``(setting, recorded value, current value)`` for each setting a resume may not change, by name. The model
    section lists the fields it sets, so a field on one side only is a change (None on the other); any other setting
    on one side only (a key added since) is not compared, nor those the stage does not read (``unread`` prefixes).
    ``total_steps`` may change with ``max_steps`` where it is ``max_steps`` on both sides."""
    old, new = flat_settings(recorded), flat_settings(current)
    skipped = set(CHANGEABLE_ON_RESUME)
    if all(side.get(TOTAL_STEPS) == side.get("trainer.max_steps") for side in (old, new)):
        skipped.add(TOTAL_STEPS)
    compared = (old.keys() & new.keys()) | {key for key in old.keys() | new.keys() if key.startswith(MODEL)}
    differing = [key for key in compared if key not in skipped and not key.startswith((*USING_STAGES, *unread))
                 and (not key.startswith(CHECKED_BY_FINGERPRINT) or key in SCORING_DATA_SETTINGS)
                 and _comparable(key, old.get(key)) != _comparable(key, new.get(key))]
    kinds_first = sorted(differing, key=lambda key: (key != "stage", not key.endswith((".name", ".size")), key))
    return [(key, old.get(key), new.get(key)) for key in kinds_first]


def _comparable(key: str, value: Any) -> Any:
    """``value`` as a resume compares it: a path setting as the absolute path it resolves to, links followed (runs
    recorded before paths were made absolute name them relative to the working folder)."""
    return os.path.realpath(value) if key in PATHS and isinstance(value, str) and "://" not in value else value
