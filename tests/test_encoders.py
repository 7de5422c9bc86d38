"""Physical truncation equals slicing the full model's hidden states; parameter counts match a
hand computation from the config; models are found or refused with a useful message."""
import pytest
import torch
from transformers import AutoTokenizer

from trainables.encoders import (
    count_parameters, encode, load_config, load_pretrained, mean_pool, model_depth, resolve_model, truncate,
)
from trainables.errors import SweepInputError

SENTENCES = ["A man is playing a guitar.", "Two dogs run.", "A woman is slicing an onion on the table."]


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "electra-generator", "mpnet"])
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
    elif kind.startswith("electra"):
        e = config.embedding_size
        embeddings = v * e + p * e + config.type_vocab_size * e + 2 * e + (e * h + h if e != h else 0)
    else:
        embeddings = v * h + p * h + config.type_vocab_size * h + 2 * h
    return embeddings + layers * per_layer


@pytest.mark.parametrize("kind", ["bert", "electra-discriminator", "electra-generator", "mpnet"])
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
