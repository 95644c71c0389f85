"""`train stage=generate` and `stage=evaluate` on tiny trained runs: GPT and T5 on the real token shards, the
tiny-shakespeare preset shortened to 50 steps, the word-level PTB GPT."""
import contextlib
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from c4prep.cli import main as c4prep_main
from c4prep.manifest import read_manifest
from c4prep.training.checkpoint import load_checkpoint, save_checkpoint
from c4prep.training.cli import main
from c4prep.training.config import load_config
from c4prep.training.data.char_vocabulary import VOCABULARY_FILE as CHAR_VOCABULARY_FILE, CharVocabulary
from c4prep.training.metrics_log import read_metrics
from c4prep.training.stages.data_setup import token_vocabulary
from c4prep.training.stages import generate as generate_stage
from c4prep.training.stages.generate import GENERATIONS_FILE, piece_vocabulary
from c4prep.training.stages.model_setup import model_from_checkpoint

QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.device=cpu"]
PROMPTS = 'generate.prompts=["The company said", "In 2019 the"]'


@pytest.fixture(scope="module")
def t5_run(sample_tokens, tmp_path_factory) -> Path:
    """A 2-step t5_tiny run with objective lengths other than the defaults, validated on its train split."""
    run = tmp_path_factory.mktemp("t5") / "run"
    assert main(["model=t5_tiny", "objective.inputs_length=64", "objective.targets_length=16",
                 f"data.tokens={sample_tokens}", "data.validation_split=train", "trainer.max_steps=2",
                 "trainer.global_batch_size=4", "trainer.micro_batch_size=4", "trainer.eval_batches=1",
                 "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant", f"output_dir={run}", *QUIET]) == 0
    return run


@pytest.fixture(scope="module")
def gpt_run(sample_tokens, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("gpt") / "run"
    assert main(["model=gpt_tiny", "objective=lm", f"data.tokens={sample_tokens}", "data.validation_split=null",
                 "trainer.max_steps=2", "trainer.global_batch_size=4", "trainer.micro_batch_size=4",
                 "optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant", f"output_dir={run}", *QUIET]) == 0
    return run


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory) -> SimpleNamespace:
    """`train experiment=shakespeare_char trainer.max_steps=50` with a tiny model; its run folder and stderr."""
    run, stderr = tmp_path_factory.mktemp("shakespeare") / "run", io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["experiment=shakespeare_char", "trainer.max_steps=50", "model=gpt_tiny", "trainer.eval_batches=2",
                     "trainer.tensorboard=false", f"output_dir={run}"]) == 0
    return SimpleNamespace(run=run, stderr=stderr.getvalue())


def generations(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / GENERATIONS_FILE).read_text(encoding="utf-8").splitlines()]


def generate(run: Path, output: Path, *overrides: str) -> list[dict]:
    assert main(["stage=generate", f"init_from={run}", f"output_dir={output}", *QUIET, *overrides]) == 0
    return generations(output)


def test_the_shakespeare_preset_runs_shortened_with_a_progress_bar(shakespeare):
    assert "50/50" in shakespeare.stderr  # the progress bar
    assert "warmup_steps: 2\n" in (shakespeare.run / "config.yaml").read_text()  # 5% of 50 steps
    losses = [r["metrics"]["loss"] for r in read_metrics(shakespeare.run) if r["split"] == "train"]
    assert len(losses) == 1 and losses[0] < 4.2  # logged at step 50; uniform over 67 characters is 4.2


def test_gpt_greedy_generation_is_the_argmax_continuation(gpt_run, sample_tokens, tmp_path, capsys):
    records = generate(gpt_run, tmp_path, PROMPTS, "generate.greedy=true", "generate.max_tokens=6")
    assert [r["prompt"] for r in records] == ["The company said", "In 2019 the"]
    vocab = token_vocabulary(str(sample_tokens))
    model = model_from_checkpoint(load_checkpoint(gpt_run)).eval()
    for record in records:
        ids = vocab.encode(record["prompt"])
        prompt_length = len(ids)
        with torch.no_grad():
            for _ in range(6):
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        text = vocab.decode(ids)
        assert text == vocab.decode(ids[:prompt_length]) + record["completion"]
    assert f"The company said{records[0]['completion']}" in capsys.readouterr().out


