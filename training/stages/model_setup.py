"""The model a stage trains or scores: fresh from the ``model:`` section, or from a checkpoint (``init_from``)."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

from ..checkpoint import CheckpointError, load_checkpoint
from ..config_errors import TrainConfigError
from ..config_groups import MODEL_SCHEMAS, TrainConfig, model_settings
from ..config_runs import REGULARISATION_FIELDS, RUN_CONFIG, recorded_settings, trained_run_folder
from ..data.token_rows import RowBuilder
from ..data.decoder_rows import DecoderRowBuilder
from ..models import build_model
from ..models.gpt import GPT




def model_from_config(cfg: TrainConfig, vocab_size: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model the ``model:`` section names, initialised from ``seed``; also returns its spec for checkpoints."""
    spec = {**model_settings(cfg.model), "vocab_size": vocab_size}
    torch.manual_seed(cfg.seed)
    return _build(spec), spec


def model_from_init(cfg: TrainConfig, vocab_size: int, remedy: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """``init_from``'s model (weights and architecture, :func:`finetuning_state`'s dropout) and its spec, checked
    as :func:`init_state` checks it."""
    state = init_state(cfg, vocab_size, remedy)
    return model_from_checkpoint(state), state["model_spec"]


def init_state(cfg: TrainConfig, vocab_size: int, remedy: str) -> dict[str, Any]:
    """``init_from``'s checkpoint with :func:`finetuning_state`'s dropout; a one-line error, ending with ``remedy``,
    when it is not the model family of the ``model:`` section or its ids are not the data's ``vocab_size``."""
    state = finetuning_state(load_checkpoint(cfg.init_from), cfg)
    family, configured = state["model_spec"].get("name"), cfg.model.name
    if family != configured:
        raise TrainConfigError(f"init_from={cfg.init_from} is a {family} checkpoint but the config's model is "
                               f"{configured}: choose a {family} model preset so the data rows fit the model")
    check_model_settings(cfg, state["model_spec"])
    checkpoint_ids = state["model_spec"].get("vocab_size")
    if checkpoint_ids != vocab_size:
        raise TrainConfigError(f"init_from={cfg.init_from} has {checkpoint_ids} ids, the data's vocabulary "
                               f"{vocab_size}: {remedy}")
    return state


def differing_fields(spec: Mapping[str, Any], other: Mapping[str, Any], ignored: Collection[str] = ()) -> list[str]:
    """The fields, sorted, that two model specs set to different values (a field one leaves out: None), but
    ``ignored``."""
    return sorted(key for key in spec.keys() | other.keys() if key not in ignored and spec.get(key) != other.get(key))


CHECKPOINT_FIELDS = ("vocab_size", "adapter_dim")  # set by the data and finetune.adapter_dim, not model settings


def check_model_settings(cfg: TrainConfig, checkpoint_spec: dict[str, Any]) -> None:
    """A one-line error when the ``model:`` section sets the architecture of ``init_from``'s model of the same family
    otherwise (``model=t5_small`` for a t5_tiny run), which the checkpoint's would silently replace; the dropout may
    differ (:func:`finetuning_state`). So is a model of another family (an AdaVAE's spec is its own) where the run
    folder records its model, which the stages take unless ``model=`` is given."""
    settings = model_settings(cfg.model)
    family, configured = checkpoint_spec.get("name"), settings.get("name")
    folder = trained_run_folder(cfg.init_from)
    recorded = (folder / RUN_CONFIG).is_file()
    if configured != family and family in MODEL_SCHEMAS and recorded:
        if _is_the_record(settings, recorded_settings(folder).get("model")):  # no model setting was given
            raise TrainConfigError(f"init_from={cfg.init_from} holds a {family} model, but its run folder's "
                                   f"{RUN_CONFIG} records a {configured} one: the checkpoint is not the run's, or "
                                   f"{RUN_CONFIG} was changed; restore the run's files")
        raise TrainConfigError(f"init_from={cfg.init_from} is a {family} checkpoint, but the model settings give a "
                               f"{configured} model: the model comes from init_from, so leave out model= (the run's "
                               "is used) or give the one it trained with")
    if configured != family:
        return
    differing = differing_fields(settings, checkpoint_spec, ignored={*REGULARISATION_FIELDS, *CHECKPOINT_FIELDS})
    if differing:
        key = "size" if "size" in differing else differing[0]  # a preset's fields differ because it does
        held, given = (shown_setting(spec, key) for spec in (checkpoint_spec, settings))
        if not recorded:
            raise TrainConfigError(f"init_from={cfg.init_from} holds a model with {key}={held}, the model settings "
                                   f"give {given}, and its run folder has no {RUN_CONFIG} to take the run's from: give "
                                   "the model= it trained with")
        if _is_the_record(settings, recorded_settings(folder).get("model")):  # no model setting was given
            raise TrainConfigError(f"init_from={cfg.init_from} holds a model with {key}={held}, but its run folder's "
                                   f"{RUN_CONFIG} records {given}: the checkpoint is not the run's, or {RUN_CONFIG} "
                                   "was changed; restore the run's files, or give the model settings it trained with")
        raise TrainConfigError(f"init_from={cfg.init_from} holds a model with {key}={held}, the model settings give "
                               f"{given}: the model comes from init_from, so leave out the model settings (the run's "
                               "are used) or give the ones it trained with")


def _is_the_record(settings: Mapping[str, Any], recorded_model: Any) -> bool:
    """Whether model ``settings`` are those a run folder records (``recorded_model``, its ``model:`` section), as
    the stages take them where none is given; the dropout a fine-tune sets aside."""
    if not isinstance(recorded_model, Mapping):
        return False
    recorded = {name: value for name, value in recorded_model.items() if value is not None}
    return not differing_fields(settings, recorded, ignored=REGULARISATION_FIELDS)


def shown_setting(spec: Mapping[str, Any], key: str) -> str:
    """A spec's model setting as a message quotes it: where the spec leaves it unset, its size preset's (or the
    model's default)."""
    if spec.get(key) is not None:
        return repr(spec[key])
    return f"that of size={spec['size']!r}" if spec.get("size") else "unset (the default)"


def initial_model(cfg: TrainConfig, vocab_size: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model to pre-train: ``init_from``'s (continued pre-training) when set, else a fresh one from the
    ``model:`` section; and its spec."""
    if not cfg.init_from:
        return model_from_config(cfg, vocab_size)
    return model_from_init(cfg, vocab_size, "continue pre-training on data encoded with the checkpoint's vocabulary")


def finetuning_state(state: dict[str, Any], cfg: TrainConfig) -> dict[str, Any]:
    """A checkpoint to fine-tune from: its weights and architecture, with the dropout that the config's ``model:``
    section sets when it names the same model family (e.g. CS224N A5's 0.1 when fine-tuning a model pre-trained
    without dropout). Unset fields keep the checkpoint's value."""
    if cfg.model.name != state["model_spec"].get("name"):
        return state
    settings = model_settings(cfg.model)
    overrides = {name: settings[name] for name in REGULARISATION_FIELDS if name in settings}
    return {**state, "model_spec": {**state["model_spec"], **overrides}}


def model_from_checkpoint(state: dict[str, Any], strict: bool = True) -> torch.nn.Module:
    """The model a checkpoint's spec describes, its weights loaded (``strict=False``: new modules such as adapters
    keep their initialisation)."""
    model = _build(state["model_spec"])
    try:
        model.load_state_dict(state["model"], strict=strict)
    except RuntimeError:
        raise CheckpointError(f"the checkpoint's weights do not fit the {state['model_spec'].get('name')} model its "
                              "model_spec describes (missing or mis-shaped tensors; --debug lists them): pass a "
                              "checkpoint that `train` wrote") from None
    return model


def _build(spec: dict[str, Any]) -> torch.nn.Module:
    try:
        return build_model(**spec)
    except (TypeError, ValueError) as error:
        raise TrainConfigError(f"bad model settings {spec}: {error}") from None
    except RuntimeError as error:  # torch's allocators: "you tried to allocate 640000262144 bytes", CUDA's OOM
        if "allocate" not in str(error):
            raise
        reason = str(error).strip().splitlines()[-1]
        raise TrainConfigError(f"the {spec.get('name')} model of {spec.get('vocab_size'):,} ids does not fit in "
                               f"memory ({reason}): use a smaller model or vocabulary") from None


def check_row_width_fits(model: torch.nn.Module, width: int,
                         shorter: str = "give the data shorter rows (data.block_size, data.max_words)") -> None:
    """A GPT must have a position for every position of the rows it is given (``width``): one more was a traceback
    from its forward pass. ``shorter``: how the rows get shorter."""
    if isinstance(model, GPT) and width > model.max_length:
        limit = ("model.block_size - 1 with synthesizer attention" if model.config.attention == "synthesizer"
                 else "model.block_size")
        raise TrainConfigError(f"rows of {width} positions exceed the model's {model.max_length} ({limit}): "
                               f"{shorter} or the model more positions")


def check_rows_fit(model: torch.nn.Module, row_builder: RowBuilder) -> None:
    """A GPT must have positions for every decoder row position (:func:`check_row_width_fits`)."""
    if isinstance(model, GPT) and isinstance(row_builder, DecoderRowBuilder):
        check_row_width_fits(model, row_builder.length, "give the objective shorter rows (objective.inputs_length and "
                             f"targets_length; for objective=lm targets_length={model.max_length + 1})")
