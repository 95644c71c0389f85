"""AdaVAE around a local Hugging Face GPT-2 directory, through the same stages as the word-level GPT: a small random
GPT-2 with a byte-level BPE trained offline on real PTB lines -> finetune -> evaluate (per-word PPL over whitespace
words, per-token PPL over BPE tokens) -> generate; the run folder keeps a copy of the tokenizer."""
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.cli import main
from c4prep.training.experiments.adavae.gpt2_tokenizer import TOKENIZER_DIR, GPT2TokenizerVocabulary
from c4prep.training.data.sentence_files import SentenceDataError
from c4prep.training.metrics_log import read_metrics
from c4prep.training.models.gpt_hf import gpt_from_hf_directory
from c4prep.training.experiments.adavae.stages import _posterior_means
from c4prep.training.stages.model_setup import model_from_checkpoint
from omegaconf import OmegaConf

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
transformers.logging.set_verbosity_error()

END_OF_TEXT = "<|endoftext|>"
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.num_workers=0", "trainer.log_every=1",
         "trainer.device=cpu"]


@pytest.fixture(scope="module")
def gpt2_dir(shared_data, tmp_path_factory) -> Path:
    """A random 2 x 32 GPT-2 (128 positions) saved with a 1,000-id byte-level BPE trained on 3,000 PTB train lines;
    ``<|endoftext|>`` is the last id, as in GPT-2."""
    directory = tmp_path_factory.mktemp("gpt2")
    lines = (shared_data / "ptb" / "train.txt").read_text().splitlines()[:3000]
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([" " + line.strip() for line in lines], vocab_size=1000, min_frequency=2,
                            special_tokens=[END_OF_TEXT], show_progress=False)
    bpe.save_model(str(directory))
    ids = json.loads((directory / "vocab.json").read_text())  # <|endoftext|> trained as id 0: move it last
    order = sorted(ids, key=lambda token: (token == END_OF_TEXT, ids[token]))
    (directory / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(order)}))
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=128, vocab_size=len(order))
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def ptb_small(shared_data, tmp_path_factory) -> dict[str, Path]:
    """The first 100 / 20 / 25 lines of PTB train / valid / test."""
    folder = tmp_path_factory.mktemp("ptb")
    for split, count in (("train", 100), ("valid", 20), ("test", 25)):
        lines = (shared_data / "ptb" / f"{split}.txt").read_text().splitlines()[:count]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return {split: folder / f"{split}.txt" for split in ("train", "valid", "test")}


def data_args(ptb_small: dict[str, Path], test: Path | None = None) -> list[str]:
    return [f"data.train={ptb_small['train']}", f"data.validation={ptb_small['valid']}",
            f"data.test={test or ptb_small['test']}"]


