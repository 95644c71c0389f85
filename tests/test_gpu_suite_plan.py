"""The GPU suite's plan, checked on the CPU so that a GPU lease is not lost to a typo: every A5 recipe variant and T5
benchmark variant that benchmarks/gpu_suite.sh names exists, the A5 step profile runs the recipe's bf16 variant
with captured steps, and every variant's overrides make a valid config for both of its phases."""
import importlib.util
import itertools
import re
import shlex
from pathlib import Path

import pytest

from c4prep.training.config import load_config

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


A5_RECIPE = _benchmark("gpu_a5_recipe")
VARIANTS = A5_RECIPE.VARIANTS


def _suite() -> str:
    return (BENCHMARKS / "gpu_suite.sh").read_text().replace("\\\n", " ")


def test_the_suite_names_only_known_variants():
    suite = _suite()
    listed = (re.findall(r"--variants ([\w\- ]+)", suite) + re.findall(r"--variant (\S+)", suite)
              + re.findall(r"for variant in ([\w\- ]+);", suite))
    named = [name for names in listed for name in names.split()]
    assert {"vanilla-bf16-captured-packed", "vanilla-bf16-compiled-captured-packed"} <= set(named) <= set(VARIANTS)


def test_the_suite_times_only_known_t5_variants():
    named = []
    for line in _suite().splitlines():
        words = shlex.split(line.split("#")[0]) if "--only" in line else []
        if words:
            named += list(itertools.takewhile(lambda word: not word.startswith("-"), words[words.index("--only") + 1:]))
    assert {"ours compiled", "ours flex compiled"} <= set(named) <= set(_benchmark("bench_t5_throughput").VARIANT_NAMES)


def test_the_quick_suite_profiles_the_recipes_bf16_captured_variant():
    profiles = re.findall(r"gpu_a5_step_profile.py\s+--variant (\S+)((?: [\w.]+=\S+)*)", _suite())
    assert len(profiles) == 2
    for variant, overrides in profiles:
        cfg = load_config(["experiment=cs224n_a5_pretrain", *A5_RECIPE.phase_overrides(variant)[0], *overrides.split()])
        assert (cfg.trainer.precision, cfg.trainer.capture_steps, cfg.trainer.loss_check) == ("bf16", True, "log")
    assert profiles[1][1].split() == ["data.pack_length=128"]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_makes_a_valid_config_for_both_phases(name):
    attention, precision, _ = VARIANTS[name]
    pretrain_overrides, finetune_overrides = A5_RECIPE.phase_overrides(name)
    pretrain = load_config(["experiment=cs224n_a5_pretrain", *pretrain_overrides])
    finetune = load_config(["experiment=cs224n_a5_finetune", *finetune_overrides])
    assert (pretrain.trainer.precision, finetune.model.attention) == (precision, attention)
