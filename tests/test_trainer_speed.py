"""Trainer speed options on the CPU: `trainer.compile` trains as eager does; the CUDA-only options (TF32, fused
AdamW, pinned copies) leave a CPU run as it was. Their CUDA side is in test_gpu.py."""
import functools

import pytest
import torch

from c4prep.training.batch_losses import DecoderLoss
from c4prep.training.config import load_config
from c4prep.training.config_errors import TrainConfigError
from c4prep.training.distributed import DistEnv
from c4prep.training.models.gpt import GPT, gpt_config
from c4prep.training.optim import build_optimizer, use_fused_kernel
from c4prep.training.schedules import build_schedule
from c4prep.training.step_graphs import CapturedSteps, prepare_optimizer
from c4prep.training.trainer import Trainer

VOCAB = 40


def decoder_batches(step: int, rows_vary: bool = False):
    """Rows of 16 random tokens, a function of the step alone: 4 a step, or 3-5 (``rows_vary``, as re-packed rows
    come)."""
    while True:
        rows = 3 + step % 3 if rows_vary else 4
        tokens = torch.randint(0, VOCAB, (rows, 17), generator=torch.Generator().manual_seed(step))
        yield {"input_tokens": tokens[:, :-1], "target_tokens": tokens[:, 1:], "loss_weights": torch.ones(rows, 16)}
        step += 1


def gpt_trainer(run_dir, *overrides: str, device: str = "cpu", n_layer: int = 1) -> Trainer:
    settings = load_config(["trainer.max_steps=3", "trainer.checkpoint_every=0", "trainer.progress=false",
                            "trainer.tensorboard=false", "trainer.global_batch_size=4", "trainer.micro_batch_size=4",
                            *overrides]).trainer
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_tiny", VOCAB, n_layer=n_layer, n_embd=16))  # dropout 0: compiled and eager RNG differ
    optimizer = build_optimizer("adamw", model.parameters(), lr=1e-2)
    return Trainer(settings, run_dir, model, DecoderLoss(), optimizer, build_schedule("constant", optimizer),
                   decoder_batches, 1, DistEnv(), torch.device(device),
                   checkpoint_extra={"model_spec": {"name": "gpt"}, "config": {"stage": "test"}})


def test_compiled_training_matches_eager(tmp_path):
    eager = [s.loss for s in gpt_trainer(tmp_path / "eager").fit()]
    trainer = gpt_trainer(tmp_path / "compiled", "trainer.compile=true")
    compiled = [s.loss for s in trainer.fit()]
    assert trainer.forward_module is not trainer.model  # the forward passes went through torch.compile
    assert compiled == pytest.approx(eager, rel=1e-4)
    assert not any(name.startswith("_orig_mod") for name in trainer.model.state_dict())  # checkpoints unchanged


def test_losses_read_at_log_steps_train_as_losses_read_every_step(tmp_path):
    """``trainer.loss_check=log`` only changes when the host reads the losses: same losses, gradient norms and
    weights; the logged step times are the interval's mean."""
    every_step = gpt_trainer(tmp_path / "step", "trainer.max_steps=5", "trainer.log_every=2")
    at_logs = gpt_trainer(tmp_path / "log", "trainer.max_steps=5", "trainer.log_every=2", "trainer.loss_check=log")
    expected, read = every_step.fit(), at_logs.fit()
    assert [(s.loss, s.grad_norm, s.lr) for s in read] == [(s.loss, s.grad_norm, s.lr) for s in expected]
    assert read[0].seconds == read[1].seconds and read[2].seconds == read[3].seconds  # read at steps 2, 4 and 5
    for name, value in every_step.model.state_dict().items():
        assert torch.equal(at_logs.model.state_dict()[name], value)


def test_compile_mode_reaches_torch_compile(tmp_path, monkeypatch):
    modes = []
    monkeypatch.setattr(torch, "compile", lambda module, mode=None: modes.append(mode) or module)
    graphs = gpt_trainer(tmp_path / "graphs", "trainer.compile=true", "trainer.compile_mode=reduce-overhead")
    default = gpt_trainer(tmp_path / "default", "trainer.compile=true")
    assert modes == ["reduce-overhead", None]
    assert graphs.settings.cuda_graphs and not default.settings.cuda_graphs  # only CUDA graphs mark each step's start


