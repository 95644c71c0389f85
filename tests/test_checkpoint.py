"""Checkpoints hold only what a weights-only load accepts, and a resume from one continues exactly."""
import pytest
import torch
from torch import nn

from c4prep.training.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from c4prep.training.config import load_config
from c4prep.training.distributed import DistEnv
from c4prep.training.optim import OPTIMIZERS, build_optimizer
from c4prep.training.schedules import build_schedule
from c4prep.training.trainer import Trainer

OPTIONS = {"adafactor": {"min_dim_size_to_factor": 4}, "adamw": {"weight_decay": 0.01}, "adamw_scale": {}}


class Regression:
    """Squared error of a model on ``x`` against ``y``; one target per row."""

    def loss(self, model, batch):
        return ((model(batch["x"]) - batch["y"]) ** 2).sum(), torch.tensor(float(len(batch["x"])))

    def num_targets(self, batch):
        return torch.tensor(float(len(batch["x"])))

    def num_tokens(self, batch):
        return len(batch["x"])


def batches_from(step: int):
    """The batch of each step, a function of the step alone (what the data loaders guarantee)."""
    while True:
        generator = torch.Generator().manual_seed(step)
        yield {"x": torch.randn(4, 8, generator=generator), "y": torch.randn(4, 1, generator=generator)}
        step += 1


def mlp_trainer(run_dir, optimizer_name: str, max_steps: int, schedule: str = "inverse_sqrt",
                **schedule_options) -> Trainer:
    """A dropout MLP (so resuming needs the RNG state) with a warmed-up schedule, checkpointing every 2 steps."""
    settings = load_config([f"trainer.max_steps={max_steps}", "trainer.checkpoint_every=2",
                                             "trainer.progress=false", "trainer.tensorboard=false",
                                             "trainer.global_batch_size=4", "trainer.micro_batch_size=4"]).trainer
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 1))
    optimizer = build_optimizer(optimizer_name, model.parameters(), lr=0.01, **OPTIONS[optimizer_name])
    scheduler = build_schedule(schedule, optimizer, warmup_steps=3, **schedule_options)
    return Trainer(settings, run_dir, model, Regression(), optimizer, scheduler, batches_from, 1, DistEnv(),
                   torch.device("cpu"), checkpoint_extra={"model_spec": {"name": "mlp"}, "config": {"stage": "test"}})


@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_resume_from_a_weights_only_load_is_exact(tmp_path, optimizer_name):
    assert sorted(OPTIMIZERS) == sorted(OPTIONS)
    uninterrupted = mlp_trainer(tmp_path / "uninterrupted", optimizer_name, max_steps=4)
    losses = [stats.loss for stats in uninterrupted.fit()]
    mlp_trainer(tmp_path / "resumed", optimizer_name, max_steps=2).fit()
    resumed = mlp_trainer(tmp_path / "resumed", optimizer_name, max_steps=4)
    resumed.load_state_dict(load_checkpoint(tmp_path / "resumed"))
    assert [stats.loss for stats in resumed.fit()] == losses[2:]
    final = load_checkpoint(tmp_path / "resumed")
    assert final["step"] == 4 and final["config"] == {"stage": "test"}
    reference = uninterrupted.model.state_dict()
    assert all(torch.equal(final["model"][name], reference[name]) for name in reference)


def test_a_resume_that_raises_max_steps_trains_each_step_at_the_stretched_schedules_rate(tmp_path):
    """A 4-step cosine run resumed to 8 steps (its total_steps following max_steps) trained step 5 at the 4-step
    schedule's last rate, 0, and only then joined the 8-step curve."""
    mlp_trainer(tmp_path / "resumed", "adamw", 4, "cosine", total_steps=4).fit()
    resumed = mlp_trainer(tmp_path / "resumed", "adamw", 8, "cosine", total_steps=8)
    resumed.load_state_dict(load_checkpoint(tmp_path / "resumed"))
    rates = [stats.lr for stats in resumed.fit()]
    straight = [stats.lr for stats in mlp_trainer(tmp_path / "straight", "adamw", 8, "cosine", total_steps=8).fit()]
    assert rates == straight[4:] and rates[0] > 0


def test_resuming_with_another_rank_count_is_a_checkpoint_error(tmp_path):
    mlp_trainer(tmp_path, "adamw", max_steps=2).fit()
    state = load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="written by 2 rank"):
        mlp_trainer(tmp_path, "adamw", max_steps=4).load_state_dict({**state, "rng": state["rng"] * 2})


def test_latest_checkpoint_without_its_pointer_is_the_newest_step_file(tmp_path):
    """Deleting a damaged latest checkpoint and its pointer, as the error says, resumes from the one before (the
    run started over from step 0 and pruned it)."""
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=3)
    folder = tmp_path / "checkpoints"
    (folder / "step_00000006.pt").unlink()
    with pytest.raises(CheckpointError, match="names step_00000006.pt, which does not exist: delete .*latest to "
                                              "resume from step_00000004.pt, the newest checkpoint left,"):
        latest_checkpoint(tmp_path)
    (folder / "latest").unlink()
    assert latest_checkpoint(tmp_path) == folder / "step_00000004.pt"
    assert latest_checkpoint(tmp_path / "elsewhere") is None


def test_a_runs_latest_pointer_names_its_latest_checkpoint(tmp_path):
    """init_from=<run>/checkpoints/latest was read as a checkpoint (an IndexError in the unpickler)."""
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"step": step, "model": {}, "model_spec": {"name": "t5"}}, keep=3)
    assert resolve_checkpoint(tmp_path / "checkpoints" / "latest") == tmp_path / "checkpoints" / "step_00000004.pt"
    assert load_checkpoint(tmp_path / "checkpoints" / "latest")["step"] == 4


def test_a_runs_checkpoints_folder_names_its_latest_checkpoint(tmp_path):
    """init_from=<run>/checkpoints said "no checkpoint in <run>/checkpoints"; a run whose folder is named
    `checkpoints` is still read as a run folder."""
    run, named = tmp_path / "run", tmp_path / "checkpoints"
    for folder in (run, named):
        save_checkpoint(folder, 2, {"step": 2, "model": {}, "model_spec": {"name": "t5"}}, keep=3)
    assert resolve_checkpoint(run / "checkpoints") == run / "checkpoints" / "step_00000002.pt"
    assert resolve_checkpoint(named) == named / "checkpoints" / "step_00000002.pt"
    empty = tmp_path / "elsewhere" / "checkpoints"
    empty.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="no checkpoint in .*elsewhere/checkpoints"):
        resolve_checkpoint(empty)


def test_a_checkpoint_whose_name_gives_another_step_is_refused(tmp_path):
    """A step 6 checkpoint copied over step 8's file resumed "at step 6" from the file named step 8."""
    save_checkpoint(tmp_path, 6, {"step": 6, "model": {}, "model_spec": {"name": "t5"}}, keep=3)
    folder = tmp_path / "checkpoints"
    (folder / "step_00000006.pt").rename(folder / "step_00000008.pt")
    with pytest.raises(CheckpointError, match="step_00000008.pt holds step 6, not the step its name gives"):
        load_checkpoint(folder / "step_00000008.pt")
    (folder / "step_00000008.pt").rename(folder / "renamed.pt")
    assert load_checkpoint(folder / "renamed.pt")["step"] == 6  # a name of one's own choosing gives no step