@pytest.fixture(scope="module")
def vae_run(gpt2_dir, ptb_small, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("vae") / "adavae"
    assert main(["experiment=adavae_ptb", f"init_from={gpt2_dir}", "model.latent_size=8", "model.adapter_size=8",
                 "trainer.max_steps=4", "trainer.eval_every=2", "trainer.global_batch_size=16",
                 "trainer.micro_batch_size=8", "schedule.options.warmup_steps=1", *data_args(ptb_small),
                 f"output_dir={run_dir}", *QUIET]) == 0
    return run_dir


def test_the_tokenizer_is_laid_out_as_adavae_and_round_trips_real_lines(gpt2_dir, shared_data, tmp_path):
    vocab = GPT2TokenizerVocabulary.load(gpt2_dir)
    assert vocab.vocab_size == 1000 and vocab.bos_id == vocab.eos_id == vocab.pad_id == 999
    lines = [line.strip() for line in (shared_data / "ptb" / "test.txt").read_text().splitlines()[:200]]
    assert all(vocab.decode(vocab.encode(line)) == line for line in lines)
    assert sum(map(len, map(vocab.encode, lines))) > 1.5 * sum(len(line.split()) for line in lines)  # subwords
    assert vocab.eos_id not in vocab.encode(f"the {END_OF_TEXT} end")  # the special's text is ordinary text
    assert vocab.decode([*vocab.encode("the end"), vocab.eos_id, *vocab.encode("more")]) == "the end"
    with pytest.raises(SentenceDataError, match=r"token id 1000 is outside the tokenizer's \[0, 1000\)"):
        vocab.decode([1000])
    vocab.save(tmp_path)  # the same files with transformers 4 and 5 (5's save_pretrained writes tokenizer.json only)
    assert all((tmp_path / TOKENIZER_DIR / name).is_file() for name in ("tokenizer.json", "vocab.json", "merges.txt"))
    copy = GPT2TokenizerVocabulary.load(tmp_path)
    assert copy.vocab_size == 1000 and all(copy.encode(line) == vocab.encode(line) for line in lines)
    cleanup = tmp_path / "cleanup"  # a config asking for clean-up (4.x would decode "do n't" as "don't") is ignored
    cleanup.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (cleanup / name).write_bytes((gpt2_dir / name).read_bytes())
    (cleanup / "tokenizer_config.json").write_text(json.dumps({"clean_up_tokenization_spaces": True}))
    assert GPT2TokenizerVocabulary.load(cleanup).decode(vocab.encode("i do n't know .")) == "i do n't know ."
    with pytest.raises(SentenceDataError, match="no GPT-2 tokenizer directory at /no/such/gpt2"):
        GPT2TokenizerVocabulary.load("/no/such/gpt2")
    (tmp_path / "empty").mkdir()  # transformers 5 alone would build a tokenizer of <|endoftext|> only from it
    with pytest.raises(SentenceDataError, match="cannot load a GPT-2 tokenizer from .*empty: it needs vocab.json"):
        GPT2TokenizerVocabulary.load(tmp_path / "empty")
    (cleanup / "merges.txt").unlink()
    with pytest.raises(SentenceDataError, match="cannot load a GPT-2 tokenizer from .*cleanup: it needs vocab.json"):
        GPT2TokenizerVocabulary.load(cleanup)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "vocab.json").write_text("{")
    (tmp_path / "broken" / "merges.txt").write_text("")
    with pytest.raises(SentenceDataError, match="cannot load a GPT-2 tokenizer from .*broken: ") as error:
        GPT2TokenizerVocabulary.load(tmp_path / "broken")
    assert "\n" not in str(error.value)


def test_adavae_trains_around_the_gpt2_and_keeps_it_frozen(vae_run, gpt2_dir):
    train = [r["metrics"] for r in read_metrics(vae_run / "metrics.jsonl") if r["split"] == "train"]
    assert len(train) == 4 and all(math.isfinite(m["loss"]) for m in train)
    state = load_checkpoint(vae_run)
    assert state["model_spec"]["vocab_size"] == 1000
    assert {k: state["model_spec"]["backbone"][k] for k in ("n_layer", "block_size", "activation")} == {
        "n_layer": 2, "block_size": 128, "activation": "gelu_tanh"}
    gpt2 = gpt_from_hf_directory(gpt2_dir).state_dict()
    norms = {name for name in gpt2 if name.split(".")[-2].startswith("ln")}
    frozen = [name for name in gpt2 if name not in norms]
    assert frozen and all(state["model"][f"backbone.{name}"].equal(gpt2[name]) for name in frozen)
    assert any(not state["model"][f"backbone.{name}"].equal(gpt2[name]) for name in norms)
    assert (vae_run / TOKENIZER_DIR / "vocab.json").is_file() and not (vae_run / "word_vocabulary.json").exists()


def test_per_word_ppl_counts_whitespace_words_and_per_token_ppl_bpe_tokens(vae_run, gpt2_dir, ptb_small, tmp_path):
    assert main(["experiment=adavae_ptb", "stage=evaluate", f"init_from={vae_run}", "evaluate.iw_samples=4",
                 "evaluate.iw_chunk=2", "trainer.micro_batch_size=8", *data_args(ptb_small),
                 f"output_dir={tmp_path}", *QUIET]) == 0
    result = json.loads((tmp_path / "evaluation.json").read_text())
    lines = ptb_small["test"].read_text().splitlines()
    vocab = GPT2TokenizerVocabulary.load(gpt2_dir)
    n_words, n_tokens = sum(len(line.split()) for line in lines), sum(len(vocab.encode(line.strip())) + 1
                                                                     for line in lines)
    assert (result["n_sentences"], result["n_words"], result["n_tokens"]) == (25, n_words, n_tokens)
    assert n_tokens > 1.5 * (n_words + 25)
    total_nll = result["nll"] * 25
    assert result["ppl_word"] == pytest.approx(math.exp(total_nll / (n_words + 25)))
    assert result["ppl_token"] == pytest.approx(math.exp(total_nll / n_tokens))
    assert result["ppl_token"] < result["ppl_word"]


