"""Stages that use a trained run (evaluate, generate, classify) take its model, objective, data and z_loss from its
config.yaml unless the command line sets them, and write next to it; presets' warm-up as a fraction of the run, and their device."""
from pathlib import Path

import pytest

import c4prep.configs
from c4prep.training.checkpoint import save_checkpoint
from c4prep.training.cli import main
from c4prep.training.config import load_config, settings_values, to_yaml
from c4prep.training.config_errors import TrainConfigError
from c4prep.training.stages.model_setup import check_model_settings

RUN_SETTINGS = ["model=gpt_tiny", "objective=lm", "objective.targets_length=33", "data.tokens=/data/tokens",
                "data.validation_split=train", "z_loss=1e-4", "seed=7", "trainer.micro_batch_size=2"]


def fake_run(folder: Path, *overrides: str) -> Path:
    """A run folder as `train` leaves it: config.yaml and a checkpoint (no weights: only the config is read)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(to_yaml(load_config(list(overrides))))
    save_checkpoint(folder, 3, {"step": 3, "model": {}, "model_spec": {"name": "gpt"}}, keep=1)
    return folder


@pytest.fixture
def run(tmp_path) -> Path:
    return fake_run(tmp_path / "run", *RUN_SETTINGS)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("stage", ["evaluate", "generate", "classify"])
def test_a_run_stage_takes_the_runs_model_objective_and_data_and_writes_next_to_it(run, stage):
    cfg = load_config([f"stage={stage}", f"init_from={run}"])
    assert cfg.model.name == "gpt" and cfg.model.size == "gpt_tiny"
    assert (cfg.objective.name, cfg.objective.targets_length) == ("lm", 33)
    assert (cfg.data.tokens, cfg.data.validation_split, cfg.z_loss) == ("/data/tokens", "train", 1e-4)
    assert cfg.output_dir == str(run / stage)
    assert cfg.seed == 0 and cfg.trainer.micro_batch_size == 8  # how to run it stays the command line's


def test_what_the_command_line_sets_wins(run, tmp_path):
    checkpoint = next((run / "checkpoints").glob("step_*.pt"))
    cfg = load_config(["stage=evaluate", f"init_from={checkpoint}", "objective.inputs_length=9",
                       "data.validation_split=null", "z_loss=0", f"output_dir={tmp_path / 'elsewhere'}"])
    assert (cfg.objective.name, cfg.objective.inputs_length, cfg.objective.targets_length) == ("lm", 9, 33)
    assert cfg.data.validation_split is None and cfg.data.tokens == "/data/tokens" and cfg.z_loss == 0
    assert cfg.output_dir == str(tmp_path / "elsewhere")
    replaced = load_config(["stage=evaluate", f"init_from={run}", "objective=span_corruption", "model=t5_tiny"])
    assert (replaced.objective.name, replaced.objective.inputs_length, replaced.model.name) == ("span_corruption",
                                                                                                512, "t5")


def test_a_key_of_the_runs_data_that_the_default_data_lacks_can_be_set(tmp_path, capsys):
    """`data.test=` for an AdaVAE run on PTB was refused: composed with c4_tokens, which has no test file."""
    run = fake_run(tmp_path / "run", "model=adavae", "data=ptb")
    cfg = load_config(["stage=evaluate", f"init_from={run}", "data.test=/elsewhere/test.txt", "evaluate.iw_samples=3"])
    assert (cfg.data.kind, cfg.data.test, cfg.data.max_words) == ("sentences", "/elsewhere/test.txt", 64)
    assert main(["stage=evaluate", f"init_from={run}", "data.tset=/x.txt"]) == 2
    assert "data.tset" in one_line_error(capsys)


def test_a_preset_does_not_override_the_run(run):
    cfg = load_config(["experiment=shakespeare_char", "stage=generate", f"init_from={run}"])
    assert cfg.data.kind == "tokens" and cfg.model.size == "gpt_tiny" and cfg.output_dir == str(run / "generate")


def test_training_stages_take_only_the_runs_model_and_bare_checkpoints_keep_the_command_lines_settings(run, tmp_path):
    t5_run = fake_run(tmp_path / "t5", "model=t5_tiny", "z_loss=1e-4")
    finetune = load_config(["stage=finetune", f"init_from={t5_run}"])  # the checkpoint fixes the model, not the rest
    assert (finetune.model.size, finetune.objective.name, finetune.z_loss) == ("t5_tiny", "span_corruption", 0.0)
    assert load_config(["stage=finetune", f"init_from={t5_run}", "model=t5_small"]).model.size == "t5_small"
    gpt = load_config(["stage=finetune", f"init_from={run}"])  # the run's GPT, not train.yaml's T5 (GPT-1 tasks)
    assert (gpt.model.name, gpt.model.size) == ("gpt", "gpt_tiny")
    assert load_config(["experiment=adavae_ptb", "stage=finetune", f"init_from={run}"]).model.name == "adavae"
    bare = tmp_path / "elsewhere" / "model.pt"
    bare.parent.mkdir()
    (run / "checkpoints" / "latest").rename(bare.parent / "unused")
    next((run / "checkpoints").glob("step_*.pt")).rename(bare)
    cfg = load_config(["stage=evaluate", f"init_from={bare}"])
    assert cfg.model.name == "t5" and cfg.output_dir == str(bare.parent / "evaluate")


def test_a_checkpoint_copied_out_of_its_run_brings_the_settings_it_records(tmp_path):
    """Copied out of its run folder (no config.yaml beside it), a GPT checkpoint was evaluated and fine-tuned as
    train.yaml's default t5_small on its default data, though the checkpoint records the settings it trained with."""
    settings = settings_values(load_config(RUN_SETTINGS))
    save_checkpoint(tmp_path, 3, {"step": 3, "model": {}, "model_spec": {"name": "gpt"}, "settings": settings},
                    keep=1)
    loose = tmp_path / "copied" / "model.pt"
    loose.parent.mkdir()
    next((tmp_path / "checkpoints").glob("step_*.pt")).rename(loose)
    evaluate = load_config(["stage=evaluate", f"init_from={loose}"])
    assert (evaluate.model.size, evaluate.objective.name, evaluate.data.tokens) == ("gpt_tiny", "lm", "/data/tokens")
    assert evaluate.output_dir == str(loose.parent / "evaluate")
    finetune = load_config(["stage=finetune", f"init_from={loose}"])
    assert (finetune.model.name, finetune.model.size) == ("gpt", "gpt_tiny")


