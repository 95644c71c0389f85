"""The progress line of `c4prep run`: its format, the live tallies behind it, and its output on a small run."""
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from click.testing import CliRunner

from c4prep.beam_runs import CounterCache
from c4prep.cli import main
from c4prep.manifest import read_manifest
from c4prep.pipelines.funnel import format_progress
from c4prep.progress import (
    SPOOL_ENV,
    LiveTally,
    ProgressSettings,
    ProgressWatch,
    check_interval,
    format_elapsed,
    live_tally,
    read_spool,
    watching,
)

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
LINE = re.compile(r"^(progress|done in) (\d+:\d\d:\d\d): (?:running, no counters reported yet|([\d,]+) pages read from "
                  r"([\d,]+) files? \(([\d,]+\.\d) pages/s\), ([\d,]+) kept( so far)?(?:; dropped: (.+))?)$")

COUNTERS = {
    "read-input": {"files": 3, "records": 1200},
    "split-wet-file": {"passed": 1190, "filtered:missing_url": 10},
    "too-long-filter": {"passed": 1190},
    "clean-page": {"passed": 700, "filtered:too_few_sentences": 300, "line-in": 9000, "line-passed": 5000},
    "english-filter": {"passed": 100, "filtered": 40, "filtered:ignored_language-de": 25},
}


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_format_elapsed():
    assert format_elapsed(0) == "0:00:00"
    assert format_elapsed(3725.9) == "1:02:05"
    assert format_elapsed(-1) == "0:00:00"


def test_progress_line_while_running():
    """Kept so far = read and not dropped yet: 1,200 - 10 - 300 - 40 (per-language detail aside)."""
    line = format_progress(COUNTERS, 60.0)
    assert line == ("progress 0:01:00: 1,200 pages read from 3 files (20.0 pages/s), 850 kept so far; dropped: "
                    "split-wet-file 10, too-long-filter 0, clean-page 300, english-filter 40")
    assert LINE.match(line)


def test_final_progress_line_counts_the_written_pages():
    counters = {**COUNTERS, "write-shards": {"examples:train": 99, "examples:validation": 1, "lines": 4000}}
    line = format_progress(counters, 2.0, done=True)
    assert line.startswith("done in 0:00:02: 1,200 pages read from 3 files (600.0 pages/s), 100 kept; dropped: ")
    assert LINE.match(line)


