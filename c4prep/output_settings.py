"""The refusal of `c4prep run`, `c4prep vocab` and `c4prep tokenize` to replace an output made with other settings.

What uses an output breaks when another replaces it: a vocabulary and token shards are made from documents, a
training run reads the token shards, and token shards name their vocabulary by SHA-256; and a mistyped input or
option would replace a corpus with a smaller or another one. A run with the same settings gives the same output (it
re-creates a deleted shard), so it goes on; ``--allow-other-settings`` replaces the output anyway.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from c4prep.manifest import MANIFEST_NAME, Manifest, ManifestError, has_manifest_file, read_manifest

ALLOW_FLAG = "--allow-other-settings"

Settings = Sequence[tuple[str, Any]]  # (command-line option, value), in the order of the command's --help


class OtherSettingsError(ValueError):
    """The output holds a result made with other settings, which the run would replace (one-line message)."""


@dataclass(frozen=True)
class Content:
    """An input shown by its path and compared by its hash alone: the same data at another path (relative or
    absolute, copied, moved) is the same input."""

    uri: str = field(compare=False)
    hash_name: str = field(compare=False)  # what ``digest`` is, e.g. "fingerprint"
    digest: str

    def __str__(self) -> str:
        return f"{self.uri} ({self.hash_name} {str(self.digest)[:12]})"  # None in a manifest lacking it


def _with(option: str, value: Any) -> str:
    """An option and its value as a command line gives them: ``--near-dedup``/``--no-near-dedup`` for a flag,
    ``no --input-list`` where none was given."""
    if option.startswith("--") and isinstance(value, bool):
        return option if value else f"--no-{option[2:]}"
    if option.startswith("--") and value in (None, []):
        return f"no {option}"
    return f"{option} {', '.join(map(str, value)) if isinstance(value, list) else value}"


def check_same_settings(output: str, held: str, recorded: Settings, wanted: Settings) -> None:
    """An :class:`OtherSettingsError` naming the first option whose ``recorded`` value (what made the ``held``
    output in ``output``) differs from the ``wanted`` one (this run's)."""
    for (option, old), (_, new) in zip(recorded, wanted, strict=True):
        if old != new:
            raise OtherSettingsError(
                f"{output} holds {held} made with {_with(option, old)}; this run asks for {_with(option, new)}, so it "
                f"left {output} unchanged: give another --output, or pass {ALLOW_FLAG} to replace it")


def check_published_settings(output: str, held: str, recorded: Callable[[Manifest], Settings],
                             wanted: Settings) -> None:
    """:func:`check_same_settings` against the settings ``recorded`` reads from the manifest published in ``output``;
    nothing to compare where none is, and an :class:`OtherSettingsError` where it does not read (the data folders
    it names would be replaced unseen)."""
    try:
        published = read_manifest(output)
    except ManifestError:
        if has_manifest_file(output):
            raise OtherSettingsError(
                f"{output}/{MANIFEST_NAME} does not read, so this run cannot tell what it would replace and left "
                f"{output} unchanged: restore the manifest, give another --output, or pass {ALLOW_FLAG} to replace "
                "it") from None
        return
    check_same_settings(output, held, recorded(published), wanted)
