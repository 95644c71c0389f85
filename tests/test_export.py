"""`c4prep export`: tiny T5 (v1.0, v1.1) and GPT runs trained here become Hugging Face folders whose logits equal
ours in the installed transformers (4.x in the test extra, 5.x in CI's training-only environment), whose tokenizers
give our ids on real documents, and which reload into c4prep with identical logits; architectures HF lacks are
refused in one line. No Beam: the corpus, vocabulary and token shards are written here as the stages write them."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import stat
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from omegaconf import OmegaConf

from c4prep.cli import main as c4prep_main
from c4prep.manifest import build_manifest, manifest_fingerprint, read_listed_shard, read_manifest, write_manifest
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shards import shard_name, write_shard
from c4prep.tokenization.token_shards import token_batch, token_schema
from c4prep.tokenization.train_vocab import VocabConfig, locate_vocabulary, train_vocabulary
from c4prep.tokenization.vocabulary import SentencePieceVocabulary
from c4prep.training.checkpoint import load_checkpoint, resolve_checkpoint, save_checkpoint
from c4prep.training.cli import main as train
from c4prep.training.data.char_vocabulary import CharVocabulary
from c4prep.training.data.sentence_files import WordVocabulary
from c4prep.training.export.run_export import export_run
from c4prep.training.export.run_source import read_run, run_vocabulary
from c4prep.training.models import build_model
from c4prep.training.models.gpt import GPT, gpt_config
from c4prep.training.models.gpt_hf import gpt_from_hf_directory
from c4prep.training.models.t5_hf import hf_model, t5_from_hf_directory
from c4prep.training.stages.model_setup import model_from_checkpoint
from conftest import TRAIN_QUIET

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
TRANSFORMERS_4 = transformers.__version__.startswith("4.")
C4_FILE = "c4-en-train-00000-first500.jsonl"
SHORT = ["trainer.max_steps=2", "trainer.global_batch_size=4", "trainer.micro_batch_size=4", "trainer.eval_every=2",
         "trainer.eval_batches=1", "optimizer=adamw", *TRAIN_QUIET]


@pytest.fixture(scope="module")
def c4_texts(webdata) -> list[str]:
    """500 released C4 documents: 240 train the vocabulary and models, 30 validate, the rest test tokenizers."""
    return [json.loads(line)["text"] for line in (webdata / C4_FILE).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory, c4_texts) -> Path:
    """Document shards -> `c4prep vocab` (1,000 pieces) -> token shards as `c4prep tokenize` writes them."""
    root = tmp_path_factory.mktemp("data")
    corpus, splits = root / "c4", {"train": c4_texts[:240], "validation": c4_texts[240:270]}
    infos = []
    for split, texts in splits.items():
        columns = {"url": [f"https://example.com/{split}/{i}" for i in range(len(texts))], "text": texts,
                   "timestamp": ["2019-07-15T00:00:00Z"] * len(texts), "content_type": ["text/plain"] * len(texts),
                   "content_length": [len(text) for text in texts]}
        infos.append(write_shard(str(corpus / shard_name(split, 0, 1)), DOCUMENT_SCHEMA,
                                 [pa.RecordBatch.from_pydict(columns, schema=DOCUMENT_SCHEMA)]))
    write_manifest(str(corpus), build_manifest(DOCUMENT_SCHEMA, infos, config={}, counters={}))
    train_vocabulary(VocabConfig(inputs=[str(corpus)], output=str(root / "vocab"), vocab_size=1000, num_threads=1))
    return write_tokens(root / "tokens", corpus, root / "vocab", splits, extra_ids=100)


def write_tokens(output: Path, corpus: Path, vocab_folder: Path, splits: dict[str, list[str]], extra_ids: int) -> Path:
    """Token shards of ``splits``' texts as `c4prep tokenize --extra-ids` writes them."""
    model_uri, proto, card = locate_vocabulary(str(vocab_folder))
    vocab = SentencePieceVocabulary(proto, extra_ids=extra_ids)
    schema, infos = token_schema(vocab.vocab_size), []
    for split, texts in splits.items():
        batch = token_batch(schema, vocab.encode_arrays(texts, add_eos=True), [f"doc://{i}" for i in range(len(texts))])
        infos.append(write_shard(str(output / shard_name(split, 0, 1)), schema, [batch]))
    extra = {"source": {"uri": str(corpus), "fingerprint": manifest_fingerprint(read_manifest(str(corpus)))},
             "vocabulary": {"model": model_uri, "model_sha256": hashlib.sha256(proto).hexdigest(),
                            "vocab_size": vocab.vocab_size, "extra_ids": extra_ids, "card": card}}
    write_manifest(str(output), build_manifest(schema, infos, config={}, counters={}, extra=extra))
    return output


