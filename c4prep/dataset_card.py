"""The dataset card ``README.md`` of an output folder, written from its manifest: for the Hugging Face Hub and for
``datasets.load_dataset(FOLDER)``.

The card's YAML header names each split's files one by one (``configs``/``data_files``), so the Hub and
``load_dataset`` read exactly the files the manifest lists, never a data folder a killed run left. The card is a
function of the manifest alone: :func:`sync_card` writes it atomically right after the manifest (the commit point)
and again from ``repair_output`` whenever it is not the manifest's (a publish killed between the two writes), so a
card never outlives the manifest it describes. The card sits at the folder's root, where the Hub looks for it.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
import yaml

from c4prep.shards import atomic_output, join_uri, resolve_uri

if TYPE_CHECKING:
    from c4prep.manifest import Manifest

CARD_NAME = "README.md"
_FORMAT_TEXT = {
    "arrow": "Arrow IPC stream format, uncompressed (memory-mappable; `datasets.Dataset.from_file` and "
             "`pyarrow.ipc.open_stream` open each file)",
    "parquet": "Parquet, zstd-compressed, one row group per record batch",
    "jsonl.gz": "JSON Lines, gzip-compressed, one object per row",
}
_ARROW_FILE_TEXT = "Arrow IPC file format, uncompressed (memory-mappable)"  # `arrow` before manifest format 4
_SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
          (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
          (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T")]
_TYPELESS_TEXT = ("JSON Lines carry no types: readers infer them (`load_dataset` reads integers as int64, and a "
                  "`timestamp` string as a timestamp where it can); the types above are the files' as written.")
_LICENCE = """\
The text comes from web pages crawled by Common Crawl: it belongs to its authors, and its use is subject to the
[Common Crawl terms of use](https://commoncrawl.org/terms-of-use). The header declares ODC-BY 1.0, the licence under
which AllenAI released C4; whoever publishes a corpus built with c4prep chooses its licence within those terms."""


def _format_text(manifest: Manifest) -> str:
    if manifest.shard_format == "arrow" and manifest.format_version < 4:
        return _ARROW_FILE_TEXT  # the shards of an older output keep the card that describes them
    return _FORMAT_TEXT[manifest.shard_format]


def _size_category(rows: int) -> str:
    """The Hub's ``size_categories`` tag for ``rows``."""
    return next((name for limit, name in _SIZES if rows < limit), "n>1T")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    cells = [header, tuple("---" for _ in header), *rows]
    return ["| " + " | ".join(f"{cell:,}" if isinstance(cell, int) else str(cell) for cell in row) + " |"
            for row in cells]


def _front_matter(manifest: Manifest, title: str) -> str:
    paths: dict[str, list[str]] = {}
    for shard in (shard for shard in manifest.shards if shard.num_rows):  # datasets fails on an empty file first
        paths.setdefault(shard.split, []).append(f"{manifest.data_dir}/{shard.name}" if manifest.data_dir
                                                 else shard.name)
    header: dict[str, Any] = {
        "license": "odc-by",
        "language": ["en"],
        "task_categories": ["text-generation"],
        "pretty_name": title,
        "size_categories": [_size_category(sum(split.num_rows for split in manifest.splits.values()))],
        "tags": ["c4", "c4prep"],
    }
    # A split without rows has no file, and no entry (`datasets` refuses a split without data); without any, the
    # empty list makes `load_dataset` say that there is no data, where it would load manifest.json as the data.
    header["configs"] = [{"config_name": "default",
                          "data_files": [{"split": split, "path": files} for split, files in paths.items()]}]
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000) + "---\n"


