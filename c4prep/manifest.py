"""``manifest.json``: what an output folder of shards holds, and the commit that publishes it.

The manifest is the output's single pointer: it names the sub-folder ``data-<run>/`` holding the shards it lists,
with their format, sizes and SHA-256, and every split (one without rows has no shard). A run writes its shards into
a hidden staging folder (:func:`new_staging_uri`); :func:`commit_output` moves them into a new data folder and then
replaces ``manifest.json`` in one atomic write, the only step that changes what a reader sees, and then rewrites the
dataset card ``README.md`` from it (:mod:`c4prep.dataset_card`). Whenever a publish is killed, the folder holds
either the old manifest with its complete data folder or the new manifest with its complete data folder;
:func:`repair_output` (run before every publish) removes what a killed run left behind and brings the card in line.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, TypeVar, get_type_hints

import pyarrow as pa
import pyarrow.fs as pafs

from c4prep import __version__
from c4prep.dataset_card import CARD_NAME, sync_card
from c4prep.folder_lock import FolderBusy, lock_folder
from c4prep.shard_formats import SUFFIXES, check_format, format_of
from c4prep.shards import (
    ShardInfo,
    ShardIntegrityError,
    atomic_output,
    is_temp_name,
    join_uri,
    parse_shard_name,
    read_verified_shard,
    resolve_uri,
    shard_name,
)

FORMAT = "c4prep-arrow-shards"
# 4: `arrow` shards are the Arrow IPC stream format (before: the IPC file format; readers take both); 3: `shard_format`,
# splits without shards; 2: shards in `data_dir`; 1: next to the manifest
FORMAT_VERSION = 4
MANIFEST_NAME = "manifest.json"
STAGING_PREFIX = ".staging-"
DATA_PREFIX = "data-"
# the folders new_staging_uri and commit_output name (a folder of the user's named data-backup-20231201 or
# .staging-notes is not one)
_RUN_STAMP = r"\d{8}T\d{6}Z-[0-9a-f]{8}"
_STAGING_DIR_RE = re.compile(re.escape(STAGING_PREFIX) + _RUN_STAMP)
_DATA_DIR_RE = re.compile(re.escape(DATA_PREFIX) + _RUN_STAMP)
_UNREADABLE = object()  # repair_output's marker for a manifest that exists but cannot be read


Counters = dict[str, dict[str, int]]  # namespace -> counter name -> value


LOGGER = logging.getLogger(__name__)
DOCUMENTS, TOKENS, VOCABULARY = "documents", "token shards", "a vocabulary"
OUTPUT_KINDS = {DOCUMENTS: "c4prep run", TOKENS: "c4prep tokenize", VOCABULARY: "c4prep vocab"}  # kind: its command
VOCABULARY_CARD = "vocab.json"  # what `c4prep vocab` writes last
TRAINING_RUN_RECORD = "config.yaml"  # what a `train` run folder holds first


class ManifestError(Exception):
    """A manifest is missing, malformed, or does not match the files it describes."""


class OutputFolderError(ManifestError):
    """An output location that cannot hold a job's output (one-line message)."""


@dataclass(frozen=True)
class SplitInfo:
    """Totals of one split."""

    num_rows: int
    num_bytes: int
    num_shards: int


