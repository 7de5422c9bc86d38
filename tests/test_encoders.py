"""Physical truncation equals slicing the full model's hidden states; parameter counts match a
hand computation from the config; models are found or refused with a useful message."""

import pytest
import torch
from transformers import AutoTokenizer

from trainables.core.errors import SweepInputError
from trainables.encoders.loading import (
    count_parameters,
    encode,
    load_config,
    load_pretrained,
    mean_pool,
    model_depth,
    paper_parameter_count,
    random_init,
    resolve_model,
    truncate,
)

SENTENCES = ["A man is playing a guitar.", "Two dogs run.", "A woman is slicing an onion on the table."]


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "electra-generator", "mpnet", "deberta-v2"])
def test_truncated_output_equals_full_hidden_state(tiny_models, kind):
    path = tiny_models[kind]
    full = load_pretrained(path).eval()
    batch = AutoTokenizer.from_pretrained(path)(SENTENCES, padding=True, return_tensors="pt")
    assert batch["attention_mask"].min() == 0, "the batch must contain padding to test the mask"
    with torch.no_grad():
        hidden = full(**batch, output_hidden_states=True).hidden_states
        depth = model_depth(full.config)
        for layer in range(depth + 1):
            truncated = truncate(full, layer).eval()
            assert truncated.config.num_hidden_layers == layer
            expected = mean_pool(hidden[layer], batch["attention_mask"])
            got = encode(truncated, batch["input_ids"], batch["attention_mask"])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert model_depth(full.config) == 4, "truncating must not change the cached full model"


def _hand_count(config, layers: int, kind: str) -> int:
    h, i, v, p = config.hidden_size, config.intermediate_size, config.vocab_size, config.max_position_embeddings
    per_layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    if kind == "mpnet":
        embeddings = v * h + p * h + 2 * h + config.relative_attention_num_buckets * config.num_attention_heads
    elif kind == "deberta-v2":  # no absolute positions; relative position embeddings and their LayerNorm
        embeddings = v * h + 2 * h + 2 * config.position_buckets * h + 2 * h
    elif kind.startswith("electra"):
        e = config.embedding_size
        embeddings = v * e + p * e + config.type_vocab_size * e + 2 * e + (e * h + h if e != h else 0)
    else:
        embeddings = v * h + p * h + config.type_vocab_size * h + 2 * h
    return embeddings + layers * per_layer


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "electra-generator", "mpnet", "deberta-v2"])
def test_parameter_count_is_the_truncated_model_without_pooler(tiny_models, kind):
    full = load_pretrained(tiny_models[kind])
    config = load_config(tiny_models[kind])
    for layer in (0, 1, 4):
        assert count_parameters(truncate(full, layer)) == _hand_count(config, layer, kind)


def test_layer_beyond_depth_is_refused(tiny_models):
    full = load_pretrained(tiny_models["bert"])
    with pytest.raises(SweepInputError, match="outside 0..4"):
        truncate(full, 5)


def test_missing_local_directory_is_named(tmp_path):
    with pytest.raises(SweepInputError, match="does not exist"):
        resolve_model(str(tmp_path / "no-such-model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SweepInputError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_unreachable_hub_model_names_the_model_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EMBSWEEP_MODELS_DIR", str(tmp_path))
    with pytest.raises(SweepInputError) as error:
        resolve_model("google/electra-base-discriminator")
    assert "google/electra-base-discriminator" in str(error.value) and "--models" in str(error.value)
    with pytest.raises(SweepInputError, match="embsweep-assets install sentence-transformers/all-MiniLM-L6-v2"):
        resolve_model("sentence-transformers/all-MiniLM-L6-v2")


def test_hub_id_maps_to_installed_local_copy(monkeypatch, tmp_path, tiny_models):
    import shutil

    monkeypatch.setenv("EMBSWEEP_MODELS_DIR", str(tmp_path))
    shutil.copytree(tiny_models["bert"], tmp_path / "org" / "model")
    assert resolve_model("org/model") == tmp_path / "org" / "model"


# The public configs of the paper's models: the kind, then hidden, layers, heads, intermediate, embedding size and
# vocabulary (electra_paper.SHAPE_FIELDS).
PAPER_CONFIGS = {
    "electra-base-generator": ("electra", 256, 12, 4, 1024, 768, 30522),
    "electra-large-generator": ("electra", 256, 24, 4, 1024, 1024, 30522),
    "electra-small-discriminator": ("electra", 256, 12, 4, 1024, 128, 30522),
    "deberta-v3-base": ("deberta-v2", 768, 12, 12, 3072, 768, 128100),
}


@pytest.mark.parametrize(
    "model, layer, published",
    [
        ("electra-base-generator", 12, 33.31),
        ("electra-large-generator", 24, 50.74),
        ("electra-small-discriminator", 1, 4.76),
        ("electra-small-discriminator", 12, 13.45),
        ("deberta-v3-base", 7, 148.00),
    ],
)
def test_paper_parameter_counts_match_the_published_ones(model, layer, published):
    """Table 1-2 of the ELECTRA paper count the embeddings and the first l layers only."""
    from transformers import AutoModel, DebertaV2Config, ElectraConfig

    from trainables.encoders.tiny import DEBERTA_V3
    from trainables.methods.tmft.paper import SHAPE_FIELDS

    kind, *shape = PAPER_CONFIGS[model]
    common = dict(zip(SHAPE_FIELDS, shape), max_position_embeddings=512)
    if kind == "electra":
        config = ElectraConfig(**common)
    else:
        config = DebertaV2Config(**common, **DEBERTA_V3, position_buckets=256)
    with torch.device("meta"):  # shapes only: nothing is allocated or initialised
        full = AutoModel.from_config(config)
    truncated = truncate(full, layer)
    assert round(paper_parameter_count(truncated) / 1e6, 2) == published
    assert count_parameters(truncated) >= paper_parameter_count(truncated)


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "electra-generator", "mpnet", "deberta-v2"])
def test_random_init_at_every_layer_runs(tiny_models, kind):
    batch = AutoTokenizer.from_pretrained(tiny_models[kind])(SENTENCES, padding=True, return_tensors="pt")
    for layer in (0, 2):
        model = random_init(tiny_models[kind], layer, seed=0).eval()
        with torch.no_grad():
            out = encode(model, batch["input_ids"], batch["attention_mask"])
        assert out.shape == (3, model.config.hidden_size) and torch.isfinite(out).all()