def vocabulary(tokens: Path) -> SentencePieceVocabulary:
    return SentencePieceVocabulary(locate_vocabulary(read_manifest(str(tokens)).extra["vocabulary"]["model"])[1])


@pytest.fixture(scope="module", params=["t5_tiny", "t5_v1_0_tiny"], ids=["v1.1", "v1.0"])
def t5_export(request, tokens, tmp_path_factory) -> tuple[Path, Path]:
    """(run folder, its export) of a 2-step span-corruption T5 on the token shards."""
    root = tmp_path_factory.mktemp(request.param)
    assert train([f"data.tokens={tokens}", f"model={request.param}", "objective.inputs_length=64",
                  "objective.targets_length=16", "schedule=constant", f"output_dir={root / 'run'}", *SHORT]) == 0
    export_run(root / "run", root / "hf")
    return root / "run", root / "hf"


def assert_our_ids(got: list[list[int]], ours: list[list[int]], exact: bool) -> None:
    """``got`` is ``ours``; unless ``exact``, up to ties: where two orders of the same pieces score the same,
    SentencePiece (float32 sums) and the tokenizers library (float64) may pick different ones, in a few documents
    (7 of the 500 released C4 ones)."""
    differ = [i for i, (a, b) in enumerate(zip(got, ours, strict=True)) if a != b]
    assert not differ if exact else (len(differ) * 30 <= len(ours) and
                                     all(sorted(got[i]) == sorted(ours[i]) for i in differ))


def run_model(run: Path) -> torch.nn.Module:
    return model_from_checkpoint(load_checkpoint(run)).eval()


def t5_batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    encoder = torch.randint(3, vocab_size, (3, 12), generator=generator)
    encoder[1, 8:], encoder[2, 5:] = 0, 0
    decoder = F.pad(torch.randint(3, vocab_size, (3, 6), generator=generator), (1, 0))
    return encoder, decoder


