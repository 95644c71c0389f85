"""A trained GPT or AdaVAE run, read back for the AdaVAE stages: its vocabulary and model."""
from __future__ import annotations

from ...checkpoint import CheckpointError, load_checkpoint
from ...config_errors import TrainConfigError
from ...config_groups import TrainConfig
from ...config_runs import trained_run_folder
from ...data.sentence_files import VOCABULARY_FILE, SentenceDataError, SentenceVocabulary, WordVocabulary
from ...stages.model_setup import model_from_checkpoint
from .gpt2_tokenizer import TOKENIZER_DIR, GPT2TokenizerVocabulary
from .model import AdaVAE


def run_vocabulary(checkpoint: str) -> SentenceVocabulary:
    """The vocabulary a GPT or AdaVAE run folder keeps: its copy of a GPT-2 tokenizer, else its word vocabulary."""
    folder = trained_run_folder(checkpoint)
    try:
        if (folder / TOKENIZER_DIR).is_dir():
            return GPT2TokenizerVocabulary.load(folder)
        return WordVocabulary.load(folder / VOCABULARY_FILE)
    except (SentenceDataError, ImportError) as error:
        raise TrainConfigError(f"init_from={checkpoint}: {error}") from None


def trained_vae(cfg: TrainConfig) -> tuple[AdaVAE, SentenceVocabulary, int]:
    """The AdaVAE run ``init_from`` names (eval mode, on the CPU: a stage reads it before it starts its run, so that
    a refusal leaves no run folder behind), its vocabulary and its step."""
    if not cfg.init_from:
        raise CheckpointError(f"stage={cfg.stage} needs init_from=<AdaVAE run folder or checkpoint>")
    state = load_checkpoint(cfg.init_from)
    if state["model_spec"].get("name") != "adavae":
        raise TrainConfigError(f"init_from={cfg.init_from} is not an AdaVAE checkpoint; train one with "
                               "stage=finetune model=adavae")
    model = model_from_checkpoint(state).eval()
    return model, run_vocabulary(cfg.init_from), int(state["step"])
