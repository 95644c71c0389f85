"""GPT-1 fine-tuning task files: labelled texts of one task type, read from a TSV (a header row naming the columns)
or JSONL (one object a line) file, either optionally gzipped, and turned into GPT-1's transformed rows.

Fields of each task, with their default column (TSV) or key (JSONL) names:

- classification: ``text``, ``label``
- entailment: ``premise``, ``hypothesis``, ``label``
- similarity: ``sentence1``, ``sentence2``, ``label``
- multiple_choice: ``context``, ``answers``, ``label`` (the right answer's index); ``answers`` is a JSON list, in a
  TSV the numbered columns of its singular name (``answer0, answer1, ...``).

``columns`` maps a field to another name (SNLI: ``{premise: sentence1, hypothesis: sentence2, label: gold_label}``)
or to a list of names: a text field joins those columns with a space (ROCStories' four story sentences as
``context``), ``answers`` takes one answer per column (SWAG's ``ending0..3``). A label is a non-negative integer or,
given ``labels``, one of that list's values, its index being the class (``[entailment, neutral, contradiction]``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...data.text_files import MalformedLine, TextFileError, file_format, json_object, numbered_lines
from .input_transforms import (
    FinetuneDataError,
    FinetuneExample,
    FinetuneRows,
    SpecialTokens,
    classification_sequences,
    entailment_sequences,
    multiple_choice_sequences,
    part_limit,
    similarity_sequences,
)

FIELDS: dict[str, tuple[str, ...]] = {
    "classification": ("text", "label"),
    "entailment": ("premise", "hypothesis", "label"),
    "similarity": ("sentence1", "sentence2", "label"),
    "multiple_choice": ("context", "answers", "label"),
}
TASKS = tuple(FIELDS)
TRANSFORMS: dict[str, Callable[..., list]] = {  # (token ids of the texts, special tokens, max_length) -> sequences
    "classification": lambda ids, special, n: classification_sequences(ids[0], special, n),
    "entailment": lambda ids, special, n: entailment_sequences(ids[0], ids[1], special, n),
    "similarity": lambda ids, special, n: similarity_sequences(ids[0], ids[1], special, n),
    "multiple_choice": lambda ids, special, n: multiple_choice_sequences(ids[0], ids[1:], special, n),
}
Names = dict[str, Any]  # field -> column name (str) or names (tuple)


@dataclass(frozen=True)
class TaskExample:
    """One labelled example: the texts in field order (multiple choice: the context, then every answer)."""

    texts: tuple[str, ...]
    label: int


def column_names(task: str, columns: Mapping[str, Any] | None = None) -> Names:
    """Every field of ``task`` with its column name(s): the defaults, updated by ``columns``."""
    if task not in FIELDS:
        raise FinetuneDataError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    names: Names = {field: field for field in FIELDS[task]}
    for field, name in (columns or {}).items():
        if field not in names:
            raise FinetuneDataError(f"columns.{field}: not a field of {task} ({', '.join(FIELDS[task])})")
        if isinstance(name, str) and name:
            names[field] = name
        elif field != "label" and isinstance(name, Sequence) and name and all(isinstance(n, str) for n in name):
            names[field] = tuple(name)
        else:
            what = "a column name" if field == "label" else "a column name or a list of them"
            raise FinetuneDataError(f"columns.{field} must be {what}, got {name!r}")
    return names


def read_task_file(path: str, task: str, labels: Sequence[str] | None = None,
                   columns: Mapping[str, Any] | None = None) -> list[TaskExample]:
    """The examples of a ``.tsv``/``.jsonl`` (optionally ``.gz``) file; a bad line raises :class:`FinetuneDataError`
    naming the file and line."""
    names = column_names(task, columns)
    try:
        return _read_examples(path, task, names, labels)
    except TextFileError as error:
        raise FinetuneDataError(str(error)) from None


def _read_examples(path: str, task: str, names: Names, labels: Sequence[str] | None) -> list[TaskExample]:
    """:func:`read_task_file` once the column names are known; a bad line is a :class:`FinetuneDataError`."""
    tsv = file_format(path)[0] == "tsv"
    labels = None if labels is None else [str(label) for label in labels]
    examples: list[TaskExample] = []
    header: list[str] | None = None
    for number, line in numbered_lines(path):
        try:
            if isinstance(line, bytes):
                raise MalformedLine("not UTF-8 text")
            if not line.strip():
                continue
            if tsv and header is None:
                header = line.split("\t")
                names = _tsv_names(names, header)
                continue
            record = _tsv_record(line, header) if tsv else json_object(line)
            examples.append(_example(record, task, names, labels))
            if len(examples[-1].texts) != len(examples[0].texts):
                raise MalformedLine(f"{len(examples[-1].texts) - 1} answers, but the first example has "
                                    f"{len(examples[0].texts) - 1}: every example needs as many")
        except MalformedLine as error:
            raise FinetuneDataError(f"{path} line {number}: {error}") from None
    if not examples:
        raise FinetuneDataError(f"{path}: no examples")
    return examples


def class_count(task: str, examples: Sequence[TaskExample], labels: Sequence[str] | None = None) -> int:
    """Classifier outputs: the answers per example (multiple choice), else ``len(labels)`` or the largest label + 1
    (at least 2)."""
    if task == "multiple_choice":
        return len(examples[0].texts) - 1
    return len(labels) if labels else max(2, 1 + max(example.label for example in examples))


def missing_classes(task: str, examples: Sequence[TaskExample], num_classes: int) -> list[int]:
    """The classes ``0..num_classes-1`` no example has (none for multiple choice, whose labels index answers)."""
    if task == "multiple_choice":
        return []
    return sorted(set(range(num_classes)) - {example.label for example in examples})


def task_rows(task: str, examples: Sequence[TaskExample], vocab, special: SpecialTokens,
              max_length: int) -> FinetuneRows:
    """The examples tokenized with ``vocab``, transformed as ``task`` and framed by ``special``, as fixed rows that
    count the examples with a text cut to fit ``max_length``."""
    transform, built, truncated = TRANSFORMS[task], [], 0
    for example in examples:
        ids = [vocab.encode(text) for text in example.texts]
        truncated += any(len(part) > part_limit(max_length, len(ids)) for part in ids)
        built.append(FinetuneExample(tuple(transform(ids, special, max_length)), example.label))
    return FinetuneRows(tuple(built), max_length, vocab.pad_id, truncated)


def _tsv_names(names: Names, header: list[str]) -> Names:
    """``names`` with a single ``answers`` name resolved to the header's numbered columns; every column present."""
    answers = names.get("answers")
    if isinstance(answers, str):
        stem = answers.removesuffix("s")
        numbered = [f"{stem}{k}" for k in range(len(header)) if f"{stem}{k}" in header]
        if not numbered or numbered[-1] != f"{stem}{len(numbered) - 1}":
            raise MalformedLine(f"missing answer columns {stem}0, {stem}1, ... (the header has: {', '.join(header)})")
        names = {**names, "answers": tuple(numbered)}
    for name in _flat(names.values()):
        if name not in header:
            raise MalformedLine(f"missing column {name!r} (the header has: {', '.join(header)})")
    return names