def test_t5_export_loads_in_transformers_with_our_logits(t5_export):
    run, out = t5_export
    assert {"config.json", "model.safetensors", "generation_config.json", "spiece.model", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json", "README.md"} <= {p.name for p in out.iterdir()}
    ours = run_model(run)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "T5ForConditionalGeneration"
    assert (hf.lm_head.weight is hf.shared.weight) == ours.config.tie_word_embeddings
    encoder, decoder = t5_batch(ours.config.vocab_size)
    with torch.no_grad():
        expected = ours(encoder, decoder)
        logits = hf(input_ids=encoder, attention_mask=(encoder != 0).long(), decoder_input_ids=decoder).logits
        in_memory = hf_model(ours)(input_ids=encoder, attention_mask=(encoder != 0).long(),
                                   decoder_input_ids=decoder).logits
        reloaded = t5_from_hf_directory(out)(encoder, decoder)
        generated = hf.generate(input_ids=encoder, attention_mask=(encoder != 0).long(), max_new_tokens=5,
                                do_sample=False)[:, 1:]  # after the start token
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(in_memory, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(reloaded, expected)
    ours_generated = ours.generate(encoder, 5)
    width = min(generated.shape[1], ours_generated.shape[1])
    assert torch.equal(generated[:, :width], ours_generated[:, :width])


@pytest.mark.parametrize("backend", ["fast", "slow"])
def test_t5_tokenizer_gives_our_ids_on_real_documents(t5_export, tokens, c4_texts, backend):
    if backend == "slow" and not TRANSFORMERS_4:
        pytest.skip("transformers 5 has no SentencePiece T5 tokenizer: AutoTokenizer is the tokenizers one")
    tokenizer = transformers.AutoTokenizer.from_pretrained(t5_export[1], use_fast=backend == "fast")
    vocab, documents = vocabulary(tokens), c4_texts[270:]
    assert_our_ids([tokenizer(text).input_ids for text in documents], [vocab.encode(text) + [1] for text in documents],
                   exact=backend == "slow")
    assert [tokenizer.convert_tokens_to_ids(f"<extra_id_{k}>") for k in (0, 99)] == [vocab.sentinel_id(0),
                                                                                      vocab.sentinel_id(99)]
    assert len(tokenizer) == vocab.vocab_size
    assert list(tokenizer("a text")) == ["input_ids", "attention_mask"]
    ids = vocab.encode(documents[0][:300])
    assert tokenizer.decode(ids) == vocab.decode(ids)


def test_tokenizers_decode_sentinels_and_unk_as_c4prep(t5_export, gpt_exports, tokens):
    """Sentinels were decoded without the space c4prep's vocabulary (as seqio's) puts before one after text, and UNK
    as '<unk>' where SentencePiece writes ' ⁇ '. Not by transformers 5's T5Tokenizer, which builds its own decoder."""
    vocab = vocabulary(tokens)
    words = vocab.encode("The cat sat")
    ids = [*words, vocab.sentinel_id(0), *words[1:], vocab.unk_id, *words[1:], vocab.sentinel_id(1),
           vocab.sentinel_id(2)]
    assert "sat <extra_id_0>" in vocab.decode(ids) and " ⁇ " in vocab.decode(ids)
    gpt = transformers.AutoTokenizer.from_pretrained(gpt_exports["tokens"][1])
    assert gpt.decode(ids) == " " + vocab.decode(ids)  # a GPT's keeps the first word's space
    t5 = transformers.AutoTokenizer.from_pretrained(t5_export[1])
    if TRANSFORMERS_4:
        assert t5.decode(ids) == vocab.decode(ids)
    else:
        assert t5.decode([*words, vocab.sentinel_id(0)]) == vocab.decode(words) + "<extra_id_0>"


def test_tokenizers_split_words_at_spaces_alone_as_sentencepiece(t5_export, gpt_exports, tokens):
    """A whitespace that SentencePiece's normalisation keeps (U+0085 NEXT LINE: its <unk>) was dropped. Not by
    transformers 5's T5Tokenizer, which builds its own pre-tokenizer (any whitespace splits words, as for Google's
    T5 checkpoints)."""
    vocab = vocabulary(tokens)
    texts = ["a\u0085b", "x \u0085 y", "a\u2028b\u2029c", "a\u1680b", "  a \t b\n", "a\u00a0b\u3000c  d"]
    assert [vocab.unk_id] == [i for i in vocab.encode(texts[0]) if i == vocab.unk_id]
    for folder, eos in ((t5_export[1], [vocab.eos_id]), (gpt_exports["tokens"][1], [])):
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        got, ours = [tokenizer(text).input_ids for text in texts], [vocab.encode(text) + eos for text in texts]
        if TRANSFORMERS_4 or not eos:
            assert got == ours
        else:
            assert vocab.unk_id not in got[0] and got[4:] == ours[4:]
        special = [vocab.eos_id, vocab.unk_id, vocab.pad_id, vocab.sentinel_id(0)]
        assert tokenizer("</s> <unk> <pad> <extra_id_0>").input_ids == special + eos  # as HF's T5 tokenizers


@pytest.mark.skipif(importlib.util.find_spec("apache_beam") is None, reason="the sample documents are a Beam run's")
def test_t5_tokenizer_on_the_sample_documents(t5_export, tokens, sample_documents):
    manifest = read_manifest(str(sample_documents))
    texts = [text for shard in manifest.shards
             for text in read_listed_shard(str(sample_documents), manifest, shard)["text"].to_pylist()]
    tokenizer, vocab = transformers.AutoTokenizer.from_pretrained(t5_export[1]), vocabulary(tokens)
    assert len(texts) > 50
    assert_our_ids([tokenizer(text).input_ids for text in texts], [vocab.encode(text) + [1] for text in texts], False)


def test_t5_model_card_records_lineage_steps_metrics_and_config(t5_export, tokens):
    run, out = t5_export
    card = (out / "README.md").read_text()
    manifest = read_manifest(str(tokens))
    vocab_card = manifest.extra["vocabulary"]["card"]
    for fingerprint in (manifest_fingerprint(manifest), manifest.extra["source"]["fingerprint"],
                        manifest.extra["vocabulary"]["model_sha256"], vocab_card["sources"][0]["fingerprint"]):
        assert f"`{fingerprint}`" in card
    assert "at step 2" in card and "| validation | 2 |" in card and "| train | 2 |" in card
    assert (run / "config.yaml").read_text().strip().splitlines()[0] in card
    assert json.loads((out / "config.json").read_text())["c4prep_model_spec"] == load_checkpoint(run)["model_spec"]


@pytest.fixture(scope="module")
def gpt_exports(tokens, ptb_gpt_run, shared_data, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """(run, export) of GPTs over each vocabulary: SentencePiece token shards (tied, exact GELU), PTB words
    (`ptb_gpt_run`), tiny-shakespeare characters (untied head, no biases, tanh GELU)."""
    root = tmp_path_factory.mktemp("gpts")
    text = root / "shakespeare.txt"
    text.write_text((shared_data / "tinyshakespeare" / "input.txt").read_text()[:20_000])
    assert train([f"data.tokens={tokens}", "model=gpt_tiny", "objective=lm", "objective.targets_length=65",
                  "schedule=constant", f"output_dir={root / 'tokens'}", *SHORT]) == 0
    assert train(["experiment=shakespeare_char", "model=gpt_tiny", "+model.bias=false", "+model.tie_embeddings=false",
                  "+model.activation=gelu_tanh", f"data.text={text}", "data.block_size=32",
                  "schedule.options.warmup_steps=1", f"output_dir={root / 'chars'}", *SHORT]) == 0
    runs = {"tokens": root / "tokens", "words": ptb_gpt_run, "chars": root / "chars"}
    for name, run in runs.items():
        export_run(run, root / f"{name}_hf")
    return {name: (run, root / f"{name}_hf") for name, run in runs.items()}


@pytest.mark.parametrize("vocab", ["tokens", "words", "chars"])
def test_gpt_export_loads_in_transformers_with_our_logits(gpt_exports, vocab):
    run, out = gpt_exports[vocab]
    ours = run_model(run)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == ours.config.tie_embeddings
    tokens = torch.randint(0, ours.config.vocab_size, (2, ours.config.block_size),
                           generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = ours(tokens)
        torch.testing.assert_close(hf(tokens).logits, expected, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(gpt_from_hf_directory(out).eval()(tokens), expected, atol=1e-5, rtol=1e-5)


def test_a_character_run_exports_its_kept_characters_and_refuses_a_sentencepiece_vocab(gpt_exports, ptb_vocab,
                                                                                       tmp_path):
    """--vocab with a SentencePiece model of the same size shipped a tokenizer of other pieces, exit 0."""
    run, out = gpt_exports["chars"]
    assert f"Characters as the run kept them, `{run / 'char_vocabulary.json'}`" in (out / "README.md").read_text()
    (tmp_path / "pieces.model").write_bytes(ptb_vocab.model_proto)
    line = _refusal(str(run), str(tmp_path / "out"), "--vocab", str(tmp_path / "pieces.model"))
    assert line.endswith("was trained on data.kind=char_text, whose ids are its own characters or words, not "
                         "SentencePiece pieces: export it without --vocab"), line
    assert not (tmp_path / "out").exists()


def test_gpt_tokenizers_give_our_ids(gpt_exports, tokens, c4_texts, shared_data):
    documents = c4_texts[270:]
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_exports["tokens"][1])
    assert_our_ids([tokenizer(text).input_ids for text in documents],
                   [vocabulary(tokens).encode(text) for text in documents], exact=False)
    words = WordVocabulary.load(gpt_exports["words"][0])
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_exports["words"][1])
    lines = (shared_data / "ptb" / "valid.txt").read_text().splitlines()[:200]
    assert [tokenizer(line).input_ids for line in lines] == [[words.bos_id, *words.encode(line)] for line in lines]
    assert tokenizer.decode(words.encode(lines[0])) == " " + words.decode(words.encode(lines[0]))
    separated = "the\x1ccompany\x1fsaid \u2028 it\x85was"  # str.split()'s whitespace: U+001C-U+001F too
    assert tokenizer(separated).input_ids == [words.bos_id, *words.encode(separated)]
    assert words.unk_id not in words.encode(separated)
    chars = CharVocabulary.from_text((gpt_exports["chars"][0].parent / "shakespeare.txt").read_text())
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_exports["chars"][1])
    passage = (shared_data / "tinyshakespeare" / "input.txt").read_text()[:2000]
    assert tokenizer(passage).input_ids == chars.encode(passage).tolist()
    assert tokenizer.decode(chars.encode(passage)) == passage


@pytest.mark.parametrize("vocab", ["tokens", "words", "chars"])
def test_gpt_tokenizer_output_gives_the_models_logits(gpt_exports, vocab):
    """transformers 4.x's tokenizers returned token_type_ids, which GPT-2 adds as embeddings to every position:
    ``model(**tokenizer(text))`` and the card's ``generate(**inputs)`` gave other logits (by up to 3)."""
    out = gpt_exports[vocab][1]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    encoded = tokenizer("the company said it will", return_tensors="pt")
    assert list(encoded) == ["input_ids", "attention_mask"]
    with torch.no_grad():
        torch.testing.assert_close(hf(**encoded).logits, hf(input_ids=encoded.input_ids).logits, atol=0, rtol=0)


@pytest.mark.parametrize("vocab, prompt", [("tokens", "The city of"), ("words", "the company said it"),
                                           ("chars", "The king")])
def test_the_text_generation_pipeline_writes_the_prompt_and_its_continuation(gpt_exports, vocab, prompt):
    """transformers 5's pipeline appends the new ids' text to the prompt, and the SentencePiece and word tokenizers
    decoded a continuation without the space before its first word: "The city ofof of". Special ids are suppressed,
    so that the pipeline (which skips them) and c4prep decode the same ids."""
    run, out = gpt_exports[vocab]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    settings = dict(max_new_tokens=8, do_sample=False, suppress_tokens=tokenizer.all_special_ids)
    text = transformers.pipeline("text-generation", model=hf, tokenizer=tokenizer)(prompt, **settings)[0]
    prompt_ids = tokenizer(prompt).input_ids
    ids = hf.generate(torch.tensor([prompt_ids]), **settings)[0].tolist()
    assert len(ids) == len(prompt_ids) + 8
    assert text["generated_text"] == run_vocabulary(read_run(run))[0].decode(ids)  # as c4prep writes all ids
    assert text["generated_text"].startswith(prompt if vocab == "chars" else prompt + " ")
    prompt_text, new_text = tokenizer.decode(prompt_ids), tokenizer.decode(ids[len(prompt_ids):])
    assert prompt_text + new_text == tokenizer.decode(ids)


def test_t5_export_never_generates_its_padding_ids(t5_export):
    """The embedding's rows past the vocabulary (up to a multiple of 128) are no token; transformers drew them
    (21 of 820 draws decoded to nothing)."""
    run, out = t5_export
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    vocab_size = load_checkpoint(run)["model_spec"]["vocab_size"]
    encoder, _ = t5_batch(vocab_size)
    torch.manual_seed(0)
    drawn = hf.generate(input_ids=encoder, attention_mask=(encoder != 0).long(), do_sample=True, max_new_tokens=64,
                        min_new_tokens=64, num_return_sequences=4)
    assert drawn.shape == (12, 65) and drawn.max() < vocab_size


def test_gpt_tokenizers_map_unknown_text_to_their_unk_token(gpt_exports):
    """A character outside the vocabulary failed ("Missing [UNK] token from the vocabulary"); the word tokenizer
    mapped unknown words to <unk> but named no unk_token."""
    words = WordVocabulary.load(gpt_exports["words"][0])
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_exports["words"][1])
    assert tokenizer.unk_token_id == words.unk_id is not None
    assert tokenizer("the zzyzzx said").input_ids == [words.bos_id, *words.encode("the zzyzzx said")]
    tokenizer = transformers.AutoTokenizer.from_pretrained(gpt_exports["chars"][1])
    assert tokenizer.unk_token_id == tokenizer.mask_token_id == 1
    ids = tokenizer("aü\tb").input_ids
    assert ids[1:3] == [1, 1] and tokenizer.decode(ids) == "a⁇⁇b"


def test_export_files_are_as_readable_as_other_files(t5_export, gpt_exports):
    """safetensors wrote model.safetensors 0600, the other files 0644 under umask 022."""
    for out in (t5_export[1], *(out for _, out in gpt_exports.values())):
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in out.iterdir()}
        assert set(modes.values()) == {modes["config.json"]}, modes