def test_a_checkpoint_recording_no_settings_alone_names_what_is_missing(tmp_path):
    """A checkpoint written before checkpoints recorded their settings, without its run's config.yaml: the default
    model settings are not blamed for differing from it."""
    spec = {"name": "t5", "size": "t5_tiny"}
    save_checkpoint(tmp_path, 3, {"step": 3, "model": {}, "model_spec": spec}, keep=1)
    cfg = load_config(["stage=evaluate", f"init_from={tmp_path}"])
    (tmp_path / "config.yaml").unlink(missing_ok=True)
    with pytest.raises(TrainConfigError, match="and its run folder has no config.yaml to take the run's from: give "
                                               "the model= it trained with"):
        check_model_settings(cfg, spec)


def test_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["stage=evaluate", f"init_from={tmp_path / 'nowhere'}"]) == 2
    assert f"checkpoint {tmp_path / 'nowhere'} does not exist" in one_line_error(capsys)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("stage, run_settings, message", [
    ("classify", RUN_SETTINGS, "stage=classify does not run with data.kind=tokens (data.kind=tokens runs "
                               "stage=pretrain|evaluate|generate"),
    ("generate", ["model=gpt_tiny", "data=yelp_sentiment", "data.vocab=/vocab", "data.folder=/yelp"],
     "stage=generate does not run with data.kind=classification"),
])
def test_a_stage_the_run_does_not_support_is_one_line(tmp_path, capsys, stage, run_settings, message):
    run = fake_run(tmp_path / "run", *run_settings)
    assert main([f"stage={stage}", f"init_from={run}"]) == 2
    assert message in one_line_error(capsys)
    assert not (run / stage).exists()


