"""Shared fixtures: the real data in ../shared/data next to the checkout."""
from pathlib import Path

import pytest

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
