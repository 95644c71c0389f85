"""Latent classification (``stage=classify``) of real Yelp short reviews from a tiny AdaVAE trained on real PTB
sentences: the json, determinism, the fixed evaluation sample, and which weights each mode may change."""
import json
from pathlib import Path

import pytest
import torch
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from conftest import TRAIN_QUIET
from c4prep.training.data.sentence_files import WordVocabulary, encode_sentences
from c4prep.training.experiments.gpt1.yelp import balanced_sample, read_yelp
from c4prep.training.stages.model_setup import model_from_checkpoint
from c4prep.training.experiments.adavae.classify_settings import ClassifySettings
from c4prep.training.experiments.adavae.latent_classification import (
    adapter_run,
    encoder_batch,
    feature_run,
    sentence_features,
    step_batches,
    summarize_runs,
    summary_table,
    unknown_share,
)


@pytest.fixture(scope="module")
def yelp(shared_data) -> Path:
    return shared_data / "yelp_short_shen"


def _classify(adavae_run: Path, yelp: Path, output: Path, *overrides: str) -> dict:
    assert main(["experiment=adavae_ptb", "stage=classify", f"init_from={adavae_run}",
                 f"classify.folder={yelp}", "classify.eval_per_label=20",
                 "classify.feature_steps=3", "classify.adapter_steps=3",
                 "classify.batch_size=4", *overrides, f"output_dir={output}", *TRAIN_QUIET]) == 0
    return json.loads((output / "classification.json").read_text())


def test_classify_reports_every_mode_count_and_seed_deterministically(adavae_run, yelp, tmp_path, capsys):
    counts = ["classify.per_label=[2,4]", "classify.seeds=[0,1]"]
    first = _classify(adavae_run, yelp, tmp_path / "a", *counts)
    assert "per_label  accuracy (mean ± std over seeds)" in capsys.readouterr().out
    second = _classify(adavae_run, yelp, tmp_path / "b", *counts)
    assert first == second  # same seeds -> the same numbers
    assert [(r["mode"], r["per_label"], r["seed"]) for r in first["runs"]] == [
        (mode, count, seed) for mode in ("feature", "adapters") for count in (2, 4) for seed in (0, 1)]
    assert all(r["evaluated"] == 40 and r["accuracy"] == r["correct"] / 40 and 0 <= r["accuracy"] <= 1
               for r in first["runs"])
    assert first["step"] == 8 and first["features"] == "mean" and first["evaluation"]["sentences"] == 40
    assert 0 < first["evaluation"]["unknown_share"] < 1  # Yelp words outside the PTB vocabulary
    assert set(first["summary"]) == {"feature", "adapters"}
    assert all(set(first["summary"][mode]) == {"2", "4"} and first["summary"][mode]["4"]["runs"] == 2
               for mode in first["summary"])
    # one count and seed alone: the same evaluation sample and the same number as inside the larger run
    alone = _classify(adavae_run, yelp, tmp_path / "c", "classify.per_label=[4]",
                      "classify.seeds=[1]", "classify.modes=[adapters]")
    assert alone["evaluation"] == first["evaluation"]
    assert alone["runs"] == [r for r in first["runs"] if (r["mode"], r["per_label"], r["seed"]) == ("adapters", 4, 1)]
    pooled = _classify(adavae_run, yelp, tmp_path / "d", "classify.per_label=[2]",
                       "classify.seeds=[0]", "classify.features=pooled",
                       "classify.modes=[feature]")
    assert pooled["features"] == "pooled" and pooled["evaluation"] == first["evaluation"]