@dataclass(frozen=True)
class ShardEntry:
    """One shard file of the output, as listed in the manifest."""

    name: str
    split: str
    index: int
    count: int
    num_rows: int
    num_bytes: int
    sha256: str


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _schema_fields(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


@dataclass
class Manifest:
    """Contents of ``manifest.json``; ``schema_ipc`` is the base64 Arrow IPC schema."""

    schema_ipc: str
    splits: dict[str, SplitInfo]
    shards: list[ShardEntry]
    config: dict[str, Any]
    counters: Counters
    extra: dict[str, Any] = field(default_factory=dict)
    data_dir: str = ""  # the sub-folder holding the shards ("" in format 1: the manifest's own folder)
    shard_format: str = "arrow"  # one of shard_formats.FORMATS (always "arrow" before format 3)
    created: str = field(default_factory=_utc_now)
    package_version: str = __version__
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def shard_uri(self, folder_uri: str, shard: ShardEntry) -> str:
        """Where a listed shard lives, for the output folder ``folder_uri`` this manifest describes."""
        return join_uri(folder_uri, self.data_dir, shard.name) if self.data_dir else join_uri(folder_uri, shard.name)

    def schema(self) -> pa.Schema:
        """The exact Arrow schema of the shards (metadata included)."""
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_ipc, validate=True)))

    def to_json(self) -> str:
        """Serialise to JSON text (UTF-8, indented)."""
        doc = {
            "format": self.format,
            "format_version": self.format_version,
            "package_version": self.package_version,
            "created": self.created,
            "data_dir": self.data_dir,
            "shard_format": self.shard_format,
            "schema": {"fields": _schema_fields(self.schema()), "ipc_base64": self.schema_ipc},
            "splits": {name: asdict(info) for name, info in self.splits.items()},
            "shards": [asdict(shard) for shard in self.shards],
            "config": self.config,
            "counters": self.counters,
            "extra": self.extra,
        }
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse JSON text; raises :class:`ManifestError` describing what is wrong."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"not valid JSON ({e})") from e
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise ManifestError(f"not a {FORMAT} manifest (format: {found!r})")
        if "format_version" not in doc:
            raise ManifestError("missing field 'format_version'")
        version = doc["format_version"]
        if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
            raise ManifestError(f"unsupported format_version {version!r}: c4prep {__version__} "
                                f"reads versions 1..{FORMAT_VERSION}; upgrade c4prep")
        try:
            manifest = cls(
                schema_ipc=doc["schema"]["ipc_base64"],
                splits={name: _entry(SplitInfo, info, f"split {name!r}") for name, info in doc["splits"].items()},
                shards=[_entry(ShardEntry, shard, f"shard {index}") for index, shard in enumerate(doc["shards"])],
                config=doc["config"],
                counters=doc["counters"],
                extra=doc["extra"],
                data_dir=doc["data_dir"] if version >= 2 else "",
                shard_format=doc["shard_format"] if version >= 3 else "arrow",
                created=doc["created"],
                package_version=doc["package_version"],
                format_version=version,
            )
            fields = _schema_fields(manifest.schema())
        except KeyError as e:
            raise ManifestError(f"missing field {e}") from e
        except (TypeError, ValueError, AttributeError) as e:  # ArrowInvalid is a ValueError
            raise ManifestError(f"malformed content ({type(e).__name__}: {e})") from e
        if fields != doc["schema"].get("fields"):
            raise ManifestError("schema 'fields' do not match the serialised schema 'ipc_base64'")
        if manifest.data_dir and not (isinstance(manifest.data_dir, str) and _DATA_DIR_RE.fullmatch(manifest.data_dir)):
            raise ManifestError(f"data_dir {manifest.data_dir!r} is not a data folder name like 'data-<run>'")
        if manifest.shard_format not in SUFFIXES:
            raise ManifestError(f"shard_format {manifest.shard_format!r} is not one of {', '.join(SUFFIXES)}")
        _check_listing(manifest)  # each shard's name, of that format
        return manifest


_Entry = TypeVar("_Entry", SplitInfo, ShardEntry)


def _entry(kind: type[_Entry], value: Any, where: str) -> _Entry:
    """A split's or shard's entry from its JSON object: a :class:`ManifestError` naming the first field that is
    missing, unknown or not of its type."""
    if not isinstance(value, dict):
        raise ManifestError(f"{where} is not an object")
    types = get_type_hints(kind)
    for name, expected in types.items():
        if name not in value:
            raise ManifestError(f"{where} lacks the field {name!r}")
        if type(value[name]) is not expected:  # neither a bool for an int nor "4" for 4
            raise ManifestError(f"{where} gives {name} {value[name]!r}, which is not of type {expected.__name__}")
    unknown = next((name for name in value if name not in types), None)
    if unknown is not None:
        raise ManifestError(f"{where} has an unknown field {unknown!r}")
    return kind(**value)


