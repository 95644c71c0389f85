"""Diagnostic: how many dev birth places a pretrained CS224N A5 model recalls from its own wiki line.

For each birth_dev.tsv person whose wiki.txt line has "born in " within its first 100 characters (the
corruption's truncation keeps at most 112), the line up to and including "born in " is the prompt; the
greedy continuation counts if it starts with the dev answer. This measures what pretraining memorised, before
any fine-tuning, on the prompts pretraining saw (the QA fine-tune must recall it from the name alone), and again
with the prompt shifted behind one space and behind "Where was " (the QA question's lead): pretraining always sees
a person's line from its first character, so this shows how much the recall depends on that position.

    python benchmarks/a5_fact_recall.py RUN_OR_CHECKPOINT [...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.experiments.cs224n_a5.birth_places import read_birth_places
from c4prep.training.experiments.cs224n_a5.char_corruption import load_char_corpus
from c4prep.training.stages.model_setup import model_from_checkpoint

A5_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cs224n_a5"
PROMPT_END = "born in "
LEADS = {"as in wiki.txt": "", "after ' '": " ", "after 'Where was '": "Where was "}  # text put before the prompt


def recall_prompts(documents: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(wiki prefixes ending in "born in ", dev answers) for the dev people it applies to."""
    by_name: dict[str, str] = {}
    for document in documents:
        by_name.setdefault(document.split(".")[0].strip(), document)
    prompts, answers = [], []
    for question, place in read_birth_places(A5_DATA / "birth_dev.tsv"):
        document = by_name.get(question.removeprefix("Where was ").removesuffix(" born?"), "")
        cut = document.find(PROMPT_END)
        if 0 <= cut <= 100 - len(PROMPT_END):
            prompts.append(document[:cut + len(PROMPT_END)])
            answers.append(place)
    return prompts, answers


def main(paths: list[str]) -> None:
    torch.set_num_threads(2)
    documents, vocab = load_char_corpus(A5_DATA / "wiki.txt")
    prompts, answers = recall_prompts(documents)
    encoded = {name: [torch.from_numpy(vocab.encode(lead + prompt).astype("int64")) for prompt in prompts]
               for name, lead in LEADS.items()}
    for path in paths:
        model = model_from_checkpoint(load_checkpoint(path)).eval()
        recalled = []
        for name in LEADS:
            outputs = model.generate(encoded[name], max_new_tokens=max(map(len, answers)) + 1)
            hits = sum(vocab.decode(output.numpy()).startswith(answer) for output, answer in zip(outputs, answers))
            recalled.append(f"{name} {hits}/{len(answers)} = {hits / len(answers):.1%}")
        print(f"{path}: recalled, prompt " + "; ".join(recalled))


if __name__ == "__main__":
    main(sys.argv[1:])