def _documents(manifest: Manifest) -> list[str]:
    variant, funnel = manifest.config["variant"], manifest.extra.get("funnel", {})
    lines = [variant.get("description") or f"The C4 `{variant.get('name')}` variant.", "",
             f"Built with the rules of {manifest.config.get('rules', 'TFDS c4')} (C4 as the T5 paper and the TFDS "
             f"builder define it), from {funnel.get('input_files', 0):,} input file(s).", "", "## Variant", ""]
    lines += [f"- `{key}`: `{json.dumps(value)}`" for key, value in variant.items() if key != "description"]
    if funnel:
        lines += ["", "## Funnel", "", f"{funnel['pages_in']:,} pages in, {funnel['pages_out']:,} out.", ""]
        lines += _table(("stage", "what it checks", "pages in", "dropped", "pages out"),
                        [(f"`{stage['namespace']}`", stage["description"], stage["pages_in"],
                          sum(stage["dropped"].values()), stage["pages_out"]) for stage in funnel["stages"]])
        if funnel.get("input_problems"):
            problems = ", ".join(f"{count:,} {kind}" for kind, count in funnel["input_problems"].items())
            lines += ["", f"Damaged input skipped: {problems}."]
    return lines


def _tokens(manifest: Manifest) -> list[str]:
    vocabulary, source = manifest.extra["vocabulary"], manifest.extra.get("source", {})
    counts = manifest.counters.get("tokenize", {})
    lines = [f"The documents of the c4prep corpus whose manifest fingerprint is `{source.get('fingerprint')}`, as "
             f"SentencePiece ids with EOS appended to each: a vocabulary of {vocabulary.get('vocab_size'):,} ids "
             f"({vocabulary.get('extra_ids')} sentinels), `.model` SHA-256 `{vocabulary.get('model_sha256')}`.", ""]
    return lines + _table(("split", "documents", "tokens"),
                          [(split, info.num_rows, counts.get(f"tokens:{split}", 0))
                           for split, info in manifest.splits.items()])


def dataset_card(manifest: Manifest) -> str:
    """The card's text: YAML header (licence, language, size, the splits' files), then what the data is, how it was
    made (variant and funnel, or vocabulary), the splits, the format, the schema and the licence notes."""
    if "variant" in manifest.config:
        title, body = f"C4 {manifest.config['variant'].get('name')} (c4prep)", _documents(manifest)
    elif "vocabulary" in manifest.extra:
        title, body = "C4 token shards (c4prep)", _tokens(manifest)
    else:
        title, body = "c4prep shards", []
    schema = manifest.schema()
    lines = [_front_matter(manifest, title), f"# {title}", "", *body, "", "## Splits", ""]
    lines += _table(("split", "rows", "files", "bytes"), [(split, info.num_rows, info.num_shards, info.num_bytes)
                                                          for split, info in manifest.splits.items()])
    lines += ["", "A split without rows has no file. The header lists the files that hold rows (`load_dataset` fails "
                  "on an empty Parquet or JSON Lines file listed before others); `manifest.json` lists them all.", "",
              "## Format", "",
              f"{_format_text(manifest)}, written by c4prep {manifest.package_version} on "
              f"{manifest.created}. Row order and bytes do not depend on the runner or the worker count. "
              "`manifest.json` lists every file with its size and SHA-256.", "",
              "```python", "from datasets import load_dataset", "dataset = load_dataset(FOLDER_OR_REPO_ID)", "```", ""]
    lines += _table(("field", "type"), [(f"`{field.name}`", f"`{field.type}`") for field in schema])
    if manifest.shard_format == "jsonl.gz":
        lines += ["", _TYPELESS_TEXT]
    description = (schema.metadata or {}).get(b"description")
    if description:
        lines += ["", description.decode("utf-8")]
    lines += ["", "## Licence", "", _LICENCE]
    if manifest.config.get("variant", {}).get("badwords"):
        lines += ["", "Pages were filtered with the LDNOOBW bad-words list (© Shutterstock, CC-BY-4.0), which is "
                      "not part of the data."]
    return "\n".join(lines) + "\n"


def sync_card(output_uri: str, manifest: Manifest) -> None:
    """Write ``README.md`` into ``output_uri`` atomically, unless it already is ``manifest``'s card."""
    text = dataset_card(manifest).encode("utf-8")
    uri = join_uri(output_uri, CARD_NAME)
    fs, path = resolve_uri(uri)
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as stream:
            if stream.read() == text:
                return
    with atomic_output(uri) as stream:
        stream.write(text)
