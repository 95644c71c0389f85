"""T5 model: equality with HF T5ForConditionalGeneration (v1.0 and v1.1), relative-position buckets, packed rows,
greedy decoding, adapters, gradual-unfreezing groups, the token loss, and the named sizes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from c4prep.training.losses import mean_token_loss, token_cross_entropy
from c4prep.training.models.sampling import next_token
from c4prep.training.models.t5 import T5, num_parameters, t5_config
from c4prep.training.models.t5_attention import Attention, relative_position_bucket
from c4prep.training.models.t5_hf import from_hf_state_dict, hf_model

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB = 300
FLAVOURS = ["t5_tiny", "t5_v1_0_tiny"]


def _model(size: str, seed: int = 0, **overrides) -> T5:
    torch.manual_seed(seed)
    return T5(t5_config(size, VOCAB, **overrides)).eval()


def _hf(model: T5):
    return hf_model(model, attn_implementation="eager")


def _tokens(*shape: int, seed: int) -> torch.Tensor:
    return torch.randint(2, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("size", FLAVOURS)
def test_logits_and_loss_match_hf_with_padding(size):
    model = _model(size, num_decoder_layers=3)  # unequal stacks exercise the name mapping
    hf = _hf(model)
    encoder_tokens = _tokens(3, 12, seed=1)
    encoder_tokens[1, 8:] = 0
    encoder_tokens[2, 4:] = 0
    targets = _tokens(3, 7, seed=2)
    targets[0, 5:] = 0
    targets[2, 3:] = 0
    decoder_tokens = F.pad(targets[:, :-1], (1, 0))  # shift right, start id 0
    labels = targets.masked_fill(targets == 0, -100)
    with torch.no_grad():
        ours = model(encoder_tokens, decoder_tokens)
        theirs = hf(input_ids=encoder_tokens, attention_mask=(encoder_tokens != 0).long(), labels=labels)
    assert ours.shape == (3, 7, 384)
    torch.testing.assert_close(ours, theirs.logits, atol=1e-5, rtol=1e-5)
    loss = mean_token_loss(ours, targets, (targets != 0).float())
    torch.testing.assert_close(loss, theirs.loss, atol=1e-6, rtol=1e-6)
    back = from_hf_state_dict(model.config, hf.state_dict())
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_hf_model_has_its_own_weights():
    model = _model("t5_tiny")
    hf = _hf(model)
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
        model.shared.weight.add_(1.0)
    back = from_hf_state_dict(model.config, hf.state_dict())
    assert not torch.equal(back.lm_head.weight, model.lm_head.weight)
    assert not torch.equal(back.shared.weight, model.shared.weight)
    assert hf.encoder.embed_tokens.weight is hf.shared.weight  # HF's own aliases stay one tensor


def test_relative_position_buckets_match_spec_and_hf():
    rp = torch.arange(-300, 301)
    encoder = relative_position_bucket(rp, bidirectional=True, num_buckets=32, max_distance=128)
    decoder = relative_position_bucket(rp, bidirectional=False, num_buckets=32, max_distance=128)
    enc = dict(zip(rp.tolist(), encoder.tolist(), strict=True))
    dec = dict(zip(rp.tolist(), decoder.tolist(), strict=True))
    assert enc[0] == 0 and [enc[-n] for n in range(1, 8)] == list(range(1, 8))
    assert {enc[-n] for n in range(8, 12)} == {8} and {enc[-n] for n in range(12, 16)} == {9}
    assert {enc[-n] for n in range(16, 23)} == {10} and enc[-23] == 11
    assert enc[-90] == 14 and {enc[-n] for n in range(91, 301)} == {15}
    assert enc[1] == 17 and {enc[n] for n in range(91, 301)} == {31} and 16 not in enc.values()
    assert {dec[n] for n in range(301)} == {0} and [dec[-n] for n in range(1, 16)] == list(range(1, 16))
    assert {dec[-n] for n in range(16, 19)} == {16} and dec[-19] == 17
    assert dec[-112] == 30 and {dec[-n] for n in range(113, 301)} == {31}
    hf_bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    assert torch.equal(encoder, hf_bucket(rp, bidirectional=True))
    assert torch.equal(decoder, hf_bucket(rp, bidirectional=False))


@pytest.mark.parametrize("size", FLAVOURS)
def test_packed_row_equals_segments_run_alone(size):
    model = _model(size)
    enc_a, enc_b = _tokens(1, 5, seed=3), _tokens(1, 7, seed=4)
    dec_a, dec_b = F.pad(_tokens(1, 2, seed=5), (1, 0)), F.pad(_tokens(1, 3, seed=6), (1, 0))
    packed_enc = F.pad(torch.cat([enc_a, enc_b], 1), (0, 3))
    packed_dec = F.pad(torch.cat([dec_a, dec_b], 1), (0, 2))
    enc_seg = torch.tensor([[1] * 5 + [2] * 7 + [0] * 3])
    dec_seg = torch.tensor([[1] * 3 + [2] * 4 + [0] * 2])
    enc_pos = torch.tensor([list(range(5)) + list(range(7)) + [0] * 3])
    dec_pos = torch.tensor([list(range(3)) + list(range(4)) + [0] * 2])
    with torch.no_grad():
        packed = model(packed_enc, packed_dec, enc_seg, dec_seg, enc_pos, dec_pos)
        by_index = model(packed_enc, packed_dec, enc_seg, dec_seg)  # index offsets equal position offsets
        alone_a, alone_b = model(enc_a, dec_a), model(enc_b, dec_b)
    torch.testing.assert_close(packed[:, :3], alone_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[:, 3:7], alone_b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(by_index[:, :7], packed[:, :7], atol=1e-5, rtol=1e-5)


def test_fully_masked_padding_rows_stay_finite():
    model = _model("t5_tiny")
    encoder_tokens, decoder_tokens = _tokens(1, 6, seed=7), F.pad(_tokens(1, 3, seed=8), (1, 2))
    enc_seg, dec_seg = torch.ones(1, 6, dtype=torch.long), torch.tensor([[1, 1, 1, 1, 0, 0]])
    logits = model(encoder_tokens, decoder_tokens, enc_seg, dec_seg)  # decoder padding sees no encoder key
    loss = mean_token_loss(logits, decoder_tokens, (dec_seg > 0).float())
    loss.backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    with pytest.raises(ValueError):
        model(encoder_tokens, decoder_tokens, enc_seg, None)


class MatrixProducts(TorchDispatchMode):
    """Counts the matrix products run inside it (``aten.mm``, ``addmm``, ``bmm``)."""

    PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func in self.PRODUCTS
        return func(*args, **(kwargs or {}))


def test_each_sublayer_multiplies_its_input_once():
    """Self-attention takes q, k and v from one product, cross-attention k and v, the gated feed-forward both input
    projections: fewer kernels a step (each a launch on a GPU), the weights still kept apart by their T5 names."""
    block = _model("t5_tiny").decoder.blocks[0]
    x, memory = torch.randn(2, 5, block.ff.wo.out_features), torch.randn(2, 7, block.ff.wo.out_features)
    bias = torch.zeros(1, 1, 5, 5)
    expected = {block.ff: 2, block.self_attn: 2 + 2}  # in and out; attention adds scores and weighted values
    for sublayer, products in expected.items():
        with MatrixProducts() as counted:
            sublayer(x) if sublayer is block.ff else sublayer(x, x, bias)
        assert counted.count == products, sublayer
    with MatrixProducts() as counted:
        block.cross_attn(x, memory, torch.zeros(1, 1, 5, 7))
    assert counted.count == 3 + 2  # q, then k and v together, out


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_attention_biases_have_unit_stride_keys(packed, bf16):
    """Every bias an attention layer gets (the learned relative-position bias with its masks, and the cross-attention
    mask) has stride 1 along the keys: PyTorch's CUDA dispatch gives a float ``attn_mask`` to a fused SDPA kernel
    only then (``check_last_dim_stride_equals_1_dense``), else the unfused math path runs."""
    model = _model("t5_tiny")
    seen = []
    for layer in (m for m in model.modules() if isinstance(m, Attention)):
        layer.register_forward_pre_hook(lambda _, args: seen.append(args[2]))
    encoder_tokens, decoder_tokens = _tokens(2, 9, seed=11), F.pad(_tokens(2, 4, seed=12), (1, 0))
    packing = (torch.tensor([[1] * 4 + [2] * 5] * 2), torch.tensor([[1] * 2 + [2] * 3] * 2),  # segment ids
               torch.tensor([[*range(4), *range(5)]] * 2), torch.tensor([[*range(2), *range(3)]] * 2))  # positions
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        model(encoder_tokens, decoder_tokens, *(packing if packed else ()))
    assert len(seen) == 3 * len(model.decoder.blocks)
    assert all(bias.stride(-1) == 1 for bias in seen), sorted({bias.stride() for bias in seen})


def test_bf16_autocast_forward_backward():
    model = _model("t5_v1_0_tiny").train()
    encoder_tokens, decoder_tokens = _tokens(2, 9, seed=11), F.pad(_tokens(2, 4, seed=12), (1, 0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(encoder_tokens, decoder_tokens)
    assert logits.dtype == torch.bfloat16
    mean_token_loss(logits, decoder_tokens, torch.ones(decoder_tokens.shape), z_loss=1e-4).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_greedy_generate_matches_hf():
    model = _model("t5_tiny")
    with torch.no_grad():
        model.lm_head.weight[model.config.eos_id] *= 3.0  # make EOS win at some steps, not all
    hf = _hf(model)
    encoder_tokens = _tokens(6, 10, seed=0)
    encoder_tokens[1, 6:] = 0
    encoder_tokens[2, 3:] = 0
    for rows in ([0, 1, 2, 3, 4, 5], [0, 1, 4]):  # the second batch ends early, before max_length
        tokens = encoder_tokens[rows]
        ours = model.generate(tokens, max_length=12)
        theirs = hf.generate(input_ids=tokens, attention_mask=(tokens != 0).long(), do_sample=False,
                             num_beams=1, max_new_tokens=12)
        assert torch.equal(ours, theirs[:, 1:])
    assert ours.shape[1] < 12 and (ours[:, 1:-1] == 1).any()  # EOS mid-sequence, then padding


def test_generation_never_chooses_a_padding_row():
    """The embedding's rows past the vocabulary (to a multiple of 128) are no token: greedy decoding took the argmax
    over them, and HF also sampled them."""
    model = _model("t5_tiny")
    with torch.no_grad():
        model.lm_head.weight[VOCAB:] *= 10.0  # padding rows win the unrestricted argmax
    hf, encoder_tokens = _hf(model), _tokens(4, 10, seed=2)
    with torch.no_grad():
        first_logits = model.decode(model.encode(encoder_tokens), encoder_tokens, torch.zeros(4, 1, dtype=torch.long))
    assert (first_logits[:, -1].argmax(-1) >= VOCAB).all()
    torch.manual_seed(0)
    for greedy in (True, False):
        ours = model.generate(encoder_tokens, 30, greedy=greedy, generator=torch.Generator().manual_seed(0))
        theirs = hf.generate(input_ids=encoder_tokens, do_sample=not greedy, max_new_tokens=30, min_new_tokens=30)
        assert ours.max() < VOCAB and theirs.max() < VOCAB
    assert ours.shape[1] == 30 and theirs.shape[1] == 31


@pytest.mark.parametrize("size", FLAVOURS)
def test_generation_runs_each_new_token_alone_and_equals_the_whole_prefix(size):
    model = _model(size)
    encoder_tokens = _tokens(3, 10, seed=4)
    encoder_tokens[1, 7:] = 0
    for greedy in (True, False):
        widths = []
        hook = model.decoder.blocks[0].register_forward_hook(
            lambda module, args, output: widths.append(args[0].shape[1]))
        drawn = model.generate(encoder_tokens, 9, temperature=2.0, top_k=50, greedy=greedy,
                               generator=torch.Generator().manual_seed(1))
        hook.remove()
        assert widths == [1] * drawn.shape[1]
        seeded, prefix = torch.Generator().manual_seed(1), torch.zeros(3, 1, dtype=torch.long)
        with torch.no_grad():  # the reference: the decoder rerun on the whole prefix for every token
            encoded = model.encode(encoder_tokens)
            for _ in range(drawn.shape[1]):
                logits = model.decode(encoded, encoder_tokens, prefix)[:, -1, :model.config.vocab_size]
                if not greedy:
                    logits = logits / 2.0
                prefix = torch.cat([prefix, next_token(logits, 50, greedy, seeded)[:, None]], dim=1)
        eos = (prefix[:, 1:] == model.config.eos_id).int()
        assert torch.equal(drawn, prefix[:, 1:].masked_fill(eos.cumsum(1) - eos > 0, 0))  # pad after each EOS


def test_adapters_start_as_identity_and_freeze():
    plain, adapted = _model("t5_tiny"), _model("t5_tiny", adapter_dim=8)
    missing = adapted.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing and all(".adapter." in name for name in missing)
    encoder_tokens, decoder_tokens = _tokens(2, 8, seed=9), F.pad(_tokens(2, 4, seed=10), (1, 0))
    with torch.no_grad():
        torch.testing.assert_close(adapted(encoder_tokens, decoder_tokens), plain(encoder_tokens, decoder_tokens))
    adapted.freeze_all_but_adapters()
    trainable = {name for name, p in adapted.named_parameters() if p.requires_grad}
    expected = {name for name, _ in adapted.named_parameters() if ".adapter." in name or "norm" in name}
    assert trainable == expected
    adapters, norms = 4 * 2 * 32 * 8, (5 + 7) * 32  # 4 blocks' down + up; encoder 2 * 2 + 1, decoder 2 * 3 + 1 norms
    assert num_parameters(adapted, trainable_only=True) == adapters + norms
    logits = adapted(encoder_tokens, decoder_tokens)
    mean_token_loss(logits, decoder_tokens, torch.ones(decoder_tokens.shape)).backward()
    assert adapted.encoder.blocks[0].adapter.up.weight.grad.abs().sum() > 0
    assert adapted.shared.weight.grad is None
    with pytest.raises(ValueError):
        plain.freeze_all_but_adapters()


@pytest.mark.parametrize("size", FLAVOURS)
def test_unfreezing_groups_cover_every_parameter_once(size):
    model = _model(size, num_layers=2, num_decoder_layers=3)
    groups = model.unfreezing_groups()
    ids = [id(p) for group in groups for p in group]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    assert len(groups) == 3
    first, last = {id(p) for p in groups[0]}, {id(p) for p in groups[-1]}
    assert id(model.shared.weight) in first
    assert {id(p) for p in model.decoder.blocks[2].parameters()} <= first
    assert {id(p) for p in model.encoder.blocks[1].parameters()} <= first
    assert {id(p) for p in model.decoder.blocks[0].parameters()} <= last
    assert id(model.decoder.relative_bias.weight) in last
    assert id(model.encoder.relative_bias.weight) in {id(p) for p in groups[1]}  # with encoder block 0


def test_token_cross_entropy_weights_z_loss_and_bf16():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=gen) * 3
    targets = torch.randint(0, 11, (2, 5), generator=gen)
    weights = torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    total, count = token_cross_entropy(logits, targets, weights)
    expected = (F.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * weights).sum()
    torch.testing.assert_close(total, expected)
    assert count.item() == 8.0
    with_z, _ = token_cross_entropy(logits, targets, weights, z_loss=1e-4)
    torch.testing.assert_close(with_z - total, 1e-4 * (torch.logsumexp(logits, -1) ** 2 * weights).sum())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16_total, _ = token_cross_entropy(logits.bfloat16(), targets, weights)
    assert bf16_total.dtype == torch.float32
    torch.testing.assert_close(bf16_total, token_cross_entropy(logits.bfloat16().float(), targets, weights)[0])
    assert mean_token_loss(logits, targets, torch.zeros(2, 5)).item() == 0.0


def test_named_sizes_match_released_parameter_counts():
    counts = {"t5_v1_0_small": 60_506_624, "t5_v1_0_base": 222_903_552, "t5_small": 76_961_152,
              "t5_base": 247_577_856}  # HF t5-small, t5-base, google/t5-v1_1-small, -base
    for size, expected in counts.items():
        with torch.device("meta"):
            assert num_parameters(T5(t5_config(size, 32_100))) == expected
    config = t5_config("t5_small", 32_100, dropout_rate=0.1)
    assert config.padded_vocab_size == 32_128 and config.dropout_rate == 0.1 and not config.tie_word_embeddings
    assert t5_config("t5_v1_0_small", 32_100).feed_forward == "relu"
    with pytest.raises(ValueError):
        t5_config("t5_huge", 32_100)