@pytest.mark.parametrize("rows_vary, compilations", [(True, 1), (False, 2)])
def test_varying_row_counts_compile_once_when_the_trainer_is_told(tmp_path, monkeypatch, rows_vary, compilations):
    """Told that rows vary (re-packed rows), the compiled forward takes the row count as dynamic from the first
    batch: one compilation, not a static one and then a dynamic one at the second shape."""
    from torch._dynamo.testing import CompileCounter

    counter, compile_with = CompileCounter(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, mode=None: compile_with(module, backend=counter))
    torch._dynamo.reset()
    trainer = gpt_trainer(tmp_path / "compiled", "trainer.compile=true")
    varying_row_batches = functools.partial(decoder_batches, rows_vary=True)
    trainer.train_batches, trainer.rows_vary = varying_row_batches, rows_vary
    losses = [s.loss for s in trainer.fit()]
    assert counter.frame_count == compilations
    eager = gpt_trainer(tmp_path / "eager")
    eager.train_batches = varying_row_batches
    assert losses == pytest.approx([s.loss for s in eager.fit()], rel=1e-5)


@pytest.mark.parametrize("rows_vary, compilations", [(True, 1), (False, 2)])
def test_compiled_blocks_compile_one_layer_for_all_and_train_as_eager(tmp_path, monkeypatch, rows_vary,
                                                                      compilations):
    """``trainer.compile_scope=blocks``: the GPT's two layers run one compiled block (compiled once, or once more at
    a second row count when the trainer is not told rows vary), train as eager, and are eager again outside the
    training forward passes (validation, generation, checkpoints)."""
    from torch._dynamo.testing import CompileCounter

    counter, compile_with = CompileCounter(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, mode=None: compile_with(function, backend=counter))
    torch._dynamo.reset()
    trainer = gpt_trainer(tmp_path / "blocks", "trainer.compile=true", "trainer.compile_scope=blocks", n_layer=2)
    varying_row_batches = functools.partial(decoder_batches, rows_vary=True)
    trainer.train_batches, trainer.rows_vary = varying_row_batches, rows_vary
    losses = [s.loss for s in trainer.fit()]
    assert trainer.forward_module is trainer.model and len(trainer.compiled_blocks.blocks) == 2
    assert counter.frame_count == compilations
    eager = gpt_trainer(tmp_path / "eager", n_layer=2)
    eager.train_batches = varying_row_batches
    assert losses == pytest.approx([s.loss for s in eager.fit()], rel=1e-5)
    assert all("forward" not in vars(block) for block in trainer.model.blocks)
    trainer.model(torch.zeros(2, 5, dtype=torch.long))  # eager outside training: nothing more compiled
    assert counter.frame_count == compilations
    assert list(trainer.model.state_dict()) == list(eager.model.state_dict())


def test_compiled_blocks_need_repeated_blocks(tmp_path):
    with pytest.raises(TrainConfigError, match="found no repeated blocks in GPT"):
        gpt_trainer(tmp_path / "one_layer", "trainer.compile=true", "trainer.compile_scope=blocks", n_layer=1)


