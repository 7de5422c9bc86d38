"""A masked-language-model view of an encoder: the model with its MLM head (the checkpoint's, or a
new one tied to the input embeddings), shared by DAPT (TMFT's upstream stage) and TSDAE's MLM
baseline. `head="authors"` always builds a new head and trains only its tied decoder."""

from __future__ import annotations

from trainables.core.errors import SweepInputError

HEADS = ("auto", "authors")
MLM_PROBABILITY = 0.15  # BERT's masking rate: 15 % of the tokens, 80/10/10 mask/random/kept


def check_model(model_path) -> None:
    """Fail early when the architecture has no masked-LM class in transformers."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    config = AutoConfig.from_pretrained(str(model_path))
    if type(config) not in MODEL_FOR_MASKED_LM_MAPPING:
        raise SweepInputError(
            f"DAPT: transformers has no masked-LM model for {config.model_type!r} ({model_path}); "
            "run --improvement ws for it instead."
        )


def mlm_model(model_path, head: str = "auto", random_weights: bool = False, seed: int = 0):
    """(AutoModelForMaskedLM, "pretrained" | "new"): the model with its MLM head, see the module doc."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(seed)
    if random_weights:
        model = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(str(model_path)))
        source = "new"
    else:
        model, info = AutoModelForMaskedLM.from_pretrained(str(model_path), output_loading_info=True)
        prefix = model.base_model_prefix + "."
        missing = set(info.get("missing_keys", ()))
        missing_base = sorted(k for k in missing if k.startswith(prefix))
        if missing_base:
            raise SweepInputError(
                f"DAPT: {model_path} lacks encoder weights {missing_base[:3]}; is it the right folder?"
            )
        source = "new" if missing else "pretrained"
        if head == "authors" and source == "pretrained":
            fresh = AutoModelForMaskedLM.from_config(model.config)
            fresh.base_model.load_state_dict(model.base_model.state_dict())
            model, source = fresh, "new"
    model.tie_weights()
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise SweepInputError(f"DAPT: the MLM decoder of {model_path} could not be tied to its input embeddings")
    if head == "authors":
        for name, parameter in model.named_parameters():  # a tied decoder is listed once, as the embeddings
            if not name.startswith(model.base_model_prefix + "."):
                parameter.requires_grad_(False)
    return model, source
