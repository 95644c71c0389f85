"""A SentencePiece run keeps its model's SHA-256 (`vocabulary.sha256`), and the stages that use the run refuse the
same path holding another model of the same size: the run's token shards re-made with `c4prep tokenize
--allow-other-settings` (real sample documents, a BPE vocabulary of the unigram one's 1,000 pieces)."""
import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from c4prep.cli import main as c4prep_main
from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary
from c4prep.training.cli import main
from c4prep.training.data.kept_vocabulary import SHA256_FILE

QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.device=cpu"]


def sha256(model: Path) -> str:
    return hashlib.sha256(model.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def remade(sample_documents, sample_vocab, sample_tokens, tmp_path_factory):
    """A 2-step t5_tiny run on a copy of the sample tokens, evaluated; then those tokens re-made in place with a
    BPE vocabulary of the same size. Returns (run, tokens folder, other vocabulary, evaluate's exit code before)."""
    root = tmp_path_factory.mktemp("remade")
    tokens, run, other = root / "tokens", root / "run", root / "bpe"
    shutil.copytree(sample_tokens, tokens)
    assert main(["model=t5_tiny", "objective.inputs_length=64", "objective.targets_length=16", f"data.tokens={tokens}",
                 "data.validation_split=train", "trainer.max_steps=2", "trainer.global_batch_size=4",
                 "trainer.micro_batch_size=4", "trainer.eval_batches=1", f"output_dir={run}", *QUIET]) == 0
    evaluated = main(["stage=evaluate", f"init_from={run}", "trainer.eval_batches=1", f"output_dir={root / 'eval'}",
                      *QUIET])
    train_vocabulary(VocabConfig(inputs=[str(sample_documents)], output=str(other), vocab_size=1000,
                                 model_type="bpe"))
    result = CliRunner().invoke(c4prep_main, ["tokenize", "--input", str(sample_documents), "--vocab", str(other),
                                              "--output", str(tokens), "--allow-other-settings"])
    assert result.exit_code == 0, result.output
    return run, tokens, other, evaluated


def test_the_run_keeps_the_sha256_of_its_token_shards_vocabulary(remade, sample_vocab):
    run, _, other, evaluated = remade
    assert evaluated == 0
    assert (run / SHA256_FILE).read_text() == sha256(sample_vocab / "spm.model") + "\n"
    assert sha256(other / "spm.model") != sha256(sample_vocab / "spm.model")


def refusal(run: str, read: str, kept: Path, other: Path) -> str:
    return (f"{run} was trained on the ids of the SentencePiece model of SHA-256 {sha256(kept)[:12]}..., but {read} "
            f"is another model's (SHA-256 {sha256(other)[:12]}...), whose ids are other pieces: use the vocabulary "
            "and token shards the run was trained with")


@pytest.mark.parametrize("stage", ["evaluate", "generate", "pretrain", "finetune"])
def test_stages_refuse_the_runs_tokens_remade_with_another_vocabulary(remade, sample_vocab, stage, tmp_path, capsys):
    run, tokens, other, _ = remade
    read = {"finetune": f"data.vocab={other}"}.get(stage, f"data.tokens={tokens}")
    overrides = {"evaluate": ["stage=evaluate"], "generate": ["stage=generate", 'generate.prompts=["The"]'],
                 "pretrain": [f"data.tokens={tokens}", "model=t5_tiny", "trainer.max_steps=2"],
                 "finetune": ["stage=finetune", "data=text_to_text", f"data.vocab={other}", "model=t5_tiny",
                              f"+data.tasks.copy.train={tmp_path / 'never-read.tsv'}"]}[stage]
    output = tmp_path / "out"
    assert main([*overrides, f"init_from={run}", f"output_dir={output}", *QUIET]) == 2
    assert capsys.readouterr().err.strip() == "train: error: " + refusal(
        f"init_from={run}", read, sample_vocab / "spm.model", other / "spm.model")
    assert not output.exists()


def test_export_refuses_the_remade_vocabulary(remade, sample_vocab, tmp_path):
    run, _, other, _ = remade
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "hf")])
    checkpoint = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == "Error: " + refusal(
        str(checkpoint), f"the vocabulary {other}/spm.model", sample_vocab / "spm.model", other / "spm.model")
    assert not (tmp_path / "hf").exists()


def test_a_run_on_a_bpe_vocabulary_is_refused_with_what_export_takes(remade, tmp_path):
    """The refusal said only "its model type is not unigram"."""
    _, tokens, _, _ = remade  # made again with the BPE vocabulary
    run = tmp_path / "bpe_run"
    assert main(["model=t5_tiny", "objective.inputs_length=64", "objective.targets_length=16", f"data.tokens={tokens}",
                 "data.validation_split=null", "trainer.max_steps=1", "trainer.global_batch_size=4",
                 "trainer.micro_batch_size=4", f"output_dir={run}", *QUIET]) == 0
    pytest.importorskip("tokenizers")
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "hf")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: the SentencePiece model cannot become a tokenizer.json: its model type is not unigram; export takes a "
        "model trained on a vocabulary as `c4prep vocab` makes by default (unigram, no byte fallback)")
    assert not (tmp_path / "hf").exists()


def test_a_run_copied_without_its_record_or_a_checkpoint_alone_is_checked_by_the_checkpoint(remade, tmp_path, capsys):
    """Without vocabulary.sha256 beside it (a checkpoint copied alone, a folder copied without it), evaluate scored
    token shards of another model."""
    run, tokens, other, _ = remade
    checkpoint = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    bare = tmp_path / "bare" / checkpoint.name
    bare.parent.mkdir()
    shutil.copy(checkpoint, bare)
    copied = shutil.copytree(run, tmp_path / "copied", ignore=shutil.ignore_patterns(SHA256_FILE))
    for init_from in (bare, copied):
        assert main(["stage=evaluate", f"init_from={init_from}", f"data.tokens={tokens}", "model=t5_tiny",
                     "objective.inputs_length=64", "objective.targets_length=16", "data.validation_split=train",
                     "trainer.eval_batches=1", f"output_dir={tmp_path / 'out'}", *QUIET]) == 2
        assert capsys.readouterr().err.strip() == (
            f"train: error: init_from={init_from} was trained on the ids of another SentencePiece model than "
            f"data.tokens={tokens}'s (of SHA-256 {sha256(other / 'spm.model')[:12]}...), as its checkpoint records, "
            "whose ids are other pieces: use the vocabulary and token shards the run was trained with")