def _tsv_record(line: str, header: list[str]) -> dict[str, str]:
    fields = line.split("\t")
    if len(fields) != len(header):
        raise MalformedLine(f"expected {len(header)} tab-separated fields as in the header, got {len(fields)}")
    return dict(zip(header, fields))


def _example(record: dict[str, Any], task: str, names: Names, labels: list[str] | None) -> TaskExample:
    texts = [_text(record, names[field]) for field in FIELDS[task][:-1] if field != "answers"]
    if task == "multiple_choice":
        answers = names["answers"]
        texts += [_value(record, name) for name in answers] if isinstance(answers, tuple) else _list(record, answers)
    label = _label(_value(record, names["label"], text=False), labels)
    if task == "multiple_choice" and label >= len(texts) - 1:
        raise MalformedLine(f"label {label} is not the index of one of the {len(texts) - 1} answers")
    return TaskExample(tuple(texts), label)


def _value(record: dict[str, Any], name: str, text: bool = True) -> Any:
    if name not in record:
        raise MalformedLine(f"missing key {name!r}")
    value = record[name]
    if text and not isinstance(value, str):
        raise MalformedLine(f"{name!r} must be a string, got {type(value).__name__}")
    return value


def _text(record: dict[str, Any], names: str | tuple[str, ...]) -> str:
    return _value(record, names) if isinstance(names, str) else " ".join(_value(record, name) for name in names)


def _list(record: dict[str, Any], name: str) -> list[str]:
    answers = _value(record, name, text=False)
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise MalformedLine(f"{name!r} must be a non-empty list of strings")
    return answers


def _label(value: Any, labels: list[str] | None) -> int:
    """The class index of a label value: its index in ``labels``, else the value as a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise MalformedLine(f"label {value!r} must be a string or an integer")
    if labels is not None:
        if str(value) not in labels:
            raise MalformedLine(f"label {value!r} is not one of data.labels {labels}")
        return labels.index(str(value))
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise MalformedLine(f"label {value!r} is not a non-negative integer; set data.labels to name the classes")


def _flat(names) -> Iterator[str]:
    for name in names:
        yield from ((name,) if isinstance(name, str) else name)
