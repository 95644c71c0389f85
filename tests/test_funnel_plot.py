"""funnel.png: the funnel plot a C4 run writes beside its manifest."""
import struct

import matplotlib
import matplotlib.image
import pytest

from c4prep.manifest import read_manifest
from c4prep.pipelines.funnel import build_funnel
from c4prep.pipelines.funnel_plot import DPI, HEIGHT_IN, PLOT_NAME, WIDTH_IN, funnel_rows, render_funnel_png
from c4prep.pipelines.run_c4 import RunConfig, run_c4

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
COUNTERS = {
    "read-input": {"files": 2, "records": 1000, "problem:corrupt_gzip": 1},
    "split-wet-file": {"passed": 990, "filtered:missing_url": 10},
    "clean-page": {"passed": 600, "filtered:too_few_sentences": 390},
    "english-filter": {"passed": 400, "filtered": 200, "filtered:ignored_language-de": 150},
    "write-shards": {"examples:train": 399, "examples:validation": 1},
}


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_rows_are_the_pages_left_after_each_stage():
    assert funnel_rows(build_funnel(COUNTERS)) == [
        ("pages in", 1000, "2 input files"),
        ("after split-wet-file", 990, "-10 (1.0%)"),
        ("after clean-page", 600, "-390 (39.4%)"),
        ("after english-filter", 400, "-200 (33.3%)"),
        ("pages out (written)", 400, "40.0% of pages in"),
    ]


def test_png_is_deterministic_with_a_fixed_size_whatever_the_user_style():
    funnel = build_funnel(COUNTERS)
    png = render_funnel_png(funnel)
    assert png_size(png) == (int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI)) == (1000, 600)
    with matplotlib.rc_context({"font.size": 20, "axes.facecolor": "black", "figure.dpi": 300}):
        assert render_funnel_png(funnel) == png
    assert b"Software" not in png and b"tIME" not in png  # no software name or time stamp
    assert render_funnel_png(build_funnel({**COUNTERS, "clean-page": {"passed": 601, "filtered": 389}})) != png


def test_an_empty_funnel_still_draws():
    assert funnel_rows(build_funnel({})) == [("pages in", 0, "0 input files"), ("pages out (written)", 0, "-")]
    assert png_size(render_funnel_png(build_funnel({}))) == (1000, 600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, webdata):
    outputs = [tmp_path_factory.mktemp("plot") / name for name in ("a", "b")]
    results = [run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=1))
               for output in outputs]
    return outputs, results


def test_a_run_writes_the_same_plot_for_the_same_input(two_runs):
    (first, second), (result, _) = two_runs
    assert result.funnel_plot == str(first / PLOT_NAME)
    png = (first / PLOT_NAME).read_bytes()
    assert png == (second / PLOT_NAME).read_bytes() == render_funnel_png(result.funnel)
    assert matplotlib.image.imread(str(first / PLOT_NAME)).shape == (600, 1000, 4)  # decodes as an RGBA image


def test_the_plot_sits_beside_the_manifest_and_is_not_a_shard(two_runs):
    output = two_runs[0][0]
    manifest = read_manifest(str(output))
    assert sorted(path.name for path in output.iterdir()) == ["README.md", manifest.data_dir, PLOT_NAME,
                                                              "manifest.json"]
    assert PLOT_NAME not in {shard.name for shard in manifest.shards}
    assert PLOT_NAME not in (output / "README.md").read_text()
