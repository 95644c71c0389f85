"""`train` on untrusted input: checkpoints never run code, damaged token shards are refused, errors are one line."""
import dataclasses
import errno
import fcntl
import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner

from c4prep.cli import main as c4prep_main
from c4prep.interrupted import INTERRUPTED_EXIT_CODE
from c4prep.manifest import Manifest, read_manifest, write_manifest
from c4prep.shards import read_shard, write_shard
from c4prep.training import stages
from c4prep.training.cli import main
from c4prep.training.checkpoint import load_checkpoint, save_checkpoint
from c4prep.training.config import TrainConfigError, load_config
from c4prep.training.config_groups import model_settings
from c4prep.training.config_runs import recorded_settings
from c4prep.training.resume_settings import resume_conflicts

# A t5_tiny pre-training run of one step on the sample tokens' train split.
TINY = ["model=t5_tiny", "objective.inputs_length=128", "objective.targets_length=32", "trainer.global_batch_size=8",
        "trainer.micro_batch_size=4", "trainer.max_steps=1", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.num_workers=0", "trainer.device=cpu", "data.validation_split=null"]


class RunsCode:
    """Unpickling it creates ``marker``: what a malicious checkpoint could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


class RunsShell(RunsCode):
    """The same through ``os.system``, which torch refuses in other words (its module, posix, is blocked)."""

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def train(tokens: Path, tmp_path: Path, *overrides: str) -> int:
    return main([f"data.tokens={tokens}", f"output_dir={tmp_path / 'run'}", *TINY, *overrides])


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("stage", ["pretrain", "evaluate"])
@pytest.mark.parametrize("writer", ["torch.save", "legacy torch.save", "pickle.dump"])
@pytest.mark.parametrize("payload", [RunsCode, RunsShell])
def test_a_checkpoint_that_would_run_code_is_refused_unrun(sample_tokens, tmp_path, capsys, stage, writer, payload):
    marker, evil = tmp_path / "marker", tmp_path / "evil.pt"
    state = {"step": 1, "model": {}, "model_spec": {"name": "t5"}, "payload": payload(marker)}
    if writer == "pickle.dump":
        evil.write_bytes(pickle.dumps(state, protocol=2))
    else:
        torch.save(state, evil, _use_new_zipfile_serialization=writer == "torch.save")
    assert train(sample_tokens, tmp_path, f"stage={stage}", f"init_from={evil}") == 2
    err = one_line_error(capsys)
    assert str(evil) in err and "not a c4prep checkpoint" in err and "would run code" in err
    assert not marker.exists()


def _truncated(path: Path) -> None:
    torch.save({"step": 1, "model": {"weight": torch.ones(1000)}, "model_spec": {"name": "t5"}}, path)
    path.write_bytes(path.read_bytes()[:2000])


def _cut(path: Path) -> None:
    """A copy cut short (a full disk, an interrupted transfer): torch's zip reader fails with EINVAL."""
    torch.save({"step": 1, "model": {"weight": torch.ones(100_000)}, "model_spec": {"name": "t5"}}, path)
    path.write_bytes(path.read_bytes()[:5000])


def _zip_of_text(path: Path) -> None:
    shutil.make_archive(str(path), "zip", root_dir=Path(__file__).parent, base_dir="conftest.py")
    os.replace(f"{path}.zip", path)


DAMAGED = {
    "random bytes": lambda path: path.write_bytes(np.random.default_rng(0).bytes(4096)),
    "text": lambda path: path.write_text("step: 3\nmodel: t5_tiny\n"),
    "empty": lambda path: path.write_bytes(b""),
    "truncated": _truncated,
    "cut within its weights": _cut,
    "zip, not torch": _zip_of_text,
    "a tensor": lambda path: torch.save(torch.ones(3), path),
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_or_foreign_checkpoint_is_one_line(tmp_path, capsys, damage):
    checkpoint = tmp_path / "step_00000003.pt"
    DAMAGED[damage](checkpoint)
    assert main(["stage=evaluate", f"init_from={checkpoint}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"train: error: {checkpoint} is not a c4prep checkpoint"), err


def test_a_file_of_the_users_is_not_a_checkpoint_to_delete_and_a_runs_damaged_one_is(sample_tokens, tmp_path, capsys):
    """A token shard or a text as init_from was 'not a c4prep checkpoint or is damaged ... or delete it'."""
    shard = next(sample_tokens.glob("data-*/train-*"))
    assert main(["stage=evaluate", f"init_from={shard}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
    assert one_line_error(capsys) == (f"train: error: {shard} is not a c4prep checkpoint (UnpicklingError while "
                                      "reading it): pass a run folder or a step_*.pt file that `train` wrote")
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000003.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("step: 3\n")
    assert main(["stage=evaluate", f"init_from={tmp_path / 'run'}", f"output_dir={tmp_path / 'eval'}", *TINY]) == 2
    assert one_line_error(capsys).endswith(f"delete it, and {checkpoint.parent / 'latest'} if it names it, to resume "
                                           "from an older one")


def test_a_changed_byte_in_a_checkpoints_weights_is_one_line(tmp_path, capsys):
    """torch.load does not check the CRC-32 of the zip entries it reads: the changed weight loaded."""
    checkpoint = tmp_path / "step_00000003.pt"
    torch.save({"step": 3, "model": {"weight": torch.arange(4096.0)}, "model_spec": {"name": "t5"}}, checkpoint)
    data = bytearray(checkpoint.read_bytes())
    data[data.index(torch.arange(4096.0)[2000:2001].numpy().tobytes())] ^= 0x01
    checkpoint.write_bytes(bytes(data))
    assert main(["stage=evaluate", f"init_from={checkpoint}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
    err = one_line_error(capsys)
    assert err == (f"train: error: {checkpoint} is damaged: its entry step_00000003/data/0 does not match what was "
                   "recorded when it was written; delete it to resume from an older checkpoint")


@pytest.mark.parametrize("config_yaml, problem", [
    ("model:\n  name: t5\n  : [unclosed\n", "expected <block end>"),
    ("model: !!python/object/apply:os.system ['touch {marker}']\n", "could not determine a constructor"),
    ("- a list\n", "not a YAML mapping"),
])
def test_a_changed_run_config_is_one_line_and_runs_nothing(tmp_path, capsys, config_yaml, problem):
    run, marker = tmp_path / "run", tmp_path / "marker"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"step": 1, "model": {}, "model_spec": {"name": "t5"}}, run / "checkpoints" / "step_00000001.pt")
    (run / "checkpoints" / "latest").write_text("step_00000001.pt\n")
    (run / "config.yaml").write_text(config_yaml.format(marker=marker))
    assert main(["stage=evaluate", f"init_from={run}", *TINY]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"train: error: {run / 'config.yaml'}") and problem in err, err
    assert not marker.exists()


@pytest.mark.parametrize("field", [8, 10, 28])  # the flags ("encrypted"), the method, the name's length
def test_a_changed_byte_in_a_checkpoints_zip_directory_is_one_line(tmp_path, capsys, field):
    """zipfile raised RuntimeError, NotImplementedError or UnicodeDecodeError: a traceback, exit 1."""
    checkpoint = tmp_path / "step_00000003.pt"
    torch.save({"step": 3, "model": {"weight": torch.arange(64.0)}, "model_spec": {"name": "t5"}}, checkpoint)
    data = bytearray(checkpoint.read_bytes())
    data[data.index(b"PK\x01\x02") + field] ^= 0x01  # the first entry of the central directory
    checkpoint.write_bytes(bytes(data))
    assert main(["stage=evaluate", f"init_from={checkpoint}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"train: error: {checkpoint} is ") and ("is damaged" in err or "not a c4prep" in err), err


@pytest.mark.parametrize("mismatch, message", [
    ("vocabulary", "ids but"),
    ("weights", "the checkpoint's weights do not fit the t5 model its model_spec describes"),
])
def test_a_checkpoint_that_fits_neither_its_model_nor_the_data_is_one_line(sample_tokens, tmp_path, capsys, mismatch,
                                                                            message):
    vocab_size = read_manifest(str(sample_tokens)).extra["vocabulary"]["vocab_size"]
    spec = model_settings(load_config(["model=t5_tiny"]).model) | {"vocab_size": vocab_size}
    checkpoint = tmp_path / "step_00000001.pt"
    if mismatch == "vocabulary":
        torch.save({"step": 1, "model": {}, "model_spec": {**spec, "vocab_size": vocab_size + 1}}, checkpoint)
    else:
        torch.save({"step": 1, "model": {"shared.weight": torch.zeros(3, 3)}, "model_spec": spec}, checkpoint)
    assert train(sample_tokens, tmp_path, "stage=evaluate", f"init_from={checkpoint}") == 2
    assert message in one_line_error(capsys)


def test_debug_shows_the_traceback_behind_the_one_line(tmp_path, capsys):
    checkpoint = tmp_path / "text.pt"
    checkpoint.write_text("not a checkpoint\n")
    assert main(["--debug", "stage=evaluate", f"init_from={checkpoint}", f"output_dir={tmp_path / 'run'}",
                 *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("Traceback (most recent call last):")
    assert "UnpicklingError: Weights only load failed" in err  # torch's own error, which the one line replaces
    assert err.splitlines()[-1].startswith(f"train: error: {checkpoint} is not a c4prep checkpoint")


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    def bug(cfg):
        raise KeyError("a bug, not a user error")

    monkeypatch.setattr(stages, "run_stage", bug)
    with pytest.raises(KeyError, match="a bug, not a user error"):
        main([f"output_dir={tmp_path}", *TINY])


def test_usage_mentions_debug(capsys):
    assert main(["--help"]) == 0
    assert "--debug" in capsys.readouterr().out


def test_a_hydra_setting_is_refused(capsys):
    """hydra.run.dir=/tmp/x was accepted and did nothing: the run went to output_dir."""
    assert main(["hydra.run.dir=/tmp/x"]) == 2
    assert one_line_error(capsys) == ("train: error: hydra.run.dir=/tmp/x does nothing: train composes its settings "
                                      "without running a Hydra app (the run's folder is output_dir=): remove it")


@pytest.mark.parametrize("flag", ["--cfg", "-m", "--multirun"])
def test_an_unknown_flag_says_what_train_takes(flag, capsys):
    """Hydra's flags were a lexer error: "bad override: LexerNoViableAltException: --cfg"."""
    assert main([flag, "job"]) == 2
    sweep = " (it runs no Hydra sweeps: run it once per value, each with its own output_dir)" if "m" in flag else ""
    assert one_line_error(capsys) == (f"train: error: unknown option {flag}: train takes key=value overrides, "
                                      f"--print-config (the settings a run would use), --debug and --help{sweep}")


SCHEDULES = "constant, cosine, inverse_sqrt, linear, mingpt_cosine"


@pytest.mark.parametrize("overrides, message", [
    (["=3"], "override '=3' names no setting: write key=value (e.g. trainer.max_steps=100)"),
    (["model=null"], "model=null leaves the run without a model, which every run needs: choose one with "
                     "model=<option> (adavae, gpt1, gpt_a5, gpt_nano, gpt_tiny, t5_base, t5_sample, t5_small, "
                     "t5_tiny, t5_v1_0_base, t5_v1_0_small, t5_v1_0_tiny)"),
    (["~schedule"], "~schedule leaves the run without a schedule, which every run needs: choose one with "
                    f"schedule=<option> ({SCHEDULES})"),
    (["experiment=null"], "experiment=null: no preset is the default; leave the override out"),
    (["schedule=[constant,linear]"], f"schedule=[constant,linear] picks several; a run has one schedule: choose one "
                                     f"({SCHEDULES})"),
    (["model.name=gpt"], "model.name follows the model=<option> a run picks: pick the model there (adavae, gpt1, "
                         "gpt_a5, gpt_nano, gpt_tiny, t5_base, t5_sample, t5_small, t5_tiny, t5_v1_0_base, "
                         "t5_v1_0_small, t5_v1_0_tiny)"),  # the message named a T5 setting missing from GPTModelConfig
    (["trainer.max_steps", "=", "3"], "override 'trainer.max_steps' has no '=': write key=value, with no spaces "
                                      "around '='"),
    (["~trainer.max_steps"], "bad override: ~trainer.max_steps removes a setting that others use: set it with "
                             "trainer.max_steps=VALUE instead"),
    (["optimizer.lr=1e-3,2e-3"], "bad override: Ambiguous value for argument 'optimizer.lr=1e-3,2e-3': write a list "
                                 "as [a,b] and a string with commas quoted ('a,b'); train runs no sweeps: run it once "
                                 "per value, each with its own output_dir"),
])
def test_an_override_hydra_cannot_apply_is_one_line_saying_what_to_write(overrides, message, capsys):
    """`=3`, `model=null`, `data=null`, `~model` and `experiment=null` were tracebacks (exit 1); the others named
    the parser's state or a key, not the mistake."""
    assert main(["--print-config", *overrides]) == 2
    assert one_line_error(capsys) == f"train: error: {message}"


@pytest.fixture
def tokens(sample_tokens, tmp_path) -> Path:
    """A private copy of the sample token folder, to damage."""
    return Path(shutil.copytree(sample_tokens, tmp_path / "tokens"))


def _first_train_shard(tokens: Path) -> tuple[Manifest, int, Path]:
    manifest = read_manifest(str(tokens))
    k = next(k for k, shard in enumerate(manifest.shards) if shard.split == "train" and shard.num_rows)
    return manifest, k, Path(manifest.shard_uri(str(tokens), manifest.shards[k]))


def test_a_shard_with_changed_bytes_is_refused(tokens, tmp_path, capsys):
    _, _, shard = _first_train_shard(tokens)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4] = bytes(255 - b for b in data[middle:middle + 4])
    shard.write_bytes(bytes(data))
    assert train(tokens, tmp_path) == 2
    err = one_line_error(capsys)
    assert str(shard) in err and "SHA-256" in err and "c4prep tokenize" in err


def test_a_manifest_with_a_zeroed_sha256_is_refused(tokens, tmp_path, capsys):
    manifest_path = tokens / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    first = next(s for s in doc["shards"] if s["split"] == "train" and s["num_rows"])
    first["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(doc))
    assert train(tokens, tmp_path) == 2
    err = one_line_error(capsys)
    assert first["name"] in err and "SHA-256" in err


@pytest.mark.parametrize("vocab_size", [1000, 60000])
def test_a_manifest_with_another_vocabulary_size_is_refused(tokens, tmp_path, capsys, vocab_size):
    """1000 crashed a data worker; 60000 trained a model of 60,000 ids on 1,100-id shards without a word."""
    manifest_path = tokens / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    doc["extra"]["vocabulary"]["vocab_size"] = vocab_size
    manifest_path.write_text(json.dumps(doc))
    assert train(tokens, tmp_path) == 2
    assert f"was tokenized with a vocabulary of 1100 ids, the manifest says {vocab_size}" in one_line_error(capsys)


def test_token_ids_outside_the_vocabulary_are_refused_before_training(tokens, tmp_path, capsys):
    manifest, k, shard = _first_train_shard(tokens)
    table = read_shard(str(shard))
    ids = table.column("ids").combine_chunks()
    values = np.full(len(ids.flatten()), 65535, np.uint16)
    table = table.set_column(0, table.schema.field("ids"), pa.ListArray.from_arrays(ids.offsets, values))
    rewritten = write_shard(str(shard), table.schema, table.to_batches())  # re-hashed: only the id check can tell
    manifest.shards[k] = dataclasses.replace(manifest.shards[k], num_bytes=rewritten.num_bytes,
                                             sha256=rewritten.sha256)
    write_manifest(str(tokens), manifest)
    assert train(tokens, tmp_path) == 2
    err = one_line_error(capsys)
    vocab_size = int(table.schema.metadata[b"vocab_size"])
    assert str(shard) in err and f"token id 65535, outside its vocabulary of {vocab_size} ids" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before the first step


def test_resume_settings_allow_what_only_runs_the_training_differently():
    recorded = {"stage": "pretrain", "seed": 0, "model": {"name": "t5", "size": "t5_tiny"},
                "optimizer": {"name": "adamw", "lr": 1e-3}, "data": {"tokens": "/old/tokens"},
                "schedule": {"options": {"total_steps": 100}},
                "trainer": {"max_steps": 100, "device": "cpu", "global_batch_size": 8, "log_every": 10}}
    extended = {**recorded, "data": {"tokens": "/moved/tokens"},  # the data's fingerprint decides, not its path
                "schedule": {"options": {"total_steps": 200}},
                "trainer": {**recorded["trainer"], "max_steps": 200, "device": "cuda", "log_every": 1}}
    assert resume_conflicts(recorded, extended) == []
    changed = {**recorded, "model": {"name": "t5", "size": "t5_tiny", "d_model": 64},
               "optimizer": {"name": "adamw", "lr": 0.5}, "trainer": {**recorded["trainer"], "global_batch_size": 4}}
    assert resume_conflicts(recorded, changed) == [
        ("model.d_model", None, 64), ("optimizer.lr", 1e-3, 0.5), ("trainer.global_batch_size", 8, 4)]
    assert resume_conflicts(recorded, {**recorded, "stage": "evaluate", "model": {"name": "gpt"}})[:2] == [
        ("stage", "pretrain", "evaluate"), ("model.name", "t5", "gpt")]
    other_size = {**recorded, "model": {"name": "t5", "size": "t5_small", "bias": None}}  # the size, not a field
    assert resume_conflicts({**recorded, "model": {**recorded["model"], "bias": False}}, other_size) == [
        ("model.size", "t5_tiny", "t5_small"), ("model.bias", False, None)]
    assert resume_conflicts(recorded, {**recorded, "schedule": {"options": {"total_steps": 50}}}) == [
        ("schedule.options.total_steps", 100, 50)]  # no longer max_steps: the schedule itself changed
    started = {**recorded, "init_from": "runs/gpt"}  # the weights and vocabulary it started from, named in exports
    assert resume_conflicts(started, {**started, "init_from": "./runs/gpt/"}) == []
    assert resume_conflicts(started, {**started, "init_from": "runs/other"}) == [
        ("init_from", "runs/gpt", "runs/other")]
    assert resume_conflicts(started, {**recorded, "init_from": None}) == [("init_from", "runs/gpt", None)]
    other_shell = {**recorded, "classify": {"folder": "/elsewhere/yelp"}}  # C4PREP_SHARED_DATA set otherwise
    assert resume_conflicts({**recorded, "classify": {"folder": "../shared/data/yelp"}}, other_shell) == []
    gpt1 = {**recorded, "data": {"folder": "/yelp", "lm_weight": 0.5}}  # the loss GPT-1 fine-tuning trains with
    assert resume_conflicts(gpt1, {**gpt1, "data": {"folder": "/moved", "lm_weight": 0.0}}) == [
        ("data.lm_weight", 0.5, 0.0)]


@pytest.mark.parametrize("change, message", [
    (["optimizer.lr=0.5"], "optimizer.lr is 1.0 there and 0.5 now;"),
    (["optimizer=adamw"], "optimizer.name is 'adafactor' there and 'adamw' now (and optimizer."),  # names the rest
    (["+model.d_model=64"], "model.d_model is null there and 64 now;"),
    (["model=gpt_tiny", "objective=prefix_lm", "objective.inputs_length=32", "objective.targets_length=33"],
     "model.name is 't5' there and 'gpt' now"),
])
def test_a_resume_with_other_settings_is_refused_and_keeps_the_runs_record(sample_tokens, tmp_path, capsys, change,
                                                                          message):
    """A resume restores the optimizer and schedule, so a new lr would be ignored, a new model not load; and the
    run's config.yaml, which `evaluate` reads, must stay what it trained with."""
    assert train(sample_tokens, tmp_path) == 0
    record = (tmp_path / "run" / "config.yaml").read_text()
    capsys.readouterr()
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2", *change) == 2
    line = one_line_error(capsys)
    assert message in line and "give a new output_dir, resume=never to start over in it, or its settings (" in line
    assert line.endswith(f"; {tmp_path / 'run' / 'config.yaml'})")  # the first setting's value there, then where
    assert (tmp_path / "run" / "config.yaml").read_text() == record
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2", "trainer.log_every=1") == 0  # longer, logged more
    assert "max_steps: 2" in (tmp_path / "run" / "config.yaml").read_text()
    assert train(sample_tokens, tmp_path, "stage=evaluate", f"init_from={tmp_path / 'run'}",
                 f"output_dir={tmp_path / 'run'}") == 2
    assert f"output_dir={tmp_path / 'run'} holds a run of stage=pretrain (its config.yaml): give stage=evaluate " \
           "another output_dir" in one_line_error(capsys)


def test_a_resume_checks_the_settings_its_checkpoint_holds(sample_tokens, tmp_path, capsys):
    """config.yaml edited to the new lr passed the check of config.yaml: the resumed optimizer kept lr 1.0."""
    assert train(sample_tokens, tmp_path) == 0
    record = tmp_path / "run" / "config.yaml"
    record.write_text(record.read_text().replace("  lr: 1.0\n", "  lr: 0.5\n"))
    capsys.readouterr()
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2", "optimizer.lr=0.5") == 2
    line = one_line_error(capsys)
    assert "optimizer.lr is 1.0 there and 0.5 now;" in line
    assert line.endswith(f"or its settings (optimizer.lr=1.0; as its checkpoint "
                         f"{tmp_path / 'run' / 'checkpoints' / 'step_00000001.pt'} records them)")


def test_an_output_dir_of_the_users_or_of_token_shards_is_refused_untouched(sample_tokens, tmp_path, capsys):
    """A project folder's config.yaml was replaced by the run's, metrics and checkpoints written beside its files;
    the token shards as output_dir took the run's files; output_dir= trained into the working folder."""
    project = tmp_path / "run"
    project.mkdir()
    (project / "config.yaml").write_text("lr: 0.1\nlayers: 12\n")
    (project / "notes.txt").write_text("important")
    for output_dir in (project, sample_tokens):
        before = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()}
        assert main([f"data.tokens={sample_tokens}", *TINY, f"output_dir={output_dir}"]) == 2
        assert one_line_error(capsys) == (f"train: error: output_dir={output_dir} holds files but no run of `train` "
                                          "(its config.yaml), which this run would write among: give a new or "
                                          "empty folder")
        assert {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()} == before
    assert main([f"data.tokens={sample_tokens}", *TINY, "output_dir="]) == 2
    assert one_line_error(capsys) == ("train: error: output_dir= names no folder: give the run's folder (a new one, "
                                      "or a run to resume)")


@pytest.mark.parametrize("stage", ["pretrain", "finetune", "evaluate"])
def test_an_empty_init_from_is_refused(tmp_path, capsys, stage):
    """`init_from=$RUN` with RUN unset trained from scratch without a word, and recorded init_from ''."""
    assert main([f"stage={stage}", "init_from=", f"output_dir={tmp_path}"]) == 2
    assert one_line_error(capsys) == ("train: error: init_from= names no checkpoint: give a checkpoint file or run "
                                      "folder, or leave init_from out to start from scratch")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("overrides, key", [
    (["experiment=cs224n_a5_finetune", "data.evaluate="], "data.evaluate"),  # answered no questions, silently
    (["data=ptb", "data.validation= "], "data.validation"),
    (["data=text_to_text", "data.vocab="], "data.vocab"),
    (["generate.prompts_file="], "generate.prompts_file"),
])
def test_a_path_setting_that_names_nothing_is_refused(tmp_path, capsys, overrides, key):
    assert main([*overrides, f"output_dir={tmp_path}"]) == 2
    assert one_line_error(capsys) == f"train: error: {key}= names no file or folder: give one, or leave {key} out"


def test_a_resume_into_a_folder_that_cannot_be_written_is_one_line(sample_tokens, tmp_path, capsys, monkeypatch):
    """A read-only run folder: the resume wrote its run files first and failed with a traceback."""
    assert train(sample_tokens, tmp_path) == 0

    def read_only(folder: str) -> None:
        raise OSError(30, "Read-only file system", folder)

    monkeypatch.setattr(stages.run, "check_writable", read_only)
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 2
    assert one_line_error(capsys) == (f"train: error: output_dir={tmp_path / 'run'} cannot be the run folder: "
                                      f"Read-only file system ({tmp_path / 'run'}); give a folder that can be written")


def test_a_run_folder_another_train_writes_is_refused_and_free_once_a_run_ends(sample_tokens, tmp_path, capsys):
    """Two runs into one output_dir both exited 0, their metrics.jsonl rows interleaved, the checkpoints and
    config.yaml of whichever wrote last. The run holds a lock on its folder (as `train` in another process does)."""
    assert train(sample_tokens, tmp_path) == 0
    steps = (tmp_path / "run" / "metrics.jsonl").read_text()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY), fcntl.LOCK_EX)\n"
                               "print('held', flush=True)\ntime.sleep(60)", str(tmp_path / "run")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 2
        assert one_line_error(capsys) == (f"train: error: another `train` is writing output_dir={tmp_path / 'run'}: "
                                          "wait for it to end, or give another output_dir")
        assert (tmp_path / "run" / "metrics.jsonl").read_text() == steps
    finally:
        holder.kill()
        holder.wait()
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 0  # resumed: the lock went with its holder
    folder = os.open(tmp_path / "run", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and the run let go of it when it ended
    finally:
        os.close(folder)


def test_a_run_folder_on_a_filesystem_without_locks_trains_with_a_warning(sample_tokens, tmp_path, monkeypatch,
                                                                          caplog):
    """Some network mounts refuse flock (ENOLCK): the lock must not refuse every run there."""
    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert train(sample_tokens, tmp_path) == 0
    assert f"output_dir={tmp_path / 'run'} cannot be locked (No locks available)" in caplog.text


@pytest.mark.parametrize("setting", ["trainer.global_batch_size=7", "resume=must"])
def test_a_run_refused_before_it_starts_leaves_no_folder_it_made(sample_tokens, tmp_path, capsys, setting):
    """A new output_dir refused for a bad setting kept a config.yaml recording it, and vocabulary.sha256."""
    assert train(sample_tokens, tmp_path, setting) == 2
    one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []
    assert main([f"data.tokens={sample_tokens}", f"output_dir={tmp_path / 'runs' / 'new' / 'run'}", *TINY,
                 setting]) == 2  # nor the folders it made for it
    one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []
    assert train(sample_tokens, tmp_path) == 0
    record = sorted(path.name for path in (tmp_path / "run").iterdir())
    assert train(sample_tokens, tmp_path, "trainer.global_batch_size=7") == 2  # a run's folder stays as it was
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == record


def test_an_output_dir_that_cannot_be_a_folder_is_one_line(sample_tokens, tmp_path, capsys):
    (tmp_path / "run").write_text("a file")
    assert train(sample_tokens, tmp_path) == 2
    assert one_line_error(capsys).endswith(f"output_dir={tmp_path / 'run'} cannot be the run folder: File exists "
                                           f"({tmp_path / 'run'}); give a folder that can be written")


def test_token_shards_without_sentinels_and_a_model_too_big_for_memory_are_one_line(sample_documents, sample_vocab,
                                                                                     tmp_path, capsys):
    """Span corruption on shards tokenized with --extra-ids 0 said only "max_sentinels must be >= 1, got 0"; a
    model that cannot be allocated was a traceback."""
    tokens = tmp_path / "tokens"
    result = CliRunner().invoke(c4prep_main, ["tokenize", "--input", str(sample_documents), "--vocab",
                                              str(sample_vocab), "--output", str(tokens), "--extra-ids", "0"])
    assert result.exit_code == 0, result.output
    assert train(tokens, tmp_path) == 2
    assert one_line_error(capsys) == (
        f"train: error: objective=span_corruption needs sentinel ids (at least 1), but {tokens} was tokenized with "
        "--extra-ids 0: re-tokenize with --extra-ids 100 (T5's), or choose an objective without them (prefix_lm, "
        "iid_drop_tokens, deshuffling)")  # not lm, which gives a T5 no inputs
    assert train(tokens, tmp_path, "model=gpt_tiny") == 2
    assert one_line_error(capsys).endswith("(prefix_lm, iid_drop_tokens, deshuffling, lm)")
    assert train(tokens, tmp_path, "objective=iid_drop_tokens", "objective.targets_length=128",
                 "+model.d_ff=100000000000") == 2
    assert one_line_error(capsys).startswith("train: error: the t5 model of 1,000 ids does not fit in memory (")
    assert not (tmp_path / "run").exists()


def test_iid_replace_spans_on_one_sentinel_is_refused(sample_documents, sample_vocab, tmp_path, capsys):
    """With one sentinel it kept no noise run (noise density 0.0): every example was its whole segment in, and
    <extra_id_0> and EOS out."""
    tokens = tmp_path / "tokens"
    result = CliRunner().invoke(c4prep_main, ["tokenize", "--input", str(sample_documents), "--vocab",
                                              str(sample_vocab), "--output", str(tokens), "--extra-ids", "1"])
    assert result.exit_code == 0, result.output
    assert train(tokens, tmp_path, "objective=iid_replace_spans") == 2
    assert one_line_error(capsys).startswith(
        f"train: error: objective=iid_replace_spans needs sentinel ids (at least 2), but {tokens} was tokenized with "
        "--extra-ids 1")


@pytest.mark.parametrize("setting, message", [
    ("+model.d_model=-5", "d_model must be >= 1, got -5"),  # a negative dimension in torch.empty
    ("+model.num_heads=0", "num_heads must be >= 1, got 0"),  # ZeroDivisionError in the initialisation
    ("+model.num_layers=0", "num_layers must be >= 1, got 0"),  # trained a model of no layers, exit 0
    ("+model.relative_attention_num_buckets=3",  # ZeroDivisionError in the position buckets
     "relative_attention_num_buckets must be >= 4 and relative_attention_max_distance > half of it, got 3 and 128"),
    ("+model.relative_attention_max_distance=16",  # log(16 / 16) = 0 divides the position buckets
     "relative_attention_num_buckets must be >= 4 and relative_attention_max_distance > half of it, got 32 and 16"),
])
def test_t5_sizes_that_give_no_model_are_one_line(sample_tokens, tmp_path, capsys, setting, message):
    """A GPT's sizes were checked, a T5's not: each of these was a traceback of some 60 lines, or a run."""
    assert train(sample_tokens, tmp_path, setting) == 2
    assert one_line_error(capsys).endswith(message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides, message", [
    (["seed=-1"], "seed must be >= 0, got -1"),
    (["experiment=shakespeare_char", "trainer.max_steps=abc"], "trainer.max_steps='abc' must be of type int"),
    (["z_loss=-0.1"], "z_loss must be >= 0, got -0.1"),
    (["evaluate.iw_samples=0"], "evaluate.iw_samples must be >= 1, got 0"),
    (["data=text_to_text", "data.inputs_length=0"], "data.inputs_length must be >= 1, got 0"),
    (["data=yelp_sentiment", "data.vocab=v", "data.classifier_dropout=2"],
     "data.classifier_dropout must be in [0, 1), got 2.0"),
    (["data=yelp_sentiment", "data.vocab=v", "data.lm_weight=-1"], "data.lm_weight must be >= 0, got -1.0"),
])
def test_a_value_out_of_its_range_or_of_another_type_is_refused_before_anything_runs(overrides, message):
    with pytest.raises(TrainConfigError) as refused:
        load_config(overrides)
    assert str(refused.value) == message


@pytest.mark.parametrize("setting", ["trainer.grad_clip=nan", "z_loss=nan", "optimizer.lr=inf",
                                     "optimizer=adamw optimizer.options.weight_decay=nan",
                                     "generate.temperature=nan",
                                     "generate.temperature=inf", "generate.analogy_degree=-inf"])
def test_a_non_finite_number_is_one_line(setting, capsys):
    """Range checks let NaN through: grad_clip=nan trained until the loss was NaN and then advised a lower learning
    rate; temperature=nan failed in torch.multinomial (exit 1), inf drew uniformly."""
    assert main(["stage=generate", *setting.split()]) == 2
    name, value = setting.split()[-1].split("=")
    assert capsys.readouterr().err.strip() == f"train: error: {name} must be a finite number, got {value}"


@pytest.mark.parametrize("stop, to_group, loader_workers", [(signal.SIGINT, True, 0), (signal.SIGTERM, False, 0),
                                                             (signal.SIGTERM, True, 1)])
def test_a_stop_is_one_line_and_the_same_command_resumes(sample_tokens, tmp_path, stop, to_group, loader_workers):
    """SIGINT to the process group, as a terminal's Ctrl-C, once a checkpoint is written: exit 130 and one line (a
    KeyboardInterrupt traceback of some 70 lines before); the same command then resumes from the checkpoint. SIGTERM
    (a scheduler preempting the job: to the process, or to it and its DataLoader workers) likewise, exit 143: it
    ended the run without a word."""
    command = [str(Path(sys.executable).parent / "train"), f"data.tokens={sample_tokens}",
               f"output_dir={tmp_path / 'run'}", *TINY, "trainer.max_steps=100000", "trainer.checkpoint_every=1",
               f"trainer.num_workers={loader_workers}"]
    latest = tmp_path / "run" / "checkpoints" / "latest"
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as job:
        while not latest.exists():
            assert job.poll() is None, job.stderr.read()
            time.sleep(0.05)
        if to_group:
            os.killpg(job.pid, stop)
        else:
            job.send_signal(stop)
        err = job.stderr.read()
        assert job.wait(timeout=60) == 128 + stop
    outcome = "interrupted" if stop == signal.SIGINT else "terminated (SIGTERM)"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        f"train: {outcome}: run the same command again, without resume=never: a training stage resumes from its run "
        "folder's latest checkpoint")
    step = load_checkpoint(tmp_path / "run")["step"]
    assert train(sample_tokens, tmp_path, "trainer.checkpoint_every=1", f"trainer.max_steps={step + 1}") == 0
    assert load_checkpoint(tmp_path / "run")["step"] == step + 1


def test_starting_over_replaces_the_runs_checkpoints(sample_tokens, tmp_path):
    """resume=never in a folder with a run at step 4 kept that run's step 3 and 4 (pruning keeps the highest steps)
    and deleted the new run's checkpoints as they were written; `latest` then named a deleted file."""
    keep = ["trainer.checkpoint_every=1", "trainer.keep_checkpoints=2"]
    assert train(sample_tokens, tmp_path, *keep, "trainer.max_steps=4") == 0
    assert train(sample_tokens, tmp_path, *keep, "trainer.max_steps=2", "resume=never", "seed=7") == 0
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(path.name for path in folder.iterdir()) == ["latest", "step_00000001.pt", "step_00000002.pt"]
    assert load_checkpoint(tmp_path / "run")["settings"]["seed"] == 7
    assert recorded_settings(tmp_path / "run")["seed"] == 7
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 2
    assert train(sample_tokens, tmp_path, *keep, "trainer.max_steps=3", "seed=7") == 0  # it resumes as any run
    assert load_checkpoint(tmp_path / "run")["step"] == 3


@pytest.mark.parametrize("refused", ["optimizer.lr=-1", "trainer.global_batch_size=6"])
def test_a_refused_start_over_leaves_the_run_as_it_was(sample_tokens, tmp_path, refused, capsys):
    """Refused after the run folder was set up, resume=never had recorded its settings over the run's: config.yaml
    said lr -1 beside checkpoints trained at the preset's lr, and neither resumed."""
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 0
    before = {path.name: path.read_bytes() for path in (tmp_path / "run").rglob("*") if path.is_file()}
    capsys.readouterr()
    assert train(sample_tokens, tmp_path, "resume=never", refused) == 2
    one_line_error(capsys)
    assert {path.name: path.read_bytes() for path in (tmp_path / "run").rglob("*") if path.is_file()} == before
    assert train(sample_tokens, tmp_path, "trainer.max_steps=3") == 0
    assert load_checkpoint(tmp_path / "run")["step"] == 3


def test_a_run_folder_without_its_config_takes_the_settings_its_checkpoint_records(sample_tokens, tmp_path, capsys):
    """Evaluate took the default model settings and blamed them, though none were given (later: that its run folder
    had no config.yaml); the checkpoint records the settings the run trained with."""
    assert train(sample_tokens, tmp_path) == 0
    (tmp_path / "run" / "config.yaml").unlink()
    assert main(["stage=evaluate", f"init_from={tmp_path / 'run'}", "data.validation_split=train",
                 "trainer.eval_batches=1", "trainer.progress=false"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["checkpoint_step"] > 0


def test_a_run_folder_holding_another_runs_checkpoint_says_so(sample_tokens, tmp_path, capsys):
    """Its config.yaml gave the model settings, yet the line said to leave out the model settings (none were given)."""
    assert train(sample_tokens, tmp_path) == 0
    other = tmp_path / "other"
    assert main([f"data.tokens={sample_tokens}", f"output_dir={other}", *TINY, "+model.d_ff=48"]) == 0
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    shutil.copytree(other / "checkpoints", tmp_path / "run" / "checkpoints")
    capsys.readouterr()
    assert main(["stage=evaluate", f"init_from={tmp_path / 'run'}", f"data.tokens={sample_tokens}"]) == 2
    assert one_line_error(capsys) == (
        f"train: error: init_from={tmp_path / 'run'} holds a model with d_ff=48, but its run folder's config.yaml "
        "records that of size='t5_tiny': the checkpoint is not the run's, or config.yaml was changed; restore "
        "the run's files, or give the model settings it trained with")


def test_a_resume_with_another_number_of_ranks_says_so(sample_tokens, tmp_path, capsys):
    """The cause was behind --debug: the line said the checkpoint did not fit and to start over."""
    assert train(sample_tokens, tmp_path) == 0
    state = load_checkpoint(tmp_path / "run")
    state["rng"] = state["rng"] * 2  # as a 2-process torchrun run writes it
    save_checkpoint(tmp_path / "run", state["step"], state, keep=1)
    capsys.readouterr()
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 2
    assert one_line_error(capsys) == (f"train: error: {tmp_path / 'run' / 'checkpoints' / 'step_00000001.pt'}: "
                                      "checkpoint was written by 2 rank(s), this run has 1; resume with the same "
                                      "number of processes")


def test_a_resume_below_the_checkpoints_step_is_refused_and_keeps_the_record(sample_tokens, tmp_path, capsys):
    """It trained nothing, exit 0, and config.yaml said max_steps: 1 of a run at step 2."""
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 0
    record = (tmp_path / "run" / "config.yaml").read_text()
    capsys.readouterr()
    assert train(sample_tokens, tmp_path, "trainer.max_steps=1") == 2
    assert one_line_error(capsys) == (f"train: error: {tmp_path / 'run' / 'checkpoints' / 'step_00000002.pt'} is at "
                                      "step 2, past trainer.max_steps=1: give trainer.max_steps=2 or more to go on "
                                      "from it, or a new output_dir")
    assert (tmp_path / "run" / "config.yaml").read_text() == record
    assert train(sample_tokens, tmp_path, "trainer.max_steps=2") == 0  # the same command again: nothing to do


def test_an_interrupt_a_library_swallowed_still_stops_training(sample_tokens, tmp_path, monkeypatch, capsys):
    """pyarrow's lazy import of pandas swallowed a Ctrl-C that came while it ran: `train` went on to its last step,
    exit 0. Here the interrupt comes, and is swallowed, while the stage builds its data."""
    from c4prep.training.stages import pretrain

    build = pretrain.build_pretrain_trainer

    def interrupted_and_swallowed(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # what the library did
        return build(*args, **kwargs)

    monkeypatch.setattr(pretrain, "build_pretrain_trainer", interrupted_and_swallowed)
    assert train(sample_tokens, tmp_path, "trainer.max_steps=3") == INTERRUPTED_EXIT_CODE
    assert capsys.readouterr().err.strip().startswith("train: interrupted:")
    assert not (tmp_path / "run" / "checkpoints").exists()  # not one step ran


@pytest.mark.parametrize("tokens, message", [
    ("foo://shards", "foo://shards/manifest.json: no filesystem reads foo:// paths; use a local path, s3://, gs://, "
                     "hdfs:// or abfs://"),
    ("gs://c4prep-no-such-bucket/shards", "gs://c4prep-no-such-bucket/shards/manifest.json: cannot be reached in 1 s "
                                          "of retries ("),
])
def test_token_shards_at_a_uri_that_cannot_be_read_are_one_line(tmp_path, monkeypatch, capsys, tokens, message):
    """Both were tracebacks; without network or credentials the gs:// one came after 15 minutes of silent retries."""
    from c4prep import shards

    monkeypatch.setattr(shards, "GCS_FIRST_CONTACT_S", 1)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main([f"data.tokens={tokens}", f"output_dir={tmp_path / 'run'}", *TINY]) == 2
    assert one_line_error(capsys).startswith(f"train: error: {message}")
