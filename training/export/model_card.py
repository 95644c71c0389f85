"""The exported folder's ``README.md``: a model card written from the run (what it is, how to load it, the data's
lineage, the steps, the final metrics and the run's config)."""
from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from c4prep import __version__

from .run_source import TrainedRun

USAGE = {
    "T5ForConditionalGeneration": """from transformers import AutoTokenizer, T5ForConditionalGeneration

tokenizer = AutoTokenizer.from_pretrained("{path}")
model = T5ForConditionalGeneration.from_pretrained("{path}")
inputs = tokenizer("The <extra_id_0> walks in <extra_id_1> park", return_tensors="pt")
print(tokenizer.decode(model.generate(**inputs, max_new_tokens=20)[0]))""",
    "GPT2LMHeadModel": """from transformers import AutoTokenizer, GPT2LMHeadModel

tokenizer = AutoTokenizer.from_pretrained("{path}")
model = GPT2LMHeadModel.from_pretrained("{path}")
inputs = tokenizer("the", return_tensors="pt")
print(tokenizer.decode(model.generate(**inputs, max_new_tokens=20, do_sample=True)[0]))""",
    "AdaVAE": """from c4prep.training.export.adavae import adavae_from_export

model = adavae_from_export("{path}")  # or adavae_from_export("{path}", backbone="<GPT run or HF GPT-2 folder>")""",
}


def lineage_lines(lineage: dict[str, Any]) -> list[str]:
    """Token shards -> the corpus they were tokenized from and the vocabulary -> the corpora it was trained on; the
    text of a character vocabulary; an AdaVAE's backbone."""
    lines = []
    tokens = lineage.get("tokens")
    if tokens:
        lines.append(f"- Token shards `{tokens['uri']}`, manifest fingerprint `{tokens['fingerprint']}`")
        source = tokens.get("source") or {}
        if source:
            lines.append(f"  - tokenized from the corpus `{source.get('uri')}`, manifest fingerprint "
                         f"`{source.get('fingerprint')}`")
    vocabulary = lineage.get("vocabulary")
    if vocabulary:
        indent = "  " if tokens else ""
        lines.append(f"{indent}- Vocabulary `{vocabulary['uri']}`, SHA-256 `{vocabulary['sha256']}`")
        lines += [f"{indent}  - trained on `{s.get('uri')}` ({'/'.join(s.get('splits') or [])}), manifest fingerprint "
                  f"`{s.get('fingerprint')}`, {s.get('sentences_used')} sentences" for s in vocabulary["sources"]]
    text = lineage.get("text")
    if text:
        lines.append(f"- Characters of `{text['path']}`, SHA-256 `{text['sha256']}`")
    characters = lineage.get("characters")
    if characters:
        lines.append(f"- Characters as the run kept them, `{characters['path']}`, SHA-256 `{characters['sha256']}`")
    backbone = lineage.get("backbone")
    if backbone:
        lines.append(f"- Backbone `{backbone['source']}`, frozen weights SHA-256 `{backbone['frozen_sha256']}`")
    return lines or ["- The run's data settings are in the config below."]


def final_metrics(records: list[dict[str, Any]]) -> list[str]:
    """A table row per split with that split's last record."""
    last: dict[str, dict[str, Any]] = {}
    for record in records:
        last[record.get("split", "train")] = record
    if not last:
        return ["No metrics were recorded (`metrics.jsonl` is missing)."]
    rows = ["| split | step | metrics |", "|---|---|---|"]
    for split, record in last.items():
        values = ", ".join(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                           for name, value in record.get("metrics", {}).items())
        rows.append(f"| {split} | {record.get('step')} | {values} |")
    return rows


def model_card(run: TrainedRun, architecture: str, files: list[str], lineage: dict[str, Any],
               parameters: int) -> str:
    """The card's Markdown (a Hub front matter first)."""
    tags = ["c4prep", run.family, "transformers" if architecture != "AdaVAE" else "safetensors"]
    config = OmegaConf.to_yaml(OmegaConf.create(run.config)) if run.config else "# no config.yaml in the run folder\n"
    usage = USAGE[architecture].format(path="<this folder>")
    lines = [
        "---", "library_name: " + ("transformers" if architecture != "AdaVAE" else "c4prep"),
        "tags:", *[f"- {tag}" for tag in tags], "---", "",
        f"# {run.folder.name}", "",
        f"A {run.family} model ({architecture}, {parameters:,} parameters) trained with c4prep and exported by "
        f"c4prep {__version__} from `{run.checkpoint}` at step {run.state['step']}.", "",
        "Files: " + ", ".join(f"`{name}`" for name in files) + ".", "",
        "## Use", "", "```python", usage, "```", "",
        "## Data lineage", "", *lineage_lines(lineage), "",
        "## Training", "", f"{run.state['step']} optimizer steps; the final metrics of each split:", "",
        *final_metrics(run.metrics), "",
        "## Config", "", "The run's `config.yaml`:", "", "```yaml", config.rstrip("\n"), "```", "",
    ]
    return "\n".join(lines)