@pytest.mark.parametrize("stage, settings, message", [
    ("finetune", ["model=gpt_tiny", "data=yelp_sentiment", "finetune.adapter_dim=8"],
     "finetune.adapter_dim=8 does nothing for stage=finetune with data.kind=classification; it is read by "
     "stage=finetune with data.kind=text_to_text: remove it"),
    ("evaluate", ["evaluate.iw_samples=5"],
     "evaluate.iw_samples=5 does nothing for stage=evaluate with data.kind=tokens; it is read by stage=evaluate with "
     "model=adavae: remove it"),
    ("generate", ['generate.prompts=["the"]'],
     "generate.prompts=['the'] does nothing for stage=generate with model=adavae; it is read by stage=generate with "
     "data.kind=tokens|text_to_text|char_text|sentences|char_corruption|birth_places: remove it"),
    ("pretrain", ["classify.per_label=[5]"], "classify.per_label=[5] does nothing for stage=pretrain with "
     "data.kind=tokens; it is read by stage=classify with model=adavae: remove it"),
    ("pretrain", ["generate.top_k=5"], "generate.top_k=5 does nothing for stage=pretrain with data.kind=tokens; it is "
     "read by stage=generate with data.kind=tokens|text_to_text|char_text|sentences|char_corruption|birth_places or "
     "model=adavae: remove it"),
])
def test_a_setting_the_stage_does_not_read_is_refused(tmp_path, capsys, stage, settings, message):
    """It did nothing and the run's config.yaml recorded it as used (adapters on a GPT fine-tune, prompts for AdaVAE,
    importance samples for a GPT evaluation)."""
    if stage in ("evaluate", "generate"):  # the run's model and data: a GPT on tokens, an AdaVAE on PTB
        run = fake_run(tmp_path / "run", *(RUN_SETTINGS if stage == "evaluate" else ["model=adavae", "data=ptb"]))
        settings = [*settings, f"init_from={run}"]
    assert main([f"stage={stage}", *settings, f"output_dir={tmp_path / 'out'}", "trainer.device=cpu"]) == 2
    assert one_line_error(capsys) == f"train: error: {message}"
    assert not (tmp_path / "out").exists()


def test_evaluate_scores_all_unless_the_command_line_limits_it_where_it_can(run, tmp_path, capsys):
    """trainer.eval_batches was ignored by every evaluation: train.yaml's 20 and a preset's limit a training run's
    validation, the command line's a token run's evaluation, and an AdaVAE evaluation refuses it."""
    assert load_config(["stage=evaluate", f"init_from={run}"]).trainer.eval_batches == 0
    assert load_config(["stage=evaluate", f"init_from={run}", "trainer.eval_batches=2"]).trainer.eval_batches == 2
    assert load_config(["stage=generate", f"init_from={run}"]).trainer.eval_batches == 20
    vae = fake_run(tmp_path / "vae", "model=adavae", "data=ptb")
    assert main(["stage=evaluate", f"init_from={vae}", "trainer.eval_batches=2", f"output_dir={tmp_path / 'out'}",
                 "trainer.device=cpu"]) == 2
    assert one_line_error(capsys) == (
        "train: error: trainer.eval_batches=2 does nothing for stage=evaluate with model=adavae, which scores all of "
        "its data; it limits stage=evaluate with data.kind=tokens: remove it")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("settings, setting, where", [
    (["experiment=shakespeare_char", "objective=prefix_lm"], "objective=prefix_lm", "data.kind=char_text"),
    (["experiment=shakespeare_char", "objective=lm", "objective.targets_length=129"], "objective.targets_length=129",
     "data.kind=char_text"),
    (["experiment=cs224n_a5_pretrain", "objective.targets_length=65"], "objective.targets_length=65",
     "data.kind=char_corruption"),
    (["stage=finetune", "data=text_to_text", "objective=bert_style"], "objective=bert_style",
     "data.kind=text_to_text without data.unsupervised_tokens"),
])
def test_an_objective_the_stage_does_not_train_with_is_refused(tmp_path, capsys, settings, setting, where):
    """A character GPT trained as it always does and recorded the ignored objective in its config.yaml."""
    stage = settings[0].removeprefix("stage=") if settings[0].startswith("stage=") else "pretrain"
    assert main([*settings, f"output_dir={tmp_path / 'out'}", "trainer.device=cpu"]) == 2
    assert one_line_error(capsys) == (
        f"train: error: {setting} does nothing for stage={stage} with {where}; the objective is read by "
        "stage=pretrain with data.kind=tokens; stage=finetune with data.kind=text_to_text and "
        "data.unsupervised_tokens; stage=finetune with model=adavae: remove it")
    assert not (tmp_path / "out").exists()


def test_a_resume_does_not_compare_an_objective_or_z_loss_its_stage_does_not_read():
    """A character run recorded with objective=prefix_lm (accepted before it was refused) could not resume: without
    it the resume differed, with it the setting was refused; objective=lm had to be repeated on every resume."""
    from c4prep.training.resume_settings import resume_conflicts
    from c4prep.training.stages import unread_settings

    char = load_config(["experiment=shakespeare_char"])
    assert unread_settings(char) == ("objective.", "z_loss")
    assert unread_settings(load_config(["model=t5_tiny"])) == ()
    recorded = settings_values(load_config(["experiment=shakespeare_char", "objective=prefix_lm", "z_loss=1e-4"]))
    current = settings_values(char)
    assert {"objective.name", "z_loss"} <= {key for key, _, _ in resume_conflicts(recorded, current)}
    assert resume_conflicts(recorded, current, unread_settings(char)) == []


