"""The GPU suite's plan, checked on the CPU so that a GPU lease is not lost to a typo: every A5 recipe variant and T5
benchmark variant that benchmarks/gpu_suite.sh names exists, the quick suite profiles bf16 candidates with captured
steps and runs the whole recipe of the fastest (its control flow run with python stood in for), every recipe run
starts with empty compile caches, and every variant's overrides make a valid config for both of its phases."""
import importlib.util
import itertools
import os
import re
import shlex
import subprocess
import sys
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


def _a5_candidates() -> list[str]:
    return re.search(r'A5_CANDIDATES="([^"]+)"', _suite()).group(1).split()


def test_the_suite_names_only_known_variants():
    named = [name for names in re.findall(r"--variants ([\w\- ]+)", _suite()) for name in names.split()]
    assert {"vanilla-bf16-captured-packed", "vanilla-bf16-compiled-captured-packed"} <= set(_a5_candidates())
    assert set(_a5_candidates()) | set(named) <= set(VARIANTS)


def test_the_suite_times_only_known_t5_variants():
    named = []
    for line in _suite().splitlines():
        words = shlex.split(line.split("#")[0]) if "--only" in line else []
        if words:
            named += list(itertools.takewhile(lambda word: not word.startswith("-"), words[words.index("--only") + 1:]))
    assert {"ours compiled", "ours flex compiled"} <= set(named) <= set(_benchmark("bench_t5_throughput").VARIANT_NAMES)


def test_the_quick_suite_profiles_bf16_captured_candidates_then_runs_the_fastest():
    for variant in _a5_candidates():
        cfg = load_config(["experiment=cs224n_a5_pretrain", *A5_RECIPE.phase_overrides(variant)[0]])
        assert (cfg.trainer.precision, cfg.trainer.capture_steps, cfg.trainer.loss_check) == ("bf16", True, "log")
    assert "vanilla-bf16-compiled-captured-packed128" in _a5_candidates()
    assert re.search(r'gpu_a5_step_profile.py --variant \$variant', _suite())
    assert re.search(r'--fastest-of "\$OUT"/a5_step_profile_\*.jsonl', _suite())
    assert re.search(r'gpu_a5_recipe.py --out \S+ --variants "\$fastest"', _suite())


def test_the_fastest_profiled_variant_is_chosen_and_failed_profiles_are_skipped(tmp_path, monkeypatch):
    reports = []
    for name, text in [("a", '{"variant": "vanilla-bf16-captured-packed", "projected_pretraining_s": 96.1}\n'),
                       ("b", 'warming up\n{"variant": "vanilla-bf16-compiled-captured-packed", '
                             '"projected_pretraining_s": 84.2}\n'),
                       ("c", ""), ("d", '{"variant": "vanilla-bf16-blocks-captured-packed", "pro')]:
        reports.append(tmp_path / f"{name}.jsonl")
        reports[-1].write_text(text)
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the profile script imports the recipe's, beside it
    profile = _benchmark("gpu_a5_step_profile")
    assert profile.fastest_variant([*reports, tmp_path / "missing.jsonl"]) == "vanilla-bf16-compiled-captured-packed"
    assert profile.fastest_variant(reports[2:]) is None


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_makes_a_valid_config_for_both_phases(name):
    attention, precision, _ = VARIANTS[name]
    pretrain_overrides, finetune_overrides = A5_RECIPE.phase_overrides(name)
    pretrain = load_config(["experiment=cs224n_a5_pretrain", *pretrain_overrides])
    finetune = load_config(["experiment=cs224n_a5_finetune", *finetune_overrides])
    assert (pretrain.trainer.precision, finetune.model.attention) == (precision, attention)


def test_each_recipe_run_starts_with_empty_compile_caches(tmp_path, monkeypatch):
    """A whole recipe's time includes its compiling, as on a user's first run: each variant's runs get their own empty
    Inductor and Triton caches (``--warm-cache`` keeps the machine's)."""
    seen = []

    def fake_run(command, env, **options):
        cache = env.get("TORCHINDUCTOR_CACHE_DIR")
        empty = cache is not None and Path(cache).is_dir() and not any(Path(cache).iterdir())
        seen.append((cache, env.get("TRITON_CACHE_DIR"), empty))
        return subprocess.CompletedProcess(command, 0, '{"evaluation": {}}\n', "")

    monkeypatch.setattr(A5_RECIPE.subprocess, "run", fake_run)
    for name in ("vanilla-bf16-captured-packed", "vanilla-bf16-compiled-captured-packed"):
        assert A5_RECIPE.run_variant(tmp_path, name)["compile_cache"] == "empty at the start"
    assert len(seen) == 4 and all(empty and triton == f"{cache}/triton" for cache, triton, empty in seen)
    assert seen[0][0] == seen[1][0] != seen[2][0] == seen[3][0]  # pretraining and fine-tuning share one
    seen.clear()
    assert A5_RECIPE.run_variant(tmp_path, "vanilla-bf16", warm_cache=True)["compile_cache"] == "the machine's"
    assert [cache for cache, _, _ in seen] == [os.environ.get("TORCHINDUCTOR_CACHE_DIR")] * 2  # as inherited


STAND_IN = """#!/usr/bin/env bash
# python's stand-in: records each call; the CUDA check passes; each profile reports its projection
echo "$*" >> "{calls}"
case "$1" in
  -c) exit 0 ;;
  -) cat > /dev/null; echo '{{}}' ;;
  benchmarks/gpu_a5_step_profile.py)
    if [ "$2" = --fastest-of ]; then exec "{python}" "$@"; fi
    case "$3" in *-compiled-captured-packed) p=80 ;; *) p=95 ;; esac
    echo "{{\\"variant\\": \\"$3\\", \\"projected_pretraining_s\\": $p}}" ;;
esac
"""


def _quick_suite(tmp_path, **env) -> list[str]:
    """The quick suite's calls, in order, with python stood in for (nothing is measured)."""
    calls, stand_in = tmp_path / "calls", tmp_path / "python"
    stand_in.write_text(STAND_IN.format(calls=calls, python=sys.executable))
    stand_in.chmod(0o755)
    result = subprocess.run(["bash", str(BENCHMARKS / "gpu_suite.sh"), "--quick", str(tmp_path / "out")],
                            env={**os.environ, "PYTHON": str(stand_in), **env}, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return calls.read_text().splitlines()[2:]  # after the set-up checks


def test_the_quick_suite_runs_the_recipe_of_the_profiled_candidate_it_projects_fastest(tmp_path):
    calls = _quick_suite(tmp_path)
    profiled = [call.split("--variant ")[1] for call in calls if "--variant " in call]
    assert profiled == _a5_candidates()
    recipes = [call for call in calls if call.startswith("benchmarks/gpu_a5_recipe.py")]
    assert recipes[0].endswith("--variants vanilla-bf16-compiled-captured-packed")
    order = [next(i for i, call in enumerate(calls) if key in call)
             for key in ("t5_small", "--fastest-of", "gpu_a5_recipe.py", "-m pytest", "synthesizer-fp32")]
    assert order == sorted(order)


def test_a_later_call_runs_the_named_recipe_and_the_steps_named(tmp_path):
    calls = _quick_suite(tmp_path, STEPS="a5_recipe_fastest tests", A5_RECIPE_VARIANT="vanilla-bf16-captured-packed")
    assert [call.split()[:2] for call in calls] == [["benchmarks/gpu_a5_recipe.py", "--out"], ["-m", "pytest"]]
    assert calls[0].endswith("a5_vanilla-bf16-captured-packed --variants vanilla-bf16-captured-packed")