def _shard_entry(info: ShardInfo, shard_format: str) -> ShardEntry:
    """The manifest entry of a shard, its split, index and count taken from its name; a ValueError for a name that
    is not a shard name of ``shard_format``."""
    parsed = parse_shard_name(info.name)
    if parsed is None or format_of(info.name) != shard_format:
        raise ValueError(f"{info.name!r} is not a shard name of format {shard_format} like "
                         f"{shard_name('train', 0, 8, shard_format)!r}")
    return ShardEntry(info.name, *parsed, info.num_rows, info.num_bytes, info.sha256)


def _split_totals(shards: list[ShardEntry], splits: Iterable[str]) -> dict[str, SplitInfo]:
    """The totals of every split of ``shards`` and of ``splits`` (0 rows without a shard), by name; a ValueError
    in one sentence unless each split's shards are exactly shards 0..count-1 of one count, each listed once."""
    totals: dict[str, SplitInfo] = {}
    for split in sorted({*splits, *(s.split for s in shards)}):
        entries = [s for s in shards if s.split == split]
        counts = sorted({s.count for s in entries})
        if len(counts) > 1:
            raise ValueError(f"split {split!r} mixes shards of counts {', '.join(map(str, counts))}, but needs "
                             "shards 0..count-1 of one count")
        listed = Counter(s.index for s in entries)
        missing = [str(index) for index in range(counts[0] if counts else 0) if index not in listed]
        problems = [f"shard {index} {'twice' if n == 2 else f'{n} times'}" for index, n in sorted(listed.items())
                    if n > 1]
        if missing:
            problems.append(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} not at all")
        if problems:
            raise ValueError(f"split {split!r} lists {' and '.join(problems)}, but needs each of shards "
                             f"0..{counts[0] - 1} of {counts[0]} once")
        totals[split] = SplitInfo(sum(s.num_rows for s in entries), sum(s.num_bytes for s in entries), len(entries))
    return totals


def _check_listing(manifest: Manifest) -> None:
    """A :class:`ManifestError` unless the shards and splits of a read manifest are as :func:`build_manifest` makes
    them: entries that match their names, complete splits, and split totals that are the sums of their shards."""
    try:
        for shard in manifest.shards:
            if _shard_entry(ShardInfo(shard.name, shard.num_rows, shard.num_bytes, shard.sha256),
                            manifest.shard_format) != shard:
                raise ManifestError(f"the entry of shard {shard.name!r} gives split {shard.split!r}, index "
                                    f"{shard.index!r} and count {shard.count!r}, which are not its name's")
        totals = _split_totals(manifest.shards, manifest.splits)
    except ValueError as e:
        raise ManifestError(str(e)) from None
    for split, total in totals.items():
        if split not in manifest.splits:
            raise ManifestError(f"shards of split {split!r} are listed, but 'splits' lacks it")
        for name, value in asdict(manifest.splits[split]).items():
            if value != getattr(total, name):
                raise ManifestError(f"split {split!r} records {name} {value}, but the shards listed for it give "
                                    f"{getattr(total, name)}")


def build_manifest(schema: pa.Schema, shard_infos: Iterable[ShardInfo], config: Mapping[str, Any],
                   counters: Mapping[str, Mapping[str, int]], extra: Mapping[str, Any] | None = None, *,
                   splits: Iterable[str] = (), shard_format: str = "arrow") -> Manifest:
    """Describe written shards of ``shard_format``; each split must consist of exactly shards 0..count-1 of count.
    The ``splits`` named that have no shard are listed with 0 rows."""
    check_format(shard_format)
    shards = sorted((_shard_entry(info, shard_format) for info in shard_infos), key=lambda s: (s.split, s.index))
    split_infos = _split_totals(shards, splits)
    return Manifest(
        schema_ipc=base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        splits=split_infos,
        shards=shards,
        config=dict(config),
        counters={ns: {name: int(value) for name, value in values.items()}
                  for ns, values in counters.items()},
        extra=dict(extra or {}),
        shard_format=shard_format,
    )


def manifest_fingerprint(manifest: Manifest) -> str:
    """SHA-256 over the sorted (shard name, shard sha256) pairs: identifies the data itself."""
    digest = hashlib.sha256()
    for name, sha in sorted((s.name, s.sha256) for s in manifest.shards):
        digest.update(f"{name}\t{sha}\n".encode())
    return digest.hexdigest()