def test_an_output_that_is_a_link_to_an_empty_folder_gets_the_export(gpt_exports, tmp_path):
    """The export was renamed onto the link: a NotADirectoryError traceback."""
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    result = CliRunner().invoke(c4prep_main, ["export", str(gpt_exports["chars"][0]), str(tmp_path / "link")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target" / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def _saved(folder: Path, model: torch.nn.Module, spec: dict) -> Path:
    save_checkpoint(folder, 1, {"step": 1, "model": model.state_dict(), "model_spec": spec}, keep=1)
    return folder


def _refusal(*args: str) -> str:
    result = CliRunner().invoke(c4prep_main, ["export", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


@pytest.mark.parametrize("settings, reason", [
    ({"norm": "post"}, "norm=post (GPT-2 has pre)"),
    ({"attention": "synthesizer"}, "attention=synthesizer (GPT-2 has causal)"),
])
def test_gpts_without_a_gpt2_counterpart_are_refused_in_one_line(tmp_path, settings, reason):
    spec = {"name": "gpt", "size": "gpt_tiny", "vocab_size": 50, **settings}
    run = _saved(tmp_path / "run", GPT(gpt_config("gpt_tiny", 50, **settings)), spec)
    line = _refusal(str(run), str(tmp_path / "out"))
    assert line.startswith("Error: cannot export ") and reason in line
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_prefix_lm_gpt_is_refused_in_one_line(tokens, tmp_path):
    """Its inputs attend both ways; GPT2LMHeadModel (causal) would compute otherwise (it was exported silently)."""
    run = tmp_path / "run"
    assert train([f"data.tokens={tokens}", "model=gpt_tiny", "objective=prefix_lm", "objective.inputs_length=32",
                  "objective.targets_length=33", f"output_dir={run}", *SHORT]) == 0
    line = _refusal(str(run), str(tmp_path / "out"))
    assert line.startswith(f"Error: cannot export {run}/checkpoints/step_00000002.pt to Hugging Face: it was trained "
                           "with objective=prefix_lm, whose inputs attend to each other both ways"), line
    assert not (tmp_path / "out").exists()


def test_t5_adapters_unknown_runs_and_used_folders_are_refused(t5_export, ptb_vocab, tmp_path):
    state = load_checkpoint(t5_export[0])
    spec = {**state["model_spec"], "adapter_dim": 4}
    adapters = _saved(tmp_path / "adapters", model_from_checkpoint({**state, "model_spec": spec}, strict=False), spec)
    assert "HF T5 has no adapters" in _refusal(str(adapters), str(tmp_path / "out"))
    assert "does not exist" in _refusal(str(tmp_path / "missing"), str(tmp_path / "out"))
    assert "not an empty folder" in _refusal(str(t5_export[0]), str(t5_export[1]))
    (tmp_path / "other.model").write_bytes(ptb_vocab.model_proto)
    line = _refusal(str(t5_export[0]), str(tmp_path / "out"), "--vocab", str(tmp_path / "other.model"))
    assert "is not the vocabulary the token shards" in line and f"this one's is {ptb_vocab.model_sha256[:12]}" in line
    assert re.search(r"they name \S+spm\.model of SHA-256 [0-9a-f]{12}\.\.\.", line), line  # the one to pass


def test_vocab_exports_a_run_whose_token_shards_are_gone(t5_export, tokens, ptb_vocab, tmp_path):
    """--vocab, "when the run's data no longer names where it is", was refused while the token shards it had
    trained on could not be read: their manifest was read first."""
    run = Path(shutil.copytree(t5_export[0], tmp_path / "run"))
    config = OmegaConf.load(run / "config.yaml")
    config.data.tokens = str(tmp_path / "deleted_tokens")
    OmegaConf.save(config, run / "config.yaml")
    assert _refusal(str(run), str(tmp_path / "out")).endswith(
        "; or pass --vocab=<the vocabulary folder or .model file they were made with>")
    (tmp_path / "other.model").write_bytes(ptb_vocab.model_proto)
    assert "was trained on the ids of the SentencePiece model of SHA-256" in _refusal(
        str(run), str(tmp_path / "out"), "--vocab", str(tmp_path / "other.model"))
    assert not (tmp_path / "out").exists()
    vocab = read_manifest(str(tokens)).extra["vocabulary"]["model"]
    result = CliRunner().invoke(c4prep_main, ["export", str(run), str(tmp_path / "out"), "--vocab", vocab])
    assert result.exit_code == 0, result.output
    for name in ("model.safetensors", "tokenizer.json", "spiece.model"):
        assert (tmp_path / "out" / name).read_bytes() == (t5_export[1] / name).read_bytes()


def test_vocab_exports_a_run_on_shards_of_other_extra_ids_once_they_are_gone(tokens, c4_texts, tmp_path):
    """With the shards' manifest gone, the vocabulary was taken with T5's 100 sentinels: a run on `tokenize
    --extra-ids 7` shards could not be exported ('the vocabulary has 1100 ids but the model 1007')."""
    made = read_manifest(str(tokens)).extra
    seven = write_tokens(tmp_path / "tokens7", Path(made["source"]["uri"]), Path(made["vocabulary"]["model"]).parent,
                         {"train": c4_texts[:240]}, extra_ids=7)
    assert train([f"data.tokens={seven}", "model=t5_tiny", "objective.inputs_length=64", "objective.targets_length=16",
                  "data.validation_split=null", "trainer.eval_every=0", f"output_dir={tmp_path / 'run'}",
                  *SHORT]) == 0
    export_run(tmp_path / "run", tmp_path / "with_shards")
    shutil.rmtree(seven)
    result = CliRunner().invoke(c4prep_main, ["export", str(tmp_path / "run"), str(tmp_path / "out"), "--vocab",
                                              made["vocabulary"]["model"]])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "config.json").read_text())["vocab_size"] == 1024  # 1,007 ids padded
    for name in ("model.safetensors", "tokenizer.json", "spiece.model"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "with_shards" / name).read_bytes()


def test_the_cli_exports_and_says_what_it_wrote(t5_export, tmp_path):
    result = CliRunner().invoke(c4prep_main, ["export", str(t5_export[0]), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("exported T5ForConditionalGeneration (step 2) to ")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "spiece.model"):
        assert (tmp_path / "out" / name).read_bytes() == (t5_export[1] / name).read_bytes()


def test_checkpoints_that_contradict_the_runs_config_are_refused_but_dropout_may_differ(t5_export, tmp_path):
    run, out = Path(shutil.copytree(t5_export[0], tmp_path / "run")), tmp_path / "out"
    config, checkpoint = OmegaConf.load(run / "config.yaml"), resolve_checkpoint(run)
    state, size = load_checkpoint(checkpoint), config.model.size
    OmegaConf.save(OmegaConf.merge(config, {"model": {"size": "t5_huge"}}), run / "config.yaml")
    assert f"holds a model with size={size!r}, the run's config.yaml gives 't5_huge'" in _refusal(str(run), str(out))
    OmegaConf.save(OmegaConf.merge(config, {"model": {"d_ff": 128}}), run / "config.yaml")  # it said 'd_ff=None'
    assert f"holds a model with d_ff=that of size={size!r}, the run's config.yaml gives 128" in _refusal(str(run),
                                                                                                          str(out))
    OmegaConf.save(OmegaConf.merge(config, {"model": {"dropout_rate": 0.3}}), run / "config.yaml")
    assert export_run(run, tmp_path / "dropout")["step"] == 2
    other = "t5_v1_0_tiny" if size == "t5_tiny" else "t5_tiny"
    foreign = {**state["model_spec"], "size": other}  # another run's checkpoint copied over this run's
    torch.save({**state, "model_spec": foreign, "model": build_model(**foreign).state_dict()}, checkpoint)
    line = _refusal(str(run), str(out))
    assert f"holds a model with size={other!r}, the run's config.yaml gives {size!r}" in line
    assert not out.exists()


def test_a_checkpoint_of_another_family_copied_into_a_run_is_refused(t5_export, gpt_exports, tmp_path):
    """A T5 checkpoint in a GPT run's folder exported with a card describing the GPT run's config.yaml, exit 0."""
    run, out = Path(shutil.copytree(gpt_exports["tokens"][0], tmp_path / "run")), tmp_path / "out"
    checkpoint = resolve_checkpoint(run)
    shutil.copy(resolve_checkpoint(t5_export[0]), checkpoint)
    assert _refusal(str(run), str(out)) == (f"Error: {checkpoint} holds a t5 model, the run's config.yaml a gpt one: "
                                           "export a checkpoint that this run wrote, with the config.yaml it trained "
                                           "with")
    assert not out.exists()


def test_an_output_that_cannot_be_written_or_is_remote_is_one_line(t5_export, tmp_path):
    """A file as OUT's parent was a NotADirectoryError traceback; gs://bucket/out wrote the local folder gs:/."""
    (tmp_path / "afile").write_text("")
    assert _refusal(str(t5_export[0]), str(tmp_path / "afile" / "out")).startswith(
        f"Error: cannot write {tmp_path / 'afile' / 'out'}: Not a directory")
    assert _refusal(str(t5_export[0]), "gs://bucket/out") == (
        "Error: gs://bucket/out: export writes a local folder; export there, then copy it (e.g. gsutil cp -r, aws s3 "
        "cp --recursive)")
    assert not Path("gs:").exists()


def test_gpt_exports_name_no_token_their_vocabulary_lacks(gpt_exports):
    """GPT-2's default BOS/EOS id 50256 stayed in config.json: outside a 1,100-id vocabulary (transformers 5 warns)."""
    for name, (_, out) in gpt_exports.items():
        config = json.loads((out / "config.json").read_text())
        vocab_size = config["vocab_size"]
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            assert config[key] is None or 0 <= config[key] < vocab_size, (name, key, config[key])
    assert json.loads((gpt_exports["words"][1] / "config.json").read_text())["bos_token_id"] == 1


def test_an_export_removes_the_folders_that_killed_exports_into_its_output_left(t5_export, tmp_path, caplog):
    killed = [tmp_path / ".hf.partial-0123abcd", tmp_path / ".hf.partial-89efcdab"]
    kept = [tmp_path / ".other.partial-0123abcd", tmp_path / ".hf.partial-mine"]
    for folder in killed + kept:
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    export_run(t5_export[0], tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["hf", *(folder.name for folder in kept)])
    assert all(f"removed {folder}, left by an export into" in caplog.text for folder in killed)
