"""What a plain `c4prep run` imports at start: not the libraries only some runs need (each took a process's start
0.17-0.35 s, in the driver and again in every worker)."""
import subprocess
import sys


def test_the_pipeline_module_leaves_out_scipy_stats_and_datasketch():
    code = ("import sys, c4prep.pipelines.run_c4; "
            "print(sorted(name for name in ('scipy.stats', 'datasketch') if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_scipy_stats_still_imports_after_punkt():
    code = ("import c4prep.pipelines.sentences, scipy.stats; "
            "print(scipy.stats.fisher_exact([[1, 0], [0, 1]]).pvalue)")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(printed) == 1.0