def write_manifest(output_uri: str, manifest: Manifest) -> None:
    """Atomically write ``<output_uri>/manifest.json``."""
    with atomic_output(join_uri(output_uri, MANIFEST_NAME)) as stream:
        stream.write(manifest.to_json().encode("utf-8"))


def _why_no_manifest(output_uri: str) -> str:
    """What a folder without a manifest is, and what to do: the manifest itself given, a vocabulary, or an output
    that does not exist or was not finished."""
    fs, path = resolve_uri(output_uri)
    is_file = fs.get_file_info(path).type == pafs.FileType.File
    if output_uri.rstrip("/").endswith(MANIFEST_NAME) and is_file:
        return "that is the manifest itself: give the folder that holds it"
    if is_file:
        return "that is a file: give the output folder of the stage you meant"
    card = resolve_uri(join_uri(output_uri, VOCABULARY_CARD))
    if card[0].get_file_info(card[1]).type == pafs.FileType.File:
        return f"it holds a vocabulary ({VOCABULARY_CARD}), not shards: give the output folder of the stage you meant"
    return "the output does not exist or the run that writes it did not finish; run the stage that produces it"


def read_manifest(output_uri: str) -> Manifest:
    """Read ``<output_uri>/manifest.json``; :class:`ManifestError` if missing or malformed."""
    uri = join_uri(output_uri, MANIFEST_NAME)
    fs, path = resolve_uri(uri)
    if fs.get_file_info(path).type != pafs.FileType.File:
        raise ManifestError(f"no {MANIFEST_NAME} in {output_uri}: {_why_no_manifest(output_uri)}")
    with fs.open_input_stream(path) as stream:
        data = stream.read()
    try:
        return Manifest.from_json(data.decode("utf-8"))
    except (ManifestError, UnicodeDecodeError) as e:
        raise ManifestError(f"{uri}: {e}; delete the folder and re-run the stage that "
                            "produces it") from e


