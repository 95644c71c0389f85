"""GPT-1 task fine-tuning from TSV/JSONL files (training/experiments/gpt1/task_files.py, ``data=gpt1_*``): the reader
on files in the real datasets' formats, and ``train stage=finetune`` end to end for entailment, similarity and
multiple choice."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from c4prep.training.experiments.gpt1.input_transforms import FinetuneDataError, SpecialTokens
from c4prep.training.experiments.gpt1.task_files import TaskExample, class_count, read_task_file, task_rows
from c4prep.training.metrics_log import read_metrics
from c4prep.training.stages.data_setup import load_vocabulary
from conftest import TRAIN_QUIET

NLI_LABELS = ["entailment", "neutral", "contradiction"]
SNLI_COLUMNS = {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label"}
SNLI_OVERRIDES = [f"data.columns.{field}={name}" for field, name in SNLI_COLUMNS.items()]
SNLI = [  # snli_1.0_dev.jsonl's layout (parse fields left out)
    ("Two women are embracing while holding to go packages.",
     "The sisters are hugging goodbye while holding to go packages after just eating lunch.", "neutral"),
    ("Two women are embracing while holding to go packages.", "Two woman are holding packages.", "entailment"),
    ("Two women are embracing while holding to go packages.", "The men are fighting outside a deli.",
     "contradiction"),
    ("Two young children in blue jerseys, one with the number 9 and one with the number 2 are standing on wooden "
     "steps in a bathroom and washing their hands in a sink.", "Two kids in numbered jerseys wash their hands.",
     "entailment"),
]
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MRPC = [  # msr_paraphrase_train.txt's layout: TSV, quotes are plain characters
    '1\t702876\t702977\tAmrozi accused his brother , whom he called " the witness " , of deliberately distorting his '
    'evidence .\tReferring to him as only " the witness " , Amrozi accused his brother of deliberately distorting '
    'his evidence .',
    "0\t2108705\t2108831\tYucaipa owned Dominick 's before selling the chain to Safeway in 1998 for $ 2.5 billion .\t"
    "Yucaipa bought Dominick 's in 1995 for $ 693 million and sold it to Safeway for $ 1.8 billion in 1998 .",
    "1\t1330381\t1330521\tThey had published an advertisement on the Internet on June 10 , offering the cargo for "
    "sale , he added .\tOn June 10 , the ship 's owners had published an advertisement on the Internet , offering "
    "the explosives for sale .",
    "0\t3344667\t3344648\tAround 0335 GMT , Tab shares were up 19 cents , or 4.4 % , at A $ 4.56 , having earlier "
    "set a record high of A $ 4.57 .\tTab shares jumped 20 cents , or 4.6 % , to set a record closing high at A $ "
    "4.57 .",
]
MRPC_OVERRIDES = ["data.columns.sentence1='#1 String'", "data.columns.sentence2='#2 String'",
                  "data.columns.label=Quality"]
ROC_HEADER = ("InputStoryid\tInputSentence1\tInputSentence2\tInputSentence3\tInputSentence4\t"
              "RandomFifthSentenceQuiz1\tRandomFifthSentenceQuiz2\tAnswerRightEnding")
ROC = [  # the ROCStories cloze test's columns (the released CSV, tab-separated)
    "b929f263\tRick grew up in a troubled household.\tHe never found good support in family.\tHe turned to gangs."
    "\tIt wasn't long before Rick got shot.\tRick ended up in jail.\tRick went to college.\t1",
    "7cbbc0af\tLaverne needs to prepare something for her friend's party.\tShe decides to bake cookies.\tShe mixes "
    "the dough.\tShe bakes them for twenty minutes.\tLaverne doesn't go to the party.\tLaverne brings the cookies."
    "\t2",
    "1f2a3b4c\tSam bought a new puppy.\tThe puppy chewed his shoes.\tSam bought the puppy a toy.\tThe puppy loved "
    "the toy.\tSam's shoes were safe after that.\tSam hated the toy.\t1",
]
ROC_OVERRIDES = ["data.columns.context=[InputSentence1,InputSentence2,InputSentence3,InputSentence4]",
                 "data.columns.answers=[RandomFifthSentenceQuiz1,RandomFifthSentenceQuiz2]",
                 "data.columns.label=AnswerRightEnding", "data.labels=[1,2]"]
SWAG = [  # SWAG-style: a context and four endings, label = the right ending's index
    {"context": "A man is sitting on a roof. He", "answers": ["is using wrap to wrap a pair of skis.",
     "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
     "label": 3},
    {"context": "A woman is outside with a bucket and a dog. The dog", "answers": ["runs away.",
     "is running around trying to avoid a bath.", "gets into the bath tub.", "sits on the grass."],
     "label": 1},
]
TRAIN = ["optimizer=adamw", "optimizer.lr=1e-3", "schedule=constant", "trainer.max_steps=2",
         "trainer.global_batch_size=4", "trainer.micro_batch_size=4", "data.max_length=32", *TRAIN_QUIET]


def snli_jsonl(path: Path, rows=SNLI) -> Path:
    path.write_text("".join(json.dumps({"annotator_labels": [label], "captionID": f"{k}.jpg#0", "gold_label": label,
                                        "pairID": f"{k}.jpg#0r1n", "sentence1": premise, "sentence2": hypothesis})
                            + "\n" for k, (premise, hypothesis, label) in enumerate(rows)), encoding="utf-8")
    return path


def tsv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def swag_jsonl_gz(path: Path) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in SWAG)
    return path


# --- the reader ---

def test_snli_jsonl_with_mapped_columns_and_string_labels(tmp_path):
    examples = read_task_file(str(snli_jsonl(tmp_path / "snli.jsonl")), "entailment", NLI_LABELS, SNLI_COLUMNS)
    assert examples[0] == TaskExample((SNLI[0][0], SNLI[0][1]), 1)
    assert [e.label for e in examples] == [1, 0, 2, 0]
    assert class_count("entailment", examples, NLI_LABELS) == 3


def test_mrpc_tsv_keeps_quotes_and_reads_integer_labels(tmp_path):
    columns = {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"}
    examples = read_task_file(str(tsv(tmp_path / "mrpc.tsv", MRPC_HEADER, MRPC)), "similarity", columns=columns)
    assert examples[0].texts[0].startswith('Amrozi accused his brother , whom he called " the witness "')
    assert [e.label for e in examples] == [1, 0, 1, 0] and class_count("similarity", examples) == 2


def test_rocstories_columns_join_into_the_context_and_labels_map_to_answer_indices(tmp_path):
    columns = {"context": [f"InputSentence{k}" for k in range(1, 5)],
               "answers": ["RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2"], "label": "AnswerRightEnding"}
    examples = read_task_file(str(tsv(tmp_path / "roc.tsv", ROC_HEADER, ROC)), "multiple_choice", ["1", "2"], columns)
    assert examples[0].texts == ("Rick grew up in a troubled household. He never found good support in family. He "
                                 "turned to gangs. It wasn't long before Rick got shot.", "Rick ended up in jail.",
                                 "Rick went to college.")
    assert [e.label for e in examples] == [0, 1, 0] and class_count("multiple_choice", examples) == 2


def test_multiple_choice_defaults_jsonl_gz_list_and_tsv_numbered_columns(tmp_path):
    from_jsonl = read_task_file(str(swag_jsonl_gz(tmp_path / "swag.jsonl.gz")), "multiple_choice")
    rows = [f"{r['context']}\t" + "\t".join(r["answers"]) + f"\t{r['label']}" for r in SWAG]
    from_tsv = read_task_file(str(tsv(tmp_path / "swag.tsv", "context\tanswer0\tanswer1\tanswer2\tanswer3\tlabel",
                                      rows)), "multiple_choice")
    assert [(e.texts, e.label) for e in from_jsonl] == [(e.texts, e.label) for e in from_tsv]
    assert len(from_jsonl[0].texts) == 5 and from_jsonl[1].label == 1


@pytest.mark.parametrize(("name", "content", "task", "message"), [
    ("a.jsonl", '{"premise": "p", "hypothesis": "h", "label": 0}\n{"premise": "p", "label": 1}\n', "entailment",
     "a.jsonl line 2: missing key 'hypothesis'"),
    ("a.jsonl", '{"premise": "p", "hypothesis": "h", "label": 0}\n\n[1, 2]\n', "entailment",
     "a.jsonl line 3: expected a JSON object, got list"),
    ("a.jsonl", '{"premise": "p", "hypothesis": "h",\n', "entailment", "a.jsonl line 1: invalid JSON"),
    ("a.jsonl", '{"premise": "p", "hypothesis": 3, "label": 0}\n', "entailment", "'hypothesis' must be a string"),
    ("a.tsv", "sentence1\tlabel\na\t1\n", "similarity", "a.tsv line 1: missing column 'sentence2'"),
    ("a.tsv", "sentence1\tsentence2\tlabel\na\tb\n", "similarity", "a.tsv line 2: expected 3 tab-separated fields"),
    ("a.tsv", "text\tlabel\nfine\tpositive\n", "classification", "label 'positive' is not a non-negative integer"),
    ("a.tsv", "context\tanswer0\tanswer1\tlabel\nc\ta\tb\t2\n", "multiple_choice", "label 2 is not the index"),
    ("a.tsv", "context\tanswer1\tlabel\nc\ta\t0\n", "multiple_choice", "missing answer columns answer0, answer1"),
    ("a.jsonl", '{"context": "c", "answers": ["a", "b"], "label": 0}\n{"context": "c", "answers": ["a"], '
     '"label": 0}\n', "multiple_choice", "a.jsonl line 2: 1 answers, but the first example has 2"),
    ("a.csv", "text,label\n", "classification", "a.csv: unknown extension"),
    ("a.tsv", "text\tlabel\n", "classification", "a.tsv: no examples"),
])
def test_bad_lines_name_the_file_and_line(name, content, task, message, tmp_path):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(FinetuneDataError, match=message):
        read_task_file(str(tmp_path / name), task)


def test_labels_outside_data_labels_and_missing_files_are_refused(tmp_path):
    path = snli_jsonl(tmp_path / "snli.jsonl", [*SNLI, ("A man.", "A woman.", "-")])  # SNLI's no-consensus label
    with pytest.raises(FinetuneDataError, match=r"snli.jsonl line 5: label '-' is not one of data.labels"):
        read_task_file(str(path), "entailment", NLI_LABELS, SNLI_COLUMNS)
    with pytest.raises(FinetuneDataError, match="no such file"):
        read_task_file(str(tmp_path / "none.jsonl"), "entailment")
    with pytest.raises(FinetuneDataError, match=r"columns.text: not a field of entailment"):
        read_task_file(str(path), "entailment", columns={"text": "sentence1"})


def test_rows_have_one_sequence_per_order_or_answer(sample_vocab, tmp_path):
    vocab = load_vocabulary(str(sample_vocab))
    special = SpecialTokens.after(vocab.vocab_size)
    mrpc = read_task_file(str(tsv(tmp_path / "mrpc.tsv", MRPC_HEADER, MRPC)), "similarity",
                          columns={"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"})
    swag = read_task_file(str(swag_jsonl_gz(tmp_path / "swag.jsonl.gz")), "multiple_choice")
    snli = read_task_file(str(snli_jsonl(tmp_path / "snli.jsonl")), "entailment", NLI_LABELS, SNLI_COLUMNS)
    for task, examples, count in (("similarity", mrpc, 2), ("multiple_choice", swag, 4), ("entailment", snli, 1)):
        row = task_rows(task, examples, vocab, special, 32)(0, 0)
        assert row["input_tokens"].shape == (count, 32) and row["label"] == examples[0].label
        assert (row["input_tokens"][np.arange(count), row["extract_positions"]] == special.extract).all()
    first, swapped = task_rows("similarity", mrpc, vocab, special, 32)(0, 0)["input_tokens"]
    assert sorted(first.tolist()) == sorted(swapped.tolist()) and first.tolist() != swapped.tolist()


def test_rows_count_the_examples_with_a_text_cut_to_fit(sample_vocab):
    vocab = load_vocabulary(str(sample_vocab))
    special = SpecialTokens.after(vocab.vocab_size)
    long, short = "the company said " * 10, "the company"
    assert len(vocab.encode(long)) > 20 and len(vocab.encode(short)) <= 2
    texts = [TaskExample((long,), 0), TaskExample((short,), 1), TaskExample((long,), 1)]
    assert task_rows("classification", texts, vocab, special, 8).truncated == 2  # 6 tokens of text kept
    assert task_rows("classification", texts, vocab, special, 64).truncated == 0
    pairs = [TaskExample((short, long), 0), TaskExample((short, short), 1)]
    assert task_rows("entailment", pairs, vocab, special, 16).truncated == 1  # 6 tokens of each part kept


# --- train stage=finetune data=gpt1_* ---

@pytest.fixture(scope="module")
def gpt_run(sample_tokens, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("gpt1_tasks") / "lm"
    assert main(["model=gpt_tiny", "objective=lm", f"data.tokens={sample_tokens}", "data.validation_split=null",
                 "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant", "trainer.max_steps=2",
                 "trainer.global_batch_size=4", "trainer.micro_batch_size=4", f"output_dir={run_dir}",
                 *TRAIN_QUIET]) == 0
    return run_dir


def finetune(config: str, train: Path, validation: Path, overrides: list[str], vocab: Path, init_from: Path,
             run_dir: Path, capsys) -> dict:
    assert main(["stage=finetune", f"data={config}", f"data.train={train}", f"data.validation={validation}",
                 f"data.vocab={vocab}", f"init_from={init_from}", *overrides, f"output_dir={run_dir}", *TRAIN]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (validation_record,) = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "validation"]
    for values in (summary["validation"], validation_record["metrics"]):
        assert np.isfinite(values["loss"]) and 0.0 <= values["accuracy"] <= 1.0
    return load_checkpoint(run_dir)["model_spec"]


def test_entailment_finetunes_on_snli_jsonl(gpt_run, sample_vocab, tmp_path, capsys, caplog):
    path = snli_jsonl(tmp_path / "snli.jsonl")
    spec = finetune("gpt1_entailment", path, path, SNLI_OVERRIDES, sample_vocab, gpt_run, tmp_path / "run", capsys)
    assert (spec["name"], spec["num_classes"], spec["reduce"]) == ("gpt_classifier", 3, "sum")
    for split in ("training", "validation"):  # 14 tokens of each part kept: cut silently before
        assert f"{len(SNLI)} of {len(SNLI)} {split} examples had a text cut to fit data.max_length=32" in caplog.text


def test_labels_that_leave_class_0_empty_are_warned_about(gpt_run, sample_vocab, tmp_path, capsys, caplog):
    """Labels 1 and 2 built a 3-class classifier without a word."""
    path = tsv(tmp_path / "reviews.tsv", "text\tlabel", ["good food\t1", "bad food\t2", "great place\t1",
                                                         "awful service\t2"])
    spec = finetune("gpt1_classification", path, path, [], sample_vocab, gpt_run, tmp_path / "run", capsys)
    assert spec["num_classes"] == 3
    assert ("data.train has no example of class 0 of 0..2: integer labels are class indices from 0 (for other "
            "values, list them in order in data.labels, e.g. data.labels=[1,2])") in caplog.text
    caplog.clear()
    spec = finetune("gpt1_classification", path, path, ["data.labels=[1,2]"], sample_vocab, gpt_run,
                    tmp_path / "labels", capsys)
    assert spec["num_classes"] == 2 and "has no example of class" not in caplog.text


def test_similarity_finetunes_on_mrpc_tsv(gpt_run, sample_vocab, tmp_path, capsys):
    path = tsv(tmp_path / "mrpc.tsv", MRPC_HEADER, MRPC)
    spec = finetune("gpt1_similarity", path, path, MRPC_OVERRIDES, sample_vocab, gpt_run, tmp_path / "run", capsys)
    assert (spec["num_classes"], spec["reduce"]) == (2, "sum")


@pytest.mark.parametrize("source", ["rocstories_tsv", "swag_jsonl_gz"])
def test_multiple_choice_finetunes_with_one_score_per_answer(source, gpt_run, sample_vocab, tmp_path, capsys):
    if source == "rocstories_tsv":
        path, overrides, answers = tsv(tmp_path / "roc.tsv", ROC_HEADER, ROC), ROC_OVERRIDES, 2
    else:
        path, overrides, answers = swag_jsonl_gz(tmp_path / "swag.jsonl.gz"), [], 4
    spec = finetune("gpt1_multiple_choice", path, path, overrides, sample_vocab, gpt_run, tmp_path / "run", capsys)
    assert (spec["num_classes"], spec["reduce"]) == (answers, "choices")


@pytest.mark.parametrize(("config", "content", "overrides", "message"), [
    ("gpt1_entailment", None, [], "data.train is not set: pass data.train=<file>"),
    ("gpt1_entailment", "snli", [], "data.train: {train} line 1: missing key 'premise'"),
    ("gpt1_entailment", "snli+-", SNLI_OVERRIDES, "data.train: {train} line 5: label '-' is not one of data.labels"),
    ("gpt1_similarity", "mrpc", ["data.columns.sentence1='#1 String'", "data.columns.sentence2=String2"],
     "data.train: {train} line 1: missing column 'String2'"),
    ("gpt1_multiple_choice", "mrpc", ["+data.columns.premise=x"],
     "data.columns.premise: not a field of multiple_choice (context, answers, label)"),
])
def test_bad_task_data_exits_2_with_one_line(config, content, overrides, message, tmp_path, capsys):
    train = {None: None, "snli": lambda: snli_jsonl(tmp_path / "t.jsonl"),
             "snli+-": lambda: snli_jsonl(tmp_path / "t.jsonl", [*SNLI, ("A man.", "A woman.", "-")]),
             "mrpc": lambda: tsv(tmp_path / "t.tsv", MRPC_HEADER, MRPC)}[content]
    path = train() if train else None
    args = [f"data.train={path}"] if path else []
    assert main(["stage=finetune", f"data={config}", *args, *overrides, f"output_dir={tmp_path / 'run'}",
                 *TRAIN_QUIET]) == 2
    err = capsys.readouterr().err
    assert err.startswith("train: ") and err.count("\n") == 1 and message.format(train=path) in err


def test_sequences_longer_than_the_model_are_refused(gpt_run, sample_vocab, tmp_path, capsys):
    path = tsv(tmp_path / "mrpc.tsv", MRPC_HEADER, MRPC)
    assert main(["stage=finetune", "data=gpt1_similarity", f"data.train={path}", f"data.vocab={sample_vocab}",
                 f"init_from={gpt_run}", *MRPC_OVERRIDES, f"output_dir={tmp_path / 'run'}", *TRAIN,
                 "data.max_length=65"]) == 2
    assert "data.max_length=65 exceeds the model's 64 positions" in capsys.readouterr().err