def test_progress_line_before_any_counter_and_at_time_zero():
    assert format_progress({}, 95) == "progress 0:01:35: running, no counters reported yet"
    assert format_progress({"read-input": {"files": 1}}, 0.0) == (
        "progress 0:00:00: 0 pages read from 1 file (0.0 pages/s), 0 kept so far")


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_interval_must_be_finite_and_not_negative(bad):
    with pytest.raises(ValueError, match="interval"):
        check_interval(bad)
    with pytest.raises(ValueError):
        ProgressSettings(format_progress, bad)
    assert check_interval(0) == 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    """Poll until `condition()` holds: a loaded machine may run the progress thread late, never a test failure."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def _watch(stream, interval_s, counters) -> ProgressWatch:
    watch = ProgressWatch(ProgressSettings(format_progress, interval_s, stream), [lambda: counters])
    watch.start()
    _wait_for(lambda: stream.getvalue().count("progress ") >= 2)
    return watch


def test_watch_without_terminal_logs_one_line_per_interval_then_the_final_line():
    stream = io.StringIO()
    watch = _watch(stream, 0.02, COUNTERS)
    watch.finish({**COUNTERS, "write-shards": {"examples:train": 100}})
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and "\r" not in stream.getvalue()
    assert all(line.startswith("progress ") and line.endswith("english-filter 40") for line in lines[:-1])
    assert lines[-1].startswith("done in ") and ", 100 kept; dropped" in lines[-1]


def test_watch_on_a_terminal_redraws_one_line():
    stream = _Terminal()
    watch = _watch(stream, 0.02, COUNTERS)
    watch.finish({**COUNTERS, "write-shards": {"examples:train": 100}})
    text = stream.getvalue()
    assert text.startswith("\rprogress ") and text.count("\n") == 1 and text.endswith("\x1b[K\n")
    assert text.rsplit("\r", 1)[-1].startswith("done in ")


def test_a_failed_job_ends_the_open_terminal_line():
    stream = _Terminal()
    with pytest.raises(RuntimeError):
        with watching(ProgressSettings(format_progress, 0.02, stream)):
            _wait_for(lambda: "progress " in stream.getvalue())  # a line is open on the terminal
            raise RuntimeError("the job failed")
    assert stream.getvalue().endswith("\n") and "done in" not in stream.getvalue()


def test_no_watch_when_progress_is_off():
    stream = io.StringIO()
    for settings in (None, ProgressSettings(format_progress, 0, stream)):
        with watching(settings) as watch:
            assert live_tally() is None and SPOOL_ENV not in os.environ
            watch.finish(COUNTERS)
    assert stream.getvalue() == ""


def test_counter_bumps_of_this_process_reach_the_line_live():
    stream = io.StringIO()
    with watching(ProgressSettings(format_progress, 0.02, stream)) as watch:
        spool = os.environ[SPOOL_ENV]
        counters = CounterCache("read-input")  # what a DoFn of an in-memory run creates in its setup
        counters.inc("files")
        counters.inc("records", 7)
        _wait_for(lambda: "7 pages read from 1 file" in stream.getvalue())
        assert watch.snapshot() == {"read-input": {"files": 1, "records": 7}}
        watch.finish({})
    assert "progress" in stream.getvalue() and "7 pages read from 1 file" in stream.getvalue()
    assert live_tally() is None and SPOOL_ENV not in os.environ and not os.path.exists(spool)


def test_worker_processes_write_their_tallies_to_the_spool(tmp_path, monkeypatch):
    """A worker process started under SPOOL_ENV (as the multi_processing DirectRunner starts them) counts into its
    own tally, which a thread writes to the spool folder every second for the driver to sum."""
    worker = textwrap.dedent("""
        import os, time
        from pathlib import Path
        from c4prep.progress import SPOOL_ENV, live_tally
        tally = live_tally()
        tally.add("read-input", "records", 5)
        tally.add("clean-page", "filtered:empty", 2)
        deadline = time.monotonic() + 30  # its thread writes within about a second
        while not list(Path(os.environ[SPOOL_ENV]).glob(f"{os.getpid()}-*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
    """)
    env = {**os.environ, SPOOL_ENV: str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", worker], env=env, check=True, timeout=60)
    assert read_spool(str(tmp_path)) == {"clean-page": {"filtered:empty": 4}, "read-input": {"records": 10}}
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_tally_is_thread_safe_and_unspooled_in_the_driver():
    tally = LiveTally()
    threads = [threading.Thread(target=lambda: [tally.add("n", "c", 1) for _ in range(10_000)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.counters() == {"n": {"c": 40_000}}


def test_run_shows_progress_and_its_final_line_matches_the_manifest(tmp_path, webdata):
    """A small run without a terminal (CliRunner): progress lines on stderr, live on the in-memory DirectRunner,
    the last one with the run's counts; stdout's summary has none of them and names the funnel plot."""
    output = tmp_path / "out"
    outcome = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output),
                                        "--num-shards", "2", "--progress-interval", "0.01"])
    assert outcome.exit_code == 0, outcome.output
    lines = outcome.stderr.splitlines()
    assert len(lines) >= 3, outcome.stderr
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), [line for line, match in zip(lines, parsed) if not match]
    live = [match for match in parsed[:-1] if match.group(3)]
    assert all(match.group(1) == "progress" and (match.group(3) is None or match.group(7)) for match in parsed[:-1])
    assert live and max(_number(match.group(3)) for match in live) > 0  # live counts, before the job ended
    final = parsed[-1]
    manifest = read_manifest(str(output))
    funnel = manifest.extra["funnel"]
    assert final.group(1) == "done in" and final.group(7) is None
    assert _number(final.group(3)) == manifest.counters["read-input"]["records"] == funnel["pages_in"] == 335
    assert _number(final.group(4)) == funnel["input_files"] == 1
    assert _number(final.group(6)) == funnel["pages_out"] == sum(split.num_rows for split in manifest.splits.values())
    assert float(final.group(5).replace(",", "")) > 0
    drops = dict(item.rsplit(" ", 1) for item in final.group(8).split(", "))
    assert {name: _number(n) for name, n in drops.items()} == {
        stage["namespace"]: sum(stage["dropped"].values()) for stage in funnel["stages"]}
    assert "pages read" not in outcome.stdout
    assert f"funnel plot: {output / 'funnel.png'}" in outcome.stdout


def test_no_progress_prints_no_line(tmp_path, webdata):
    outcome = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--output", str(tmp_path / "o"),
                                        "--num-shards", "1", "--no-progress"])
    assert outcome.exit_code == 0, outcome.output
    assert "pages read" not in outcome.stderr and "no counters reported" not in outcome.stderr


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "inf"])
def test_bad_progress_interval_is_one_line_before_any_work(tmp_path, bad):
    outcome = CliRunner().invoke(main, ["run", "--progress-interval", bad, "--output", str(tmp_path / "o")])
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stderr.strip().splitlines()[-1] == (
        f"Error: --progress-interval {bad!r} is not a number of seconds >= 0 (0 turns progress off)")
    assert not (tmp_path / "o").exists()


def test_no_progress_with_an_interval_is_one_line_before_any_work(tmp_path):
    """--no-progress silently won over the --progress-interval given with it."""
    outcome = CliRunner().invoke(main, ["run", "--no-progress", "--progress-interval", "10", "--output",
                                        str(tmp_path / "o")])
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stderr.strip().splitlines()[-1] == (
        "Error: --no-progress turns progress off, --progress-interval 10 sets it: give one")
    assert not (tmp_path / "o").exists()


def test_spool_files_are_json_counters(tmp_path):
    (tmp_path / "1-a.json").write_text(json.dumps({"read-input": {"records": 3}}))
    (tmp_path / "2-b.json").write_text("{not json")  # a file caught mid-write is skipped
    (tmp_path / ".3-c.json.tmp").write_text(json.dumps({"read-input": {"records": 100}}))
    assert read_spool(str(tmp_path)) == {"read-input": {"records": 3}}


def test_the_data_loss_check_stays_on_with_progress(tmp_path, webdata, monkeypatch):
    """Progress changes nothing about the integrity check: a run whose runner lost pages fails with one line after
    its final progress line, and writes nothing."""
    from c4prep.beam_runs import run_to_completion

    def losing_pages(pipeline, options, progress_settings=None):
        counters = run_to_completion(pipeline, options, progress_settings)
        counters["english-filter"]["passed"] -= 2
        return counters

    monkeypatch.setattr("c4prep.pipelines.run_c4.run_to_completion", losing_pages)
    output = tmp_path / "out"
    outcome = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output),
                                        "--num-shards", "1", "--progress-interval", "0.05"])
    assert outcome.exit_code == 2, outcome.output
    *_, final, error = outcome.stderr.splitlines()
    assert final.startswith("done in ") and error.startswith("Error: data went missing between pipeline steps")
    assert not (output / "manifest.json").exists() and not (output / "funnel.png").exists()
