"""`model.attention_impl=flex` (FlexAttention) computes T5's dense attention: the same logits and gradients with
padding, packed segments and the causal decoder mask. On the CPU flex_attention runs unfused and refuses a backward
pass; its reference backward (the one its compiled kernels are checked against) runs once that check is lifted.
The fused CUDA kernels are compared in test_gpu.py."""
import dataclasses
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module

from c4prep.training.models import t5_flex
from c4prep.training.models.t5 import T5, t5_config

B, ENC, DEC = 3, 20, 12
ENC_SEGMENTS = torch.tensor([[1] * 8 + [2] * 10 + [0] * 2, [1] * 20, [1] * 5 + [2] * 5 + [3] * 10])
DEC_SEGMENTS = torch.tensor([[1] * 5 + [2] * 5 + [0] * 2, [1] * 12, [1] * 3 + [2] * 4 + [3] * 5])


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def positions(segments: torch.Tensor) -> torch.Tensor:
    """Positions restarting at 0 in every segment (packed rows)."""
    index = torch.arange(segments.shape[1]).expand_as(segments)
    first = torch.cat([torch.ones_like(segments[:, :1], dtype=torch.bool), segments[:, 1:] != segments[:, :-1]], 1)
    return index - torch.where(first, index, 0).cummax(1).values


def model_pair(size: str = "t5_tiny", **overrides) -> tuple[T5, T5]:
    torch.manual_seed(0)
    config = t5_config(size, 100, **overrides)
    dense = T5(config)
    flex = T5(dataclasses.replace(config, attention_impl="flex"))
    flex.load_state_dict(dense.state_dict())
    return dense, flex


def inputs(packed: bool) -> tuple[tuple, torch.Tensor]:
    """Model inputs and the decoder positions that carry a loss. Unpacked rows end in encoder padding."""
    generator = torch.Generator().manual_seed(1)
    encoder = torch.randint(2, 100, (B, ENC), generator=generator)
    decoder = torch.randint(2, 100, (B, DEC), generator=generator)
    if not packed:
        encoder[0, 15:] = 0
        return (encoder, decoder), torch.ones(B, DEC, dtype=torch.bool)
    return ((encoder, decoder, ENC_SEGMENTS, DEC_SEGMENTS, positions(ENC_SEGMENTS), positions(DEC_SEGMENTS)),
            DEC_SEGMENTS > 0)


def test_positions_restart_in_every_segment():
    assert positions(torch.tensor([[1, 1, 1, 2, 2, 0]])).tolist() == [[0, 1, 2, 0, 1, 0]]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("size", ["t5_tiny", "t5_v1_0_tiny"])
def test_flex_logits_equal_dense(size, packed):
    dense, flex = model_pair(size, dropout_rate=0.0)
    args, scored = inputs(packed)
    with torch.no_grad():
        torch.testing.assert_close(flex(*args)[scored], dense(*args)[scored], rtol=1e-5, atol=1e-5)


def test_flex_logits_under_bf16_autocast_stay_close():
    dense, flex = model_pair()
    args, _ = inputs(packed=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours, reference = flex(*args).float(), dense(*args).float()
    assert (ours - reference).abs().max() < 0.05 * reference.abs().max()  # the dense path rounds its bias to bf16


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_flex_gradients_equal_dense(monkeypatch, packed):
    monkeypatch.setattr(flex_module, "_validate_device", lambda query, key, value: None)
    dense, flex = model_pair()
    args, scored = inputs(packed)
    for model in (dense, flex):
        (model(*args)[scored] ** 2).mean().backward()
    flex_grads = dict(flex.named_parameters())
    for name, parameter in dense.named_parameters():
        torch.testing.assert_close(flex_grads[name].grad, parameter.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert dense.encoder.relative_bias.weight.grad.abs().sum() > 0  # the learned bias gets its gradient


def test_flex_greedy_decoding_equals_dense():
    dense, flex = model_pair()
    (encoder, _), _ = inputs(packed=False)
    assert torch.equal(flex.eval().generate(encoder, 4), dense.eval().generate(encoder, 4))


def test_flex_needs_dropout_zero():
    with pytest.raises(ValueError, match="attention_impl 'flex' has no attention dropout"):
        t5_config("t5_v1_0_tiny", 100, attention_impl="flex")
    with pytest.raises(ValueError, match="attention_impl must be 'dense' or 'flex'"):
        t5_config("t5_tiny", 100, attention_impl="sdpa")


def test_cuda_calls_the_compiled_kernel_with_smaller_blocks(monkeypatch):
    """On CUDA the compiled flex_attention gets t5_flex's 64 x 64 blocks (PyTorch's default 128 x 128 for heads of 64
    asked for more shared memory than an H200 has); here the kernel is a stand-in that records its call."""
    calls = []
    monkeypatch.setattr(t5_flex, "_compiled_flex", lambda: lambda *args, **kwargs: calls.append(kwargs) or "out")
    heads = SimpleNamespace(device=torch.device("cuda"))
    assert t5_flex.FlexScores(block_mask="mask").attend(heads, heads, heads) == "out"
    assert calls == [{"score_mod": None, "block_mask": "mask", "scale": 1.0,
                      "kernel_options": {"BLOCK_M": 64, "BLOCK_N": 64}}]


def test_training_with_flex_on_the_cpu_is_one_line(sample_tokens, tmp_path, capsys):
    """It was FlexAttention's traceback at the first backward pass ('does not support backward on CPU'), exit 1."""
    from c4prep.training.cli import main

    assert main(["model=t5_tiny", "+model.attention_impl=flex", f"data.tokens={sample_tokens}", "trainer.device=cpu",
                 f"output_dir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "train: error: model.attention_impl=flex trains on CUDA only (FlexAttention has no backward pass on the CPU): "
        "give trainer.device=cuda, or leave attention_impl at dense (the same model)")
    assert not (tmp_path / "run").exists()
