"""Shared fixtures: the real data in ../shared/data next to the checkout."""
from pathlib import Path

import pytest

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


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