def test_sampling_is_deterministic_for_a_seed(gpt_run, tmp_path):
    settings = [PROMPTS, "generate.num_samples=3", "generate.max_tokens=8", "generate.temperature=2.0",
                "generate.top_k=null", "trainer.micro_batch_size=4"]
    first = generate(gpt_run, tmp_path / "a", *settings)
    assert first == generate(gpt_run, tmp_path / "b", *settings)
    assert [(r["prompt"][:2], r["sample"]) for r in first] == [("Th", 0), ("Th", 1), ("Th", 2), ("In", 0), ("In", 1),
                                                              ("In", 2)]
    assert first != generate(gpt_run, tmp_path / "c", *settings, "seed=1")


def test_t5_answers_prompts_from_a_file_greedily(t5_run, sample_tokens, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The <extra_id_0> said on Monday.\n\nWe went to the <extra_id_0>.\n", encoding="utf-8")
    records = generate(t5_run, tmp_path / "out", f"generate.prompts_file={prompts}", "generate.greedy=true",
                       "generate.max_tokens=5")
    assert [r["prompt"] for r in records] == ["The <extra_id_0> said on Monday.", "We went to the <extra_id_0>."]
    vocab = token_vocabulary(str(sample_tokens))
    model = model_from_checkpoint(load_checkpoint(t5_run)).eval()
    for record in records:
        inputs = torch.tensor([piece_vocabulary(vocab).encode(record["prompt"]) + [vocab.eos_id]])
        assert vocab.sentinel_id(0) in inputs[0].tolist()
        decoded = [model.config.decoder_start_id]
        with torch.no_grad():
            while len(decoded) <= 5 and vocab.eos_id not in decoded:
                decoded.append(int(model(inputs, torch.tensor([decoded]))[0, -1, :vocab.vocab_size].argmax()))
        assert record["completion"] == vocab.decode(decoded[1:])


def test_t5_sampling_draws_real_ids_and_is_deterministic(t5_run, tmp_path):
    settings = [PROMPTS, "generate.num_samples=2", "generate.temperature=3.0", "generate.top_k=null"]
    assert generate(t5_run, tmp_path / "a", *settings) == generate(t5_run, tmp_path / "b", *settings)
    model = model_from_checkpoint(load_checkpoint(t5_run)).eval()
    inputs = torch.randint(3, 900, (8, 12))
    drawn = model.generate(inputs, 12, temperature=50.0, greedy=False, generator=torch.Generator().manual_seed(0))
    assert int(drawn.max()) < model.config.vocab_size < model.config.padded_vocab_size


def test_character_and_word_runs_generate_in_their_vocabulary(shakespeare, ptb_gpt_run, tmp_path, capsys):
    (record,) = generate(shakespeare.run, tmp_path / "chars", 'generate.prompts=["ROMEO:"]', "generate.max_tokens=20")
    assert len(record["completion"]) == 20  # characters: no end of text
    assert main(["stage=generate", f"init_from={shakespeare.run}", 'generate.prompts=["€"]', *QUIET]) == 2
    assert "generate.prompts: '€': characters not in the vocabulary" in capsys.readouterr().err
    (words,) = generate(ptb_gpt_run, tmp_path / "words", 'generate.prompts=["the company"]', "generate.max_tokens=5")
    assert words["prompt"] == "the company" and len(words["completion"].split()) <= 5
    (empty,) = generate(ptb_gpt_run, tmp_path / "empty", 'generate.prompts=[""]', "generate.max_tokens=5")
    assert len(empty["completion"].split()) <= 5  # a word-level run starts every sentence with BOS


def test_a_character_run_keeps_its_characters_and_generates_with_them_when_its_text_is_gone(shakespeare, tmp_path):
    """The run folder's char_vocabulary.json says what its ids mean; generate no longer needs the recorded text."""
    text = Path(load_config(["experiment=shakespeare_char"]).data.text).read_text(encoding="utf-8")
    kept = CharVocabulary.from_json((shakespeare.run / CHAR_VOCABULARY_FILE).read_text(encoding="utf-8"))
    assert kept == CharVocabulary.from_text(text) and kept.vocab_size == 67
    moved = tmp_path / "run"
    shutil.copytree(shakespeare.run, moved)
    config = moved / "config.yaml"
    config.write_text(config.read_text().replace(f"text: {load_config(['experiment=shakespeare_char']).data.text}",
                                                 "text: /no/such/input.txt"))
    assert "/no/such/input.txt" in config.read_text()
    (record,) = generate(moved, tmp_path / "out", 'generate.prompts=["ROMEO:"]', "generate.max_tokens=5")
    assert len(record["completion"]) == 5


def test_a_character_run_is_not_fine_tuned_with_a_sentencepiece_vocabulary(shakespeare, sample_vocab, tmp_path,
                                                                           capsys):
    """Its ids are characters: pieces of the same ids would be other text (accepted when the sizes matched)."""
    assert main(["stage=finetune", "data=yelp_sentiment", f"data.vocab={sample_vocab}", f"init_from={shakespeare.run}",
                 "model=gpt_tiny", f"output_dir={tmp_path}", *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"train: error: init_from={shakespeare.run} was trained on data.kind=char_text, whose ids are its "
                   "own characters or words, not SentencePiece pieces: fine-tune it on data of that kind")


def test_generate_needs_prompts_and_a_gpt_or_t5(gpt_run, tmp_path, capsys):
    for settings, message in [([], "stage=generate needs prompts"),
                              (["generate.temperature=0"], "generate.temperature must be > 0"),
                              (["generate.prompts_file=/nowhere.txt"], "generate.prompts_file=/nowhere.txt is not a "
                                                                       "readable UTF-8 file")]:
        assert main(["stage=generate", f"init_from={gpt_run}", *QUIET, *settings]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not (gpt_run / "generate").exists()
    classifier = tmp_path / "classifier"  # a GPT-1 head on token data: no such run trains, but the stage checks
    classifier.mkdir()
    (classifier / "config.yaml").write_text((gpt_run / "config.yaml").read_text())
    save_checkpoint(classifier, 1, {"step": 1, "model": {}, "model_spec": {"name": "gpt_classifier"}}, keep=1)
    assert main(["stage=generate", f"init_from={classifier}", PROMPTS, *QUIET]) == 2
    assert "stage=generate samples GPT and T5 models" in capsys.readouterr().err


@pytest.mark.parametrize("family, max_tokens, needs", [
    ("t5", 10 ** 6, "T5's decoder position biases for every pair of its positions (2 heads x max_tokens^2 float32)"),
    ("gpt", 10 ** 12, "the ids of 2 prompt(s) and continuation(s), 8 bytes each (a GPT has no length limit of its "
                      "own: it crops its context)")])
def test_a_max_tokens_beyond_the_devices_memory_is_one_line_before_generating(t5_run, gpt_run, family, max_tokens,
                                                                              needs, tmp_path, capsys):
    """T5 built a max_tokens^2 mask up front ("RuntimeError: ... can't allocate memory", exit 1); a GPT allocated
    the ids of every continuation."""
    run = {"t5": t5_run, "gpt": gpt_run}[family]
    assert main(["stage=generate", f"init_from={run}", PROMPTS, f"generate.max_tokens={max_tokens}",
                 f"output_dir={tmp_path / 'out'}", *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"train: error: generate.max_tokens={max_tokens} needs ") and len(err.splitlines()) == 1
    assert f"GiB up front for {needs}, more than the " in err and err.endswith(" tokens could fit): lower it")
    assert not (tmp_path / "out").exists()


def test_the_tokens_that_could_fit_are_the_bound(t5_run, monkeypatch, tmp_path, capsys):
    heads = model_from_checkpoint(load_checkpoint(t5_run)).config.num_heads
    monkeypatch.setattr(generate_stage, "device_memory", lambda device: heads * 12 ** 2 * 4)  # 12 tokens' biases
    assert main(["stage=generate", f"init_from={t5_run}", PROMPTS, "generate.max_tokens=13", *QUIET,
                 f"output_dir={tmp_path / 'over'}"]) == 2
    assert "(at most 12 tokens could fit): lower it" in capsys.readouterr().err
    assert len(generate(t5_run, tmp_path / "within", PROMPTS, "generate.max_tokens=12")) == 2


@pytest.mark.parametrize("setting, shown", [("generate.temperature=0.3", "0.3"), ("generate.top_k=3", "3"),
                                            ("generate.top_k=null", "None")])
def test_a_sampling_setting_does_nothing_with_greedy_decoding(setting, shown, capsys):
    """Greedy decoding ignored them, exit 0."""
    assert main(["stage=generate", "generate.greedy=true", setting, *QUIET]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: {setting.split('=')[0]}={shown} does nothing with generate.greedy=true (it takes the most "
        "likely id; nothing is drawn): remove one of them")
    assert load_config(["generate.greedy=true", "generate.temperature=1.0", "generate.top_k=100"]).generate.greedy


def test_evaluate_scores_the_whole_split_unless_eval_batches_limits_it(t5_run, tmp_path, capsys):
    """trainer.eval_batches was ignored: =1 and =0 gave the same loss."""
    losses = {}
    for limit in (None, "0", "1"):
        given = [] if limit is None else [f"trainer.eval_batches={limit}"]
        assert main(["stage=evaluate", f"init_from={t5_run}", "trainer.micro_batch_size=2", *given, *QUIET,
                     f"output_dir={tmp_path / str(limit)}"]) == 0
        losses[limit] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["validation"]["loss"]
    assert losses[None] == losses["0"] != losses["1"]


def test_evaluate_uses_the_runs_objective_and_writes_next_to_it(t5_run, capsys):
    assert main(["stage=evaluate", f"init_from={t5_run}", *QUIET]) == 0  # no objective or data settings repeated
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["run_dir"] == str(t5_run / "evaluate") and summary["checkpoint_step"] == 2
    (record,) = read_metrics(t5_run / "evaluate")
    assert record["step"] == 2 and 0 < record["metrics"]["loss"] < 20
    evaluated = load_config(["stage=evaluate", f"init_from={t5_run}"])
    assert (evaluated.objective.inputs_length, evaluated.objective.targets_length) == (64, 16)
    assert "stage: pretrain" in (t5_run / "config.yaml").read_text()  # the run's own config is left alone


@pytest.mark.parametrize("stage", [["stage=evaluate"], ["stage=generate", PROMPTS]])
def test_a_model_of_another_family_is_refused(t5_run, gpt_run, stage, tmp_path, capsys):
    """`model=t5_tiny` with a GPT run was ignored (the checkpoint's GPT ran) and recorded in config.yaml as used."""
    for run, model, family, given in ((gpt_run, "t5_tiny", "gpt", "t5"), (t5_run, "gpt_tiny", "t5", "gpt")):
        output = tmp_path / family
        assert main([*stage, f"init_from={run}", f"model={model}", f"output_dir={output}", *QUIET]) == 2
        assert capsys.readouterr().err.strip() == (
            f"train: error: init_from={run} is a {family} checkpoint, but the model settings give a {given} model: the "
            "model comes from init_from, so leave out model= (the run's is used) or give the one it trained with")
        assert not output.exists()


@pytest.mark.parametrize("stage", [["stage=evaluate"], ["stage=generate", PROMPTS]])
def test_a_checkpoint_of_another_family_than_its_runs_record_is_named_so(t5_run, gpt_run, stage, tmp_path, capsys):
    """A T5 checkpoint copied over a GPT run's was refused with 'leave out model=', which no one had given."""
    run = shutil.copytree(gpt_run, tmp_path / "run")
    (checkpoint,) = (run / "checkpoints").glob("step_*.pt")
    shutil.copy(next((t5_run / "checkpoints").glob("step_*.pt")), checkpoint)
    assert main([*stage, f"init_from={run}", f"output_dir={tmp_path / 'out'}", *QUIET]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: init_from={run} holds a t5 model, but its run folder's config.yaml records a gpt one: the "
        "checkpoint is not the run's, or config.yaml was changed; restore the run's files")


def test_continued_pretraining_of_another_family_leaves_no_run_folder(t5_run, sample_tokens, tmp_path, capsys):
    """Refused in one line, but the run folder was made first (config.yaml recording the GPT that never trained)."""
    output = tmp_path / "run"
    assert main(["model=gpt_tiny", "objective=lm", f"data.tokens={sample_tokens}", f"init_from={t5_run}",
                 "trainer.max_steps=1", f"output_dir={output}", *QUIET]) == 2
    assert f"init_from={t5_run} is a t5 checkpoint but the config's model is gpt" in capsys.readouterr().err
    assert not output.exists()


def test_a_setting_the_runs_size_decides_is_named_by_that_size(gpt_run, tmp_path, capsys):
    """The message said the GPT held n_layer 'unset (the default)', though gpt_tiny sets it."""
    assert main(["stage=generate", PROMPTS, f"init_from={gpt_run}", "model.n_layer=6", f"output_dir={tmp_path}",
                 *QUIET]) == 2
    assert (f"init_from={gpt_run} holds a model with n_layer=that of size='gpt_tiny', the model settings give 6"
            in capsys.readouterr().err)


def _swapped(text: str, first: str, second: str) -> str:
    return text.replace(first, "\0").replace(second, first).replace("\0", second)


@pytest.mark.parametrize("kind", ["chars", "words"])
def test_an_edited_run_vocabulary_is_refused_by_generate_and_export(shakespeare, ptb_gpt_run, kind, tmp_path,
                                                                    capsys):
    """Two characters (words) swapped in the kept vocabulary: generate decoded with it, export shipped it, exit 0."""
    source, name = {"chars": (shakespeare.run, CHAR_VOCABULARY_FILE),
                    "words": (ptb_gpt_run, "word_vocabulary.json")}[kind]
    run = shutil.copytree(source, tmp_path / "run")
    kept = run / name
    kept.write_text(_swapped(kept.read_text(encoding="utf-8"), *{"chars": ('"a"', '"e"'),
                                                                 "words": ('"the"', '"of"')}[kind]), encoding="utf-8")
    checkpoint = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    refusal = (f"{kept} is not the file {checkpoint} was trained with (its SHA-256 is not the one the checkpoint "
               "records): restore it")
    assert main(["stage=generate", f"init_from={run}", 'generate.prompts=["the"]', *QUIET]) == 2
    assert capsys.readouterr().err.strip() == f"train: error: {refusal}"
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "hf")])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1] == f"Error: {refusal}"


def test_a_resume_on_other_characters_is_refused_before_it_replaces_the_kept_ones(shakespeare, tmp_path, capsys):
    """The resume rewrote char_vocabulary.json with the new text's characters, then was refused: the run's record of
    what its ids mean was lost."""
    run = shutil.copytree(shakespeare.run, tmp_path / "run")
    kept = (run / CHAR_VOCABULARY_FILE).read_text(encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("a short text of other characters\n" * 50, encoding="utf-8")
    assert main(["experiment=shakespeare_char", "trainer.max_steps=60", "schedule.options.warmup_steps=2",
                 "model=gpt_tiny", f"data.text={other}",
                 "trainer.tensorboard=false", f"output_dir={run}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"train: error: {run} holds a run whose {CHAR_VOCABULARY_FILE} differs from the one this data builds: resume "
        "it on the data it trained on, or give a new output_dir")
    assert (run / CHAR_VOCABULARY_FILE).read_text(encoding="utf-8") == kept


def test_another_size_preset_is_named_by_its_size(gpt_run, tmp_path, capsys):
    """`model=gpt_nano` with a gpt_tiny run said "bias=that of size='gpt_tiny', the model settings give False"."""
    assert main(["stage=generate", PROMPTS, f"init_from={gpt_run}", "model=gpt_nano", f"output_dir={tmp_path}",
                 *QUIET]) == 2
    assert (f"init_from={gpt_run} holds a model with size='gpt_tiny', the model settings give 'gpt_nano'"
            in capsys.readouterr().err)


def test_a_token_run_whose_shards_are_gone_generates_with_its_vocabulary(t5_run, sample_tokens, tmp_path, capsys):
    """Deleting the token shards, their vocabulary kept, left no way to sample the run: the error named only
    `c4prep tokenize`. It now says how, and the vocabulary alone gives the same samples."""
    settings = [PROMPTS, "generate.greedy=true", "generate.max_tokens=5"]
    gone = tmp_path / "deleted-tokens"
    assert main(["stage=generate", f"init_from={t5_run}", f"output_dir={tmp_path / 'x'}", f"data.tokens={gone}",
                 *QUIET, *settings]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "; or give the vocabulary they were tokenized with: data=text_to_text data.vocab=<vocabulary folder>")
    model_file = read_manifest(str(sample_tokens)).extra["vocabulary"]["model"]
    assert generate(t5_run, tmp_path / "vocab", *settings, "data=text_to_text", f"data.vocab={model_file}") == \
        generate(t5_run, tmp_path / "shards", *settings)