def new_staging_uri(output_uri: str) -> str:
    """A fresh staging folder inside the output for one run's shards."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return join_uri(output_uri, f"{STAGING_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}")


def _staged_shard_problems(fs: pafs.FileSystem, stage_path: str, manifest: Manifest) -> list[str]:
    problems = []
    for shard, info in zip(manifest.shards, fs.get_file_info([f"{stage_path}/{s.name}" for s in manifest.shards])):
        if info.type != pafs.FileType.File:
            problems.append(f"{shard.name} (missing)")
        elif info.size != shard.num_bytes:
            problems.append(f"{shard.name} ({info.size} bytes, expected {shard.num_bytes})")
    return problems


def commit_output(output_uri: str, staging_uri: str, manifest: Manifest) -> Manifest:
    """Publish the staged shards of ``manifest`` as the content of ``output_uri``; returns the published manifest.

    If a listed shard is missing from staging (or has another size), raises :class:`ManifestError` before touching
    the output. Otherwise: moves the staged shards into a new data folder ``data-<run>/``, replaces
    ``manifest.json`` (pointing at it) in one atomic write, rewrites the dataset card from it, then deletes the
    staging folder and the data that no manifest names any more. Until the manifest write the old output is
    untouched; after it the new one is complete.
    """
    fs, out_path = resolve_uri(output_uri)
    stage_fs, stage_path = resolve_uri(staging_uri)
    if not fs.equals(stage_fs):
        raise ValueError(f"staging {staging_uri} and output {output_uri} must share a filesystem")
    bad = _staged_shard_problems(fs, stage_path, manifest)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ManifestError(f"staging {staging_uri} lacks shards of the manifest: {shown}; "
                            f"{output_uri} was left unchanged; re-run the stage")
    data_dir = DATA_PREFIX + stage_path.rsplit("/", 1)[-1].removeprefix(STAGING_PREFIX)
    fs.create_dir(f"{out_path}/{data_dir}", recursive=True)
    for shard in manifest.shards:
        fs.move(f"{stage_path}/{shard.name}", f"{out_path}/{data_dir}/{shard.name}")
    published = replace(manifest, data_dir=data_dir)
    write_manifest(output_uri, published)  # the commit point
    sync_card(output_uri, published)
    _remove_leftovers(output_uri, data_dir)
    return published


def has_manifest_file(output_uri: str) -> bool:
    """Whether the folder ``output_uri`` holds a ``manifest.json`` file (readable or not)."""
    fs, path = resolve_uri(output_uri)
    return fs.get_file_info(f"{path}/{MANIFEST_NAME}").type == pafs.FileType.File


def repair_output(output_uri: str) -> list[str]:
    """Delete what killed or superseded runs left in an output folder; returns the removed URIs.

    That is: staging folders, temporary files, data folders the manifest does not name, and (once the manifest names
    a data folder) shard files of the format-1 layout next to it; first the dataset card is rewritten when it is not
    the manifest's. A manifest that cannot be read keeps every data folder: nothing that may be data is deleted on a
    guess. Call it before a run stages its own shards.
    """
    if not has_manifest_file(output_uri):
        return _remove_leftovers(output_uri, None)
    try:
        manifest = read_manifest(output_uri)
    except ManifestError:
        return _remove_leftovers(output_uri, _UNREADABLE)
    sync_card(output_uri, manifest)
    return _remove_leftovers(output_uri, manifest.data_dir)


def _remove_leftovers(output_uri: str, current: str | object | None) -> list[str]:
    """:func:`repair_output` for a known state: ``current`` is the data folder the manifest names ("" for format
    1), None without a manifest, or ``_UNREADABLE``. What cannot be removed (no permission, a file still open on
    NFS) is logged and left: no manifest names it, and the output is complete without it."""
    fs, out_path = resolve_uri(output_uri)
    removed = []
    for info in fs.get_file_info(pafs.FileSelector(out_path, allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.Directory:
            stale_data = _DATA_DIR_RE.fullmatch(name) and current is not _UNREADABLE and name != current
            if not (_STAGING_DIR_RE.fullmatch(name) or stale_data):
                continue
            delete = fs.delete_dir
        elif info.type == pafs.FileType.File:
            legacy_shard = current not in (None, "", _UNREADABLE) and parse_shard_name(name) is not None
            if not (is_temp_name(name) or legacy_shard):
                continue
            delete = fs.delete_file
        else:
            continue
        try:
            delete(info.path)
        except OSError as error:
            LOGGER.warning("could not remove %s, which no manifest names (%s); remove it by hand",
                           join_uri(output_uri, name), error)
            continue
        removed.append(join_uri(output_uri, name))
    return removed


def read_listed_shard(folder_uri: str, manifest: Manifest, shard: ShardEntry) -> pa.Table:
    """A shard that ``folder_uri``'s manifest lists, checked against its size and SHA-256 while it is read: a
    :class:`ManifestError` when it is missing, unreadable or not the file the manifest describes."""
    uri = manifest.shard_uri(folder_uri, shard)
    try:
        table = read_verified_shard(uri, shard.num_bytes, shard.sha256, manifest.schema())
    except ShardIntegrityError as error:
        raise ManifestError(f"{error}: the shard is damaged or was changed after its manifest was written; re-run "
                            "the stage that produced it") from None
    except (OSError, pa.ArrowInvalid) as error:
        raise ManifestError(f"{uri}, listed in its folder's manifest, cannot be read ({error}); re-run the stage "
                            "that produced it") from None
    if table.num_rows != shard.num_rows:
        raise ManifestError(f"{uri} has {table.num_rows} rows but its manifest says {shard.num_rows}: the input "
                            "changed; re-run the stage that produced it")
    return table


def _output_kind(output_uri: str, types: Mapping[str, pafs.FileType]) -> str | None:
    """Which of :data:`OUTPUT_KINDS` the folder ``output_uri`` holds, by its manifest's columns or its vocabulary
    card (``types``: the type of each of those names in it); None for none (or a manifest that cannot be read,
    which publishing refuses on its own)."""
    if types[MANIFEST_NAME] == pafs.FileType.File:
        try:
            columns = read_manifest(output_uri).schema().names
        except ManifestError:
            return None
        return TOKENS if "ids" in columns else DOCUMENTS
    return VOCABULARY if types[VOCABULARY_CARD] == pafs.FileType.File else None


def check_output_folder(output_uri: str, writes: str, files: Iterable[str] = ()) -> list[str]:
    """Create the output folder if needed, before any work: an :class:`OutputFolderError` when ``output_uri`` is a
    file, cannot be created (a file on its path, no permission), holds another kind of output than the one the
    command ``writes`` (one of :data:`OUTPUT_KINDS`), which it would replace (a mistyped ``--output``), a folder
    where the command writes a file (the manifest, the card, or one of ``files``), or such a file or a `train` run's
    record but no manifest (a folder of the user's: ``--output .`` in a project; a run folder). The folders it made,
    the output first, then each parent it made."""
    fs, path = resolve_uri(output_uri)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.File:
        raise OutputFolderError(f"the output {output_uri} is a file; give a folder")
    written = (MANIFEST_NAME, CARD_NAME, *files)
    names = (*written, VOCABULARY_CARD, TRAINING_RUN_RECORD)
    types = {name: info.type for name, info in zip(names, fs.get_file_info([f"{path}/{name}" for name in names]))}
    for name in written:
        if types[name] == pafs.FileType.Directory:
            raise OutputFolderError(f"the output {output_uri} has a folder named {name}, where the command writes "
                                    "a file: move it away")
    held = _output_kind(output_uri, types)
    foreign = [name for name in (*written[1:], TRAINING_RUN_RECORD) if types[name] == pafs.FileType.File]
    if held is None and types[MANIFEST_NAME] == pafs.FileType.NotFound and foreign:
        harm = ("would write its files among a `train` run's" if foreign[0] == TRAINING_RUN_RECORD else
                "would replace that file")
        raise OutputFolderError(f"the output {output_uri} holds {foreign[0]} but no {MANIFEST_NAME}: it is not a "
                                f"c4prep output, and `{OUTPUT_KINDS[writes]}` {harm}: give another --output (a new "
                                "or empty folder)")
    if held not in (None, writes):
        raise OutputFolderError(f"the output {output_uri} holds {held} (from `{OUTPUT_KINDS[held]}`), which "
                                f"`{OUTPUT_KINDS[writes]}` would replace: give another --output, or remove that "
                                "folder first")
    missing = _missing_folders(fs, path) if kind == pafs.FileType.NotFound else []
    try:
        fs.create_dir(path, recursive=True)
    except OSError as error:
        raise OutputFolderError(f"cannot create the output folder {output_uri}: {error}") from None
    return missing


def _missing_folders(fs: pafs.FileSystem, path: str) -> list[str]:
    """``path`` and each of its parents that does not exist, ``path`` first."""
    missing = []
    while path and fs.get_file_info(path).type == pafs.FileType.NotFound:
        missing.append(path)
        parent = path.rsplit("/", 1)[0]
        if parent == path:
            break
        path = parent
    return missing


@contextmanager
def output_folder(output_uri: str, writes: str, files: Iterable[str] = ()) -> Iterator[None]:
    """:func:`check_output_folder` before the block; a folder it made is removed again when the block fails and
    leaves it empty, so a refused run leaves nothing behind."""
    made = check_output_folder(output_uri, writes, files)
    try:
        with _held_alone(output_uri):
            yield
    except BaseException:
        _remove_while_empty(output_uri, made)
        raise


@contextmanager
def _held_alone(output_uri: str) -> Iterator[None]:
    """While the block runs, no other c4prep command writes the local folder ``output_uri`` (an advisory lock on
    it): an :class:`OutputFolderError` if one does. Two runs into one output both passed the settings check, the
    last to publish won, and one's start-up clean-up could delete the other's staging folder. Remote folders, and
    local ones whose filesystem has no locks (a warning), have none."""
    if "://" in output_uri:
        yield
        return
    try:
        folder = lock_folder(output_uri, output_uri, "c4prep command")
    except FolderBusy:
        raise OutputFolderError(f"another c4prep command is writing {output_uri}: wait for it to end, or give "
                                "another output") from None
    try:
        yield
    finally:
        os.close(folder)


def _remove_while_empty(output_uri: str, made: list[str]) -> None:
    """Remove the folders ``made`` (the output first, then its parents), stopping at the first that is not empty."""
    fs, _ = resolve_uri(output_uri)
    try:
        for path in made:
            if fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
                return
            fs.delete_dir(path)
    except OSError as error:
        LOGGER.warning("could not remove the empty output folder %s: %s", output_uri, error)