def test_compiled_t5_blocks_give_the_eager_logits_and_gradients(monkeypatch):
    """T5 through :class:`CompiledBlocks` (Dynamo and AOT autograd, eager kernels: the tracing is what is tested): the
    encoder's blocks share one graph and the decoder's (with cross-attention) another; logits and gradients as eager."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from c4prep.training.compiled_blocks import CompiledBlocks
    from c4prep.training.models.t5 import T5, t5_config

    counter, compile_with = CompileCounterWithBackend("aot_eager"), torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, mode=None: compile_with(function, backend=counter))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = T5(t5_config("t5_v1_0_tiny", VOCAB, dropout_rate=0.0))
    encoder_tokens, decoder_tokens = torch.randint(2, VOCAB, (2, 12)), torch.randint(2, VOCAB, (2, 5))

    def logits_and_gradients():
        model.zero_grad()
        logits = model(encoder_tokens, decoder_tokens)
        logits.square().mean().backward()
        return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}
    eager = logits_and_gradients()
    with CompiledBlocks(model, None).training(rows_vary=False):
        compiled = logits_and_gradients()
    assert counter.frame_count == 2
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-7)


def test_repeated_blocks_are_each_stacks_layers():
    from c4prep.training.compiled_blocks import repeated_blocks
    from c4prep.training.experiments.adavae.model import AdaVAE, AdaVAEConfig
    from c4prep.training.models.t5 import T5, t5_config

    gpt = GPT(gpt_config("gpt_tiny", VOCAB, n_layer=3))
    assert repeated_blocks(gpt) == list(gpt.blocks)
    t5 = T5(t5_config("t5_tiny", VOCAB))
    assert repeated_blocks(t5) == [*t5.encoder.blocks, *t5.decoder.blocks]
    vae = AdaVAE(gpt, AdaVAEConfig(latent_size=6, adapter_size=5))  # its per-layer PSA projections are single Linears
    assert repeated_blocks(vae) == [*gpt.blocks, *vae.encoder_adapters, *vae.decoder_adapters]


@pytest.mark.parametrize("mode, multiple", [("default", 1), ("reduce-overhead", 8)])
def test_a5_pretraining_with_cuda_graphs_gets_micro_batches_of_a_multiple_of_8_rows(tmp_path, shared_data, mode,
                                                                                    multiple):
    """Re-packed A5 rows come in a few shapes when the forward passes replay CUDA graphs (one graph per shape)."""
    from c4prep.training.experiments.cs224n_a5.stages import char_corruption_corpus
    from c4prep.training.stages.run import rows_pretrain_trainer, start_run

    cfg = load_config(["experiment=cs224n_a5_pretrain", f"data.corpus={shared_data / 'cs224n_a5' / 'wiki.txt'}",
                       "trainer.compile=true", f"trainer.compile_mode={mode}", "trainer.device=cpu",
                       "trainer.num_workers=0", "trainer.progress=false", "trainer.tensorboard=false",
                       f"output_dir={tmp_path}", "resume=never"])
    trainer = rows_pretrain_trainer(cfg, start_run(cfg), char_corruption_corpus(cfg))
    rows = [len(batch["input_tokens"]) for _, batch in zip(range(6), trainer.train_batches(0))]
    assert all(count % multiple == 0 for count in rows) and all(count < 128 for count in rows)
    assert multiple == 8 or any(count % 8 for count in rows)  # without graphs, the packed count is left as it is
    assert trainer.rows_vary  # so the compiled forward takes the row count as dynamic from the first batch


@pytest.mark.parametrize("overrides, message", [
    (["trainer.compile_mode=reduce-overhead"], "trainer.compile_mode=reduce-overhead needs trainer.compile=true"),
    (["trainer.compile=true", "trainer.compile_mode=fast"], "trainer.compile_mode"),
    (["trainer.compile_scope=blocks"], "trainer.compile_scope=blocks needs trainer.compile=true"),
    (["trainer.compile=true", "trainer.compile_scope=layers"], "trainer.compile_scope"),
    (["trainer.loss_check=never"], "trainer.loss_check"),
    (["trainer.capture_steps=true"], "trainer.capture_steps=true needs trainer.loss_check=log"),
    (["trainer.capture_steps=true", "trainer.loss_check=log", "trainer.compile=true",
      "trainer.compile_mode=reduce-overhead"], "captures the whole step itself"),
])
def test_speed_option_mistakes_are_refused(overrides, message):
    with pytest.raises(TrainConfigError, match=message):
        load_config(overrides)


def test_cuda_only_options_leave_a_cpu_run_alone(tmp_path):
    precision = torch.get_float32_matmul_precision()
    trainer = gpt_trainer(tmp_path / "cpu")
    trainer.fit()
    assert trainer.forward_module is trainer.model
    assert torch.get_float32_matmul_precision() == precision
    assert all(group["fused"] is None for group in trainer.optimizer.param_groups)
    captured = gpt_trainer(tmp_path / "captured", "trainer.capture_steps=true", "trainer.loss_check=log")
    captured.fit()
    assert captured.captured_steps is None and captured.optimizer.param_groups[0]["capturable"] is False
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(captured.model.state_dict()[name], value)


def adamw(fused: bool | None = None, **options) -> tuple[torch.optim.Optimizer, torch.nn.Parameter]:
    weight = torch.nn.Parameter(torch.linspace(-1, 1, 12).reshape(3, 4))
    return torch.optim.AdamW([weight], lr=0.1, weight_decay=0.1, fused=fused, **options), weight


def test_use_fused_kernel_switches_a_fresh_adamw_and_keeps_its_updates():
    (fused, fused_weight), (plain, plain_weight) = adamw(), adamw()
    assert use_fused_kernel(fused) and fused.param_groups[0]["fused"] is True
    for _ in range(3):
        for optimizer, weight in ((fused, fused_weight), (plain, plain_weight)):
            (weight ** 3).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    torch.testing.assert_close(fused_weight, plain_weight)
    assert not use_fused_kernel(fused)  # it holds state now


@pytest.mark.parametrize("optimizer", [
    lambda: adamw(fused=False)[0],
    lambda: adamw(foreach=True)[0],
    lambda: build_optimizer("adafactor", [torch.nn.Parameter(torch.ones(3))], lr=0.1),
], ids=["fused-off", "foreach", "adafactor"])
def test_use_fused_kernel_leaves_other_choices_alone(optimizer):
    optimizer = optimizer()
    before = [dict(group) for group in optimizer.param_groups]
    assert not use_fused_kernel(optimizer)
    assert [dict(group) for group in optimizer.param_groups] == before


def test_learning_rates_held_on_the_device_are_read_with_the_queued_losses(tmp_path):
    """Captured steps keep the learning rate as a tensor their schedule fills: the queue reads it with the losses,
    so the logged steps are those of a float learning rate."""
    floats, tensors = (gpt_trainer(tmp_path / name, "trainer.max_steps=5", "trainer.log_every=2",
                                   "trainer.loss_check=log") for name in ("float", "tensor"))
    tensors.optimizer.param_groups[0]["lr"] = torch.tensor(1e-2, dtype=torch.float64)
    expected, read = floats.fit(), tensors.fit()
    assert all(isinstance(s.lr, float) for s in read)
    assert [(s.loss, s.grad_norm, s.lr) for s in read] == [(s.loss, s.grad_norm, s.lr) for s in expected]


def test_a_captured_runs_checkpoint_is_an_uncaptured_runs(tmp_path):
    """What ``trainer.capture_steps`` changes in the optimizer (capturable, the learning rate a tensor) is not saved:
    the checkpoint equals the uncaptured run's, so it resumes either way, on any device. The learning rate is the
    float32 one the captured steps used (fused AdamW computes in float32 either way)."""
    plain, captured = (gpt_trainer(tmp_path / name, "trainer.max_steps=2") for name in ("plain", "captured"))
    plain.fit(), captured.fit()
    prepare_optimizer(captured.optimizer, torch.device("cpu"))
    captured.captured_steps = CapturedSteps(captured._update)
    for trainer in (plain, captured):
        trainer.scheduler.step()  # fills the captured run's learning rate tensor in place
    assert isinstance(captured.optimizer.param_groups[0]["lr"], torch.Tensor)
    expected, saved = plain.state_dict(), captured.state_dict()
    float32_lr = float(torch.tensor(expected["optimizer"]["param_groups"][0]["lr"], dtype=torch.float32))
    assert saved["optimizer"]["param_groups"] == [{**group, "lr": float32_lr}
                                                  for group in expected["optimizer"]["param_groups"]]
    assert saved["scheduler"] == {**expected["scheduler"], "_last_lr": [float32_lr]}
    for index, state in expected["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(saved["optimizer"]["state"][index][key], value)


@pytest.mark.parametrize("case, message", [("adafactor", "needs torch's AdamW"), ("step_hook", "does not apply"),
                                           ("grad_hook", "does not apply")])
def test_steps_that_cannot_be_captured_are_refused(tmp_path, case, message):
    """Checked at the first step of a CUDA run with trainer.capture_steps=true, before anything is captured."""
    trainer = gpt_trainer(tmp_path, "trainer.capture_steps=true", "trainer.loss_check=log")
    if case == "adafactor":
        trainer.optimizer = build_optimizer("adafactor", trainer.model.parameters(), lr=1e-2)
    else:
        setattr(trainer, case, lambda step: None)
    with pytest.raises(TrainConfigError, match=message):
        trainer._start_capturing()
    assert trainer.captured_steps is None


def test_a_step_that_cannot_be_captured_is_refused_in_one_line(monkeypatch):
    """What PyTorch raises when a capture fails (here at its start) becomes a one-line TrainConfigError."""
    class FailingCapture:
        def __init__(self, graph, **options):
            pass

        def __enter__(self):
            raise RuntimeError("operation not permitted when stream is capturing\nCUDA kernel errors might be ...")

        def __exit__(self, *exc):
            return False
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)
    monkeypatch.setattr(torch.cuda, "graph", FailingCapture)
    steps = CapturedSteps(lambda micro_batches: pytest.fail("a failed capture runs no step"))
    message = r"cannot be captured as a CUDA graph \(operation not permitted when stream is capturing\); run it"
    with pytest.raises(TrainConfigError, match=message):
        steps._capture([{"input_tokens": torch.zeros(2, 3)}])
