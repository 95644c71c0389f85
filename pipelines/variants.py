"""Corpus variants: named, editable YAML presets (`configs/corpus/*.yaml`) that choose the pipeline's stages.

A variant is loaded into the structured config `CorpusVariant`: OmegaConf refuses unknown keys and values of the
wrong type, the dataclasses check the values.
"""
from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .c4_rules import load_realnews_domains
from .dedup import DEDUP_MODES

STAGE_SETTINGS = ("dedup", "near_dedup")  # what the command line may override, which a description names
from .near_dedup import NearDedupConfig

BUNDLED = "bundled"


class VariantError(ValueError):
    """A variant name, file or setting is wrong (the message says which and what to do)."""


@dataclass(frozen=True)
class CorpusVariant:
    """Which stages run. The rules' constants are C4's and are not configurable here."""

    name: str
    description: str = ""
    clean: bool = True
    dedup: str = "sentences"
    near_dedup: bool = False
    near_dedup_params: NearDedupConfig = field(default_factory=NearDedupConfig)
    badwords: bool = True
    realnews_domains: str | None = None
    webtext_filter: bool = False
    webtext_urls: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def preset_names() -> list[str]:
    """Names of the bundled presets."""
    folder = resources.files("c4prep.configs").joinpath("corpus")
    return sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def _preset_text(name_or_path: str) -> str:
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise VariantError(f"variant file not found: {name_or_path}")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise VariantError(f"variant file {name_or_path} is not UTF-8 text: give a YAML file") from None
    if name_or_path not in preset_names():
        raise VariantError(f"unknown variant {name_or_path!r}: use one of {', '.join(preset_names())} "
                           "or the path of a YAML file")
    return resources.files("c4prep.configs").joinpath("corpus", f"{name_or_path}.yaml").read_text(encoding="utf-8")


def _closest_key_hint(message: str) -> str:
    """`` (did you mean KEY?)`` for OmegaConf's "Key 'badword' not in 'CorpusVariant'", where a key is close."""
    unknown = re.match(r"Key '([^']+)' not in '(\w+)'", message)
    schema = {"CorpusVariant": CorpusVariant, "NearDedupConfig": NearDedupConfig}.get(unknown.group(2)) \
        if unknown else None
    close = difflib.get_close_matches(unknown.group(1), [f.name for f in fields(schema)], n=1) if schema else []
    return f" (did you mean {close[0]}?)" if close else ""


def load_variant(name_or_path: str, overrides: Mapping[str, Any] | None = None) -> CorpusVariant:
    """A bundled preset (by name) or a YAML file (by path), with `overrides` applied, validated."""
    schema = OmegaConf.structured(CorpusVariant)
    OmegaConf.set_readonly(schema.near_dedup_params, False)  # a frozen dataclass's node would refuse the merge
    try:
        preset = OmegaConf.merge(schema, OmegaConf.create(_preset_text(name_or_path)))
        config = OmegaConf.merge(preset, OmegaConf.create(dict(overrides or {})))
        values = OmegaConf.to_container(config, throw_on_missing=True)
        overridden = {key: value for key, value in (overrides or {}).items()
                      if key in STAGE_SETTINGS and preset[key] != value}
    except OmegaConfBaseException as error:
        message = str(error).splitlines()[0]
        where = f"{error.full_key}: " if error.full_key and error.full_key not in message else ""
        raise VariantError(f"variant {name_or_path!r}: {where}{message}{_closest_key_hint(message)}") from None
    except yaml.YAMLError as error:
        where = f" (line {error.problem_mark.line + 1})" if getattr(error, "problem_mark", None) else ""
        raise VariantError(f"variant {name_or_path!r} is not valid YAML{where}: "
                           f"{getattr(error, 'problem', None) or error}") from None
    if not str(values["name"]).strip():
        raise VariantError(f"variant {name_or_path!r}: name is empty: give the corpus a name")
    if overridden:  # the preset's description no longer says what runs
        settings = ", ".join(f"{key}: {json.dumps(value)}" for key, value in overridden.items())
        values["description"] = f"{values['description'] or values['name']} (for this run: {settings})"
    try:
        near_dedup_params = NearDedupConfig(**values.pop("near_dedup_params"))
    except ValueError as error:
        raise VariantError(f"variant {name_or_path!r}: near_dedup_params: {error}") from None
    variant = CorpusVariant(**values, near_dedup_params=near_dedup_params)
    if variant.dedup not in DEDUP_MODES:
        raise VariantError(f"variant {name_or_path!r}: dedup must be one of {', '.join(DEDUP_MODES)}, "
                           f"not {variant.dedup!r}")
    if variant.webtext_filter and not variant.webtext_urls:
        raise VariantError(f"variant {name_or_path!r} keeps only listed URLs: pass --webtext-urls FILE "
                           "(one URL per line; repeatable)")
    if variant.webtext_urls and not variant.webtext_filter:
        raise VariantError(f"variant {name_or_path!r} does not filter by URL, so it would ignore --webtext-urls: "
                           "use --variant webtextlike (or webtext_filter: true in a variant file)")
    if not (overrides or {}).get("webtext_urls"):  # the file's own lists; `c4prep run` checks those of --webtext-urls
        for url_list in variant.webtext_urls:
            if "://" not in url_list and not Path(url_list).is_file():
                raise VariantError(f"variant {name_or_path!r}: webtext_urls file not found: {url_list} (a relative "
                                   "path is read from the working folder)")
    if variant.realnews_domains not in (None, BUNDLED):
        if not Path(variant.realnews_domains).is_file():
            raise VariantError(f"variant {name_or_path!r}: realnews_domains file not found: "
                               f"{variant.realnews_domains}")
        try:
            load_realnews_domains(variant.realnews_domains)
        except ValueError as error:
            raise VariantError(f"variant {name_or_path!r}: realnews_domains: {error}") from None
        variant = replace(variant, realnews_domains=os.path.realpath(variant.realnews_domains))  # as a run records it
    return variant