def test_generation_decodes_text_and_encodes_with_bos_unmasked(vae_run, ptb_small, tmp_path, capsys):
    assert main(["experiment=adavae_ptb", "stage=generate", f"init_from={vae_run}", "generate.max_tokens=8",
                 "generate.interpolation_steps=2", *data_args(ptb_small), f"output_dir={tmp_path}",
                 *QUIET]) == 0
    result = json.loads((tmp_path / "generation.json").read_text())
    assert len(result["interpolation"]) == 4 and len(result["prior"]) == 5 and isinstance(result["analogy"], str)
    assert all(isinstance(s, str) and len(s.split()) <= 8 for s in result["interpolation"] + result["prior"])
    assert "interpolation (A -> B):" in capsys.readouterr().out
    model, vocab = model_from_checkpoint(load_checkpoint(vae_run)).eval(), GPT2TokenizerVocabulary.load(vae_run)
    short, longer = "the end", ptb_small["test"].read_text().splitlines()[1].strip()
    data = OmegaConf.create({"test": str(ptb_small["test"]), "max_words": 64})
    means = _posterior_means(model, vocab, data, [short, longer], torch.device("cpu"))
    alone = torch.tensor([[vocab.bos_id, *vocab.encode(short)]])
    with torch.no_grad():  # BOS (= the pad id) is attended, the padding after "the end" is not
        expected, _ = model.encode(alone, torch.ones_like(alone, dtype=torch.bool))
    torch.testing.assert_close(means[:1], expected, atol=1e-5, rtol=1e-5)


def test_too_long_sentences_and_missing_tokenizers_are_one_line_errors(vae_run, gpt2_dir, ptb_small, tmp_path,
                                                                        capsys):
    long_test = tmp_path / "long.txt"
    long_test.write_text("the end\n" + " ".join(["zyzzyva-quux"] * 60) + "\n")
    assert main(["experiment=adavae_ptb", "stage=evaluate", f"init_from={vae_run}", "evaluate.iw_samples=2",
                 *data_args(ptb_small, long_test), f"output_dir={tmp_path / 'eval'}", *QUIET]) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train: error:")]
    assert "data.test: sentence 2 needs" in error and "more than the rows' 128" in error
    weights_only = tmp_path / "weights_only"
    transformers.GPT2LMHeadModel.from_pretrained(gpt2_dir).save_pretrained(weights_only)
    assert main(["experiment=adavae_ptb", f"init_from={weights_only}", "trainer.max_steps=1", *data_args(ptb_small),
                 f"output_dir={tmp_path / 'run'}", *QUIET]) == 2
    assert "cannot load a GPT-2 tokenizer" in capsys.readouterr().err


def test_a_word_run_starting_over_a_gpt2_run_and_a_refused_resume_leave_the_right_vocabulary(vae_run, gpt2_dir,
                                                                                             ptb_small, tmp_path,
                                                                                             capsys):
    """Starting over (`resume=never`) a GPT-2 AdaVAE run with a word-level one kept `gpt2_tokenizer/`, which the
    stages read before `word_vocabulary.json`; a GPT-2 AdaVAE refused to resume a word-level run changes no file."""
    words = [*data_args(ptb_small), "trainer.global_batch_size=16", "trainer.micro_batch_size=8", *QUIET]
    gpt = tmp_path / "gpt"
    assert main(["experiment=ptb_gpt_pretrain", "model=gpt_tiny", "model.block_size=65", "trainer.max_steps=1",
                 "trainer.eval_every=0", f"output_dir={gpt}", *words]) == 0
    vae = ["experiment=adavae_ptb", "model.latent_size=8", "model.adapter_size=8", "trainer.max_steps=2",
           "trainer.eval_every=0", *words]
    run = Path(shutil.copytree(vae_run, tmp_path / "run"))
    assert main([*vae, f"init_from={gpt}", "resume=never", f"output_dir={run}"]) == 0
    assert not (run / TOKENIZER_DIR).exists() and (run / "word_vocabulary.json").is_file()
    evaluate = ["experiment=adavae_ptb", "stage=evaluate", "evaluate.iw_samples=2", *words]
    assert main([*evaluate, f"init_from={run}", f"output_dir={tmp_path / 'eval'}"]) == 0
    before = sorted(path.relative_to(run) for path in run.rglob("*"))
    capsys.readouterr()
    assert main([*vae, f"init_from={gpt2_dir}", f"output_dir={run}"]) == 2  # a GPT-2 AdaVAE cannot resume it
    assert "holds a run with other settings" in capsys.readouterr().err
    assert sorted(path.relative_to(run) for path in run.rglob("*")) == before