def test_a_training_stage_into_another_stages_folder_is_refused(sample_tokens, tmp_path, capsys):
    """A pre-training run into RUN/evaluate replaced the evaluation's metrics.jsonl and config.yaml."""
    evaluation = fake_run(tmp_path / "evaluate", "stage=evaluate")
    before = (evaluation / "config.yaml").read_text()
    assert main(["model=t5_tiny", f"data.tokens={sample_tokens}", f"output_dir={evaluation}",
                 "trainer.device=cpu"]) == 2
    assert one_line_error(capsys) == (f"train: error: output_dir={evaluation} holds a run of stage=evaluate (its "
                                      "config.yaml): give stage=pretrain another output_dir")
    assert (evaluation / "config.yaml").read_text() == before


def test_z_loss_on_a_model_other_than_t5_is_refused(tmp_path, capsys):
    assert main(["experiment=shakespeare_char", "z_loss=1e-4", f"output_dir={tmp_path / 'out'}"]) == 2
    assert one_line_error(capsys) == ("train: error: z_loss=0.0001 does nothing for model.name=gpt; it is T5's "
                                      "auxiliary loss (model=t5_*): remove it")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("preset, warmup, shortened", [
    ("shakespeare_char", 100, 2), ("ptb_gpt_pretrain", 100, 5), ("adavae_ptb", 500, 8), ("adavae_ptb_lm", 500, 8),
])
def test_presets_warm_up_for_a_fraction_of_the_run(preset, warmup, shortened):
    assert load_config([f"experiment={preset}"]).schedule.options["warmup_steps"] == warmup  # the schedule as before
    assert load_config([f"experiment={preset}", "trainer.max_steps=50"]).schedule.options["warmup_steps"] == shortened
    assert load_config([f"experiment={preset}", "schedule.options.warmup_steps=7"]).schedule.options[
        "warmup_steps"] == 7
    assert load_config([f"experiment={preset}"]).trainer.progress


def test_a_warm_up_longer_than_the_run_is_one_line(tmp_path, capsys):
    assert main(["model=gpt_tiny", "objective=lm", "data=tiny_shakespeare", "stage=pretrain", "schedule=cosine",
                 "trainer.max_steps=50", "trainer.device=cpu", f"output_dir={tmp_path}"]) == 2
    assert "bad schedule.options: total_steps (50) must exceed warmup_steps (100)" in one_line_error(capsys)
    assert main(["schedule=cosine", "schedule.options.warmup_steps=${max_steps_fraction:1.5}"]) == 2
    assert "max_steps_fraction must be in [0, 1], got 1.5" in one_line_error(capsys)


PRESETS = sorted(path.stem for path in (Path(c4prep.configs.__file__).parent / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_train_on_cuda_where_present(preset):
    """Every preset leaves ``trainer.device`` at ``auto`` (CUDA when present, else the CPU): on a GPU machine
    ``train experiment=cs224n_a5_pretrain`` trains on the GPU, where the presets once pinned the CPU silently."""
    assert len(PRESETS) >= 7
    assert load_config([f"experiment={preset}"]).trainer.device == "auto"
    assert load_config([f"experiment={preset}", "trainer.device=cpu"]).trainer.device == "cpu"


def test_a_model_named_after_a_preset_replaces_the_presets_model_whole():
    """``experiment=t5_sample model=t5_small`` trains t5_small: the preset's widths (d_model 128, 2+2 layers) come
    with its own model preset, where they once applied over the named size and recorded 'size: t5_small' for a
    128-wide model; the preset alone keeps the model it always trained."""
    sample = load_config(["experiment=t5_sample"]).model
    assert (sample.size, sample.d_model, sample.d_kv, sample.d_ff, sample.num_heads) == ("t5_tiny", 128, 32, 256, 4)
    assert (sample.num_layers, sample.num_decoder_layers) == (2, 2)
    small = load_config(["experiment=t5_sample", "model=t5_small"]).model
    assert small == load_config(["model=t5_small"]).model
    assert small.size == "t5_small" and small.d_model is None and small.num_layers is None
