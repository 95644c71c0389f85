"""Shared fixtures: the real data in ../shared/data next to the checkout."""
import os
from pathlib import Path

import pytest

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"

# $C4PREP_SHARED_DATA, as the configs read it (benchmarks/gpu_suite.sh sets it), else ../shared/data.
SHARED_DATA = Path(os.environ.get("C4PREP_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``gpu`` are skipped where CUDA is absent (CPU CI); torch is imported only if one is collected."""
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if marked:
        import torch

        if not torch.cuda.is_available():
            for item in marked:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of the real, third-party data samples (read-only)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def webdata(shared_data: Path) -> Path:
    """Real Common Crawl WET samples and released-C4 documents."""
    return shared_data / "webdata"


@pytest.fixture(scope="session")
def sample_documents(tmp_path_factory, webdata) -> Path:
    """C4 `en` document shards (3 per split) built from the real WET sample; shared read-only by stage tests."""
    from c4prep.pipelines.run_c4 import RunConfig, run_c4

    output = tmp_path_factory.mktemp("c4") / "en"
    run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=3))
    return output


@pytest.fixture(scope="session")
def sample_vocab(tmp_path_factory, sample_documents) -> Path:
    """A 1,000-piece SentencePiece vocabulary trained on `sample_documents`."""
    from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary

    output = tmp_path_factory.mktemp("vocab")
    train_vocabulary(VocabConfig(inputs=[str(sample_documents)], output=str(output), vocab_size=1000))
    return output


@pytest.fixture(scope="session")
def sample_tokens(tmp_path_factory, sample_documents, sample_vocab) -> Path:
    """Token shards of `sample_documents` with `sample_vocab` (`c4prep tokenize`, DirectRunner)."""
    from c4prep.tokenization.run_tokenize import TokenizeConfig, run_tokenize

    output = tmp_path_factory.mktemp("tokens") / "en"
    run_tokenize(TokenizeConfig(input=str(sample_documents), vocab=str(sample_vocab), output=str(output)))
    return output


@pytest.fixture(scope="session")
def ptb_vocab(shared_data: Path):
    """A 500-piece T5-style (pad 0, eos 1, unk 2, 100 sentinels: 600 ids) SentencePiece model on 4,000 PTB lines."""
    import io

    import sentencepiece as spm

    from c4prep.tokenization.vocabulary import SentencePieceVocabulary

    lines = (shared_data / "ptb" / "train.txt").read_text().splitlines()[:4000]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=500, pad_id=0,
                                   eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2)
    return SentencePieceVocabulary(model.getvalue(), extra_ids=100)


@pytest.fixture(scope="session")
def ptb_ids(ptb_vocab, shared_data: Path):
    """PTB valid as one int32 id stream, each line ending with EOS (document EOS ids are ordinary segment tokens)."""
    import numpy as np

    lines = (shared_data / "ptb" / "valid.txt").read_text().splitlines()
    return np.concatenate(ptb_vocab.encode_arrays(lines, add_eos=True)).astype(np.int32)


TRAIN_QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.log_every=1",
               "trainer.device=cpu"]


@pytest.fixture(scope="session")
def ptb_small(shared_data: Path, tmp_path_factory) -> list[str]:
    """The first 300 / 40 / 25 sentences of PTB train / valid / test, as `train` data overrides."""
    folder = tmp_path_factory.mktemp("ptb")
    for split, count in (("train", 300), ("valid", 40), ("test", 25)):
        lines = (shared_data / "ptb" / f"{split}.txt").read_text().splitlines()[:count]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return [f"data.train={folder / 'train.txt'}", f"data.validation={folder / 'valid.txt'}",
            f"data.test={folder / 'test.txt'}"]


@pytest.fixture(scope="session")
def ptb_gpt_run(ptb_small: list[str], tmp_path_factory) -> Path:
    """A 3-step word-level gpt_tiny LM on the small PTB split (the AdaVAE backbone)."""
    from c4prep.training.cli import main

    run_dir = tmp_path_factory.mktemp("gpt") / "lm"
    assert main(["experiment=ptb_gpt_pretrain", "model=gpt_tiny", "model.block_size=65", "trainer.max_steps=3",
                 "trainer.eval_every=0", "trainer.global_batch_size=16", "trainer.micro_batch_size=16",
                 "schedule.options.warmup_steps=1", *ptb_small, f"output_dir={run_dir}", *TRAIN_QUIET]) == 0
    return run_dir


@pytest.fixture(scope="session")
def adavae_run(ptb_gpt_run: Path, ptb_small: list[str], tmp_path_factory) -> Path:
    """An AdaVAE around `ptb_gpt_run`, 8 steps (validated at steps 4 and 8), latent size 8."""
    from c4prep.training.cli import main

    run_dir = tmp_path_factory.mktemp("vae") / "adavae"
    assert main(["experiment=adavae_ptb", f"init_from={ptb_gpt_run}", "model.latent_size=8", "model.adapter_size=8",
                 "trainer.max_steps=8", "trainer.eval_every=4", "trainer.global_batch_size=16",
                 "trainer.micro_batch_size=8", "schedule.options.warmup_steps=2", *ptb_small,
                 f"output_dir={run_dir}", *TRAIN_QUIET]) == 0
    return run_dir