def test_feature_mode_freezes_the_vae_and_adapter_mode_tunes_only_encoder_adapters_and_pooling(adavae_run, yelp):
    state = load_checkpoint(adavae_run)
    model, vocab = model_from_checkpoint(state).eval(), WordVocabulary.load(adavae_run)
    settings = ClassifySettings(folder=str(yelp), per_label=[3], seeds=[0], eval_per_label=5, feature_steps=3,
                                adapter_steps=3, batch_size=2)
    train = balanced_sample(read_yelp(yelp, "dev"), 3, 0)
    test = balanced_sample(read_yelp(yelp, "test"), 5, 0)
    train_ids, _ = encode_sentences([text for text, _ in train], vocab)
    test_ids, _ = encode_sentences([text for text, _ in test], vocab)
    train_labels, test_labels = (torch.tensor([label for _, label in s]) for s in (train, test))
    cpu = torch.device("cpu")
    train_features = sentence_features(model, train_ids, "mean", 4, cpu)
    assert train_features.shape == (6, 8)
    assert torch.allclose(train_features, sentence_features(model, train_ids, "mean", 6, cpu), atol=1e-5)
    assert sentence_features(model, train_ids, "pooled", 6, cpu).shape == (6, model.posterior.mean.in_features)
    correct = feature_run(train_features, train_labels, sentence_features(model, test_ids, "mean", 4, cpu),
                          test_labels, settings, 0)
    assert 0 <= correct <= 10
    assert all(tensor.equal(state["model"][name]) for name, tensor in model.state_dict().items())

    assert 0 <= adapter_run(model, train_ids, train_labels, test_ids, test_labels, settings, 0, 4) <= 10
    changed = {name for name, tensor in model.state_dict().items() if not tensor.equal(state["model"][name])}
    assert changed and all(name.startswith(("encoder_adapters.", "posterior.pool.")) for name in changed)
    assert any(name.startswith("encoder_adapters.") for name in changed)
    assert any(name.startswith("posterior.pool.") for name in changed)


def test_training_samples_are_balanced_nested_and_disjoint_from_the_evaluation_sample(yelp):
    dev, test = read_yelp(yelp, "dev"), read_yelp(yelp, "test")
    small, large = balanced_sample(dev, 5, 1), balanced_sample(dev, 50, 1)
    assert sorted(label for _, label in large) == [0] * 50 + [1] * 50
    assert set(small) <= set(large) and set(small) != set(balanced_sample(dev, 5, 2))
    evaluation = balanced_sample(test, 100, 0)
    assert evaluation == balanced_sample(test, 100, 0) and not set(large) & set(evaluation)


def test_batches_unknown_share_and_aggregation():
    batches = [b.tolist() for b in step_batches(10, 4, seed=3, steps=7)]
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2, 4]
    assert sorted(sum(batches[:3], [])) == sorted(sum(batches[3:6], [])) == list(range(10))  # whole epochs
    assert batches[:3] != batches[3:6]  # a new permutation every epoch
    assert batches == [b.tolist() for b in step_batches(10, 4, seed=3, steps=7)]
    small = [b.tolist() for b in step_batches(10, 32, seed=3, steps=2)]  # fewer examples than a batch
    assert small == [sum(batches[:3], []), sum(batches[3:6], [])]
    assert unknown_share([[1, 7, 5, 7, 2], [1, 9, 2]], unk_id=7) == pytest.approx(0.5)
    assert unknown_share([[1, 2]], unk_id=7) == 0.0
    inputs, mask = encoder_batch([[1, 7, 5, 2], [1, 9, 2]])
    assert inputs.tolist() == [[1, 7, 5], [1, 9, 0]] and mask.tolist() == [[True] * 3, [True, True, False]]
    runs = [{"mode": "feature", "per_label": 5, "accuracy": 0.5}, {"mode": "feature", "per_label": 5, "accuracy": 0.7},
            {"mode": "adapters", "per_label": 50, "accuracy": 0.8}]
    summary = summarize_runs(runs)
    assert summary == {"feature": {"5": pytest.approx({"mean": 0.6, "std": 0.1414213, "runs": 2})},
                       "adapters": {"50": {"mean": 0.8, "std": 0.0, "runs": 1}}}
    assert summary_table(summary).splitlines()[1].split() == ["feature", "5", "0.6000", "±", "0.1414", "(2", "runs)"]


def test_classify_rejects_bad_settings(adavae_run, yelp, tmp_path, capsys):
    assert main(["experiment=adavae_ptb", "stage=classify", f"init_from={adavae_run}", "classify.modes=[svm]",
                 f"output_dir={tmp_path}", *TRAIN_QUIET]) == 2
    assert "classify.modes must be a non-empty subset" in capsys.readouterr().err
    assert main(["experiment=adavae_ptb", "stage=classify", f"init_from={adavae_run}",
                 "classify.folder=/nonexistent", f"output_dir={tmp_path}", *TRAIN_QUIET]) == 2
    assert "no such folder" in capsys.readouterr().err
