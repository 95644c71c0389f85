"""A token run's checkpoints record which token shards it trained on (their manifest fingerprint). Its `data.tokens`
folder made again since with the same vocabulary from other documents (real sample documents, a third of them):
`stage=evaluate` refused to score it as the run's split and the export's model card to name it (both took the new
shards as the run's, exit 0); another folder is scored as asked, under the split's name."""
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from c4prep.cli import main as c4prep_main
from c4prep.manifest import build_manifest, read_listed_shard, read_manifest, write_manifest
from c4prep.shards import shard_name, write_shard
from c4prep.training.cli import main

QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.device=cpu"]
T5_RUN = ["model=t5_tiny", "objective.inputs_length=64", "objective.targets_length=16", "data.validation_split=train",
          "trainer.max_steps=2", "trainer.global_batch_size=4", "trainer.micro_batch_size=4", "trainer.eval_batches=1"]


def first_shard_only(documents: Path, folder: Path) -> Path:
    """A documents folder holding the first train shard of ``documents`` alone (other documents than theirs)."""
    manifest = read_manifest(str(documents))
    table = read_listed_shard(str(documents), manifest, next(s for s in manifest.shards if s.split == "train"))
    info = write_shard(str(folder / shard_name("train", 0, 1)), table.schema, table.to_batches())
    write_manifest(str(folder), build_manifest(table.schema, [info], config={}, counters={}))
    return folder


@pytest.fixture(scope="module")
def remade(sample_documents, sample_vocab, sample_tokens, tmp_path_factory):
    """A 2-step t5_tiny run on a copy of the sample tokens; then those tokens made again in place, with the same
    vocabulary, from a third of the documents. Returns (run, tokens folder, a copy of the new tokens elsewhere)."""
    root = tmp_path_factory.mktemp("remade_tokens")
    tokens, run = root / "tokens", root / "run"
    shutil.copytree(sample_tokens, tokens)
    assert main([*T5_RUN, f"data.tokens={tokens}", f"output_dir={run}", *QUIET]) == 0
    fewer = first_shard_only(sample_documents, root / "fewer_documents")
    result = CliRunner().invoke(c4prep_main, ["tokenize", "--input", str(fewer), "--vocab", str(sample_vocab),
                                              "--output", str(tokens), "--allow-other-settings"])
    assert result.exit_code == 0, result.output
    return run, tokens, Path(shutil.copytree(tokens, root / "copied_tokens"))


def test_evaluate_refuses_the_runs_tokens_made_again_but_scores_another_folder(remade, tmp_path, capsys):
    run, tokens, copied = remade
    output = tmp_path / "eval"
    assert main(["stage=evaluate", f"init_from={run}", f"output_dir={output}", *QUIET]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: data.tokens={tokens} holds other token shards than init_from={run} was trained on (made "
        "again since): its split is not the run's; to score the model on them, copy them to another folder and give "
        "data.tokens=<that folder>")
    assert not output.exists()
    assert main(["stage=evaluate", f"init_from={run}", f"data.tokens={copied}", f"output_dir={output}", *QUIET]) == 0
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert [(record["step"], record["split"]) for record in records] == [(2, "train")]  # was logged as "validation"
    assert records[0]["metrics"]["loss"] > 0


def test_export_refuses_to_name_the_tokens_made_again_and_exports_with_the_vocabulary(remade, sample_vocab, tmp_path):
    run, tokens, _ = remade
    checkpoint = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "hf")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: data.tokens={tokens} holds other token shards than {checkpoint} was trained on (made again since): "
        "the model card would name them; pass --vocab=<the vocabulary folder or .model file the run used> to export "
        "without naming its shards")
    assert not (tmp_path / "hf").exists()
    pytest.importorskip("transformers")
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "hf"), "--vocab", str(sample_vocab)])
    assert result.exit_code == 0, result.output
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert "- Vocabulary `" in card and "Token shards `" not in card
