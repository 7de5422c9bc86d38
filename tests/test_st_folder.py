"""A saved encoder folder plus `write_sentence_transformer` loads in sentence-transformers and
gives the project's own pooled embeddings, for mean and CLS pooling, at layer 2 and layer 0."""

import shutil

import numpy as np
import pytest


@pytest.mark.parametrize("kind", ["bert", "electra-generator", "deberta-v2"])
@pytest.mark.parametrize("layer", [0, 2])
def test_sentence_transformers_loads_the_folder_as_the_project_pools(kind, layer, tiny_models, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    from trainables.encoders.loading import load_pretrained, truncate
    from trainables.encoders.st_folder import read_pooling, write_sentence_transformer
    from trainables.evaluation.zero_shot import encode_sentences
    from trainables.training.pair_training import copy_tokenizer_files

    sentences = ["A man is playing a guitar.", "Two dogs run on the beach.", "A woman slices an onion."]
    truncated = truncate(AutoModel.from_pretrained(tiny_models[kind]), layer).eval()
    embeddings = {}
    for pooling in ("mean", "cls"):
        folder = tmp_path / f"{pooling}"
        truncated.save_pretrained(folder)
        copy_tokenizer_files(tiny_models[kind], folder)
        write_sentence_transformer(folder, pooling, max_seq_length=128)
        assert read_pooling(folder) == pooling
        ours = encode_sentences(load_pretrained(folder), AutoTokenizer.from_pretrained(folder), sentences, pooling)
        if kind == "deberta-v2" and layer == 0:
            # transformers' DeBERTa-v2 cannot run with no layers, so neither can sentence-transformers on
            # this folder; the project's own loading (load_pretrained) runs it, as checked just above.
            assert np.isfinite(ours).all()
            continue
        loaded = SentenceTransformer(str(folder), device="cpu")
        assert loaded[0].auto_model.config.num_hidden_layers == layer
        embeddings[pooling] = loaded.encode(sentences, convert_to_numpy=True)
        np.testing.assert_allclose(embeddings[pooling], ours, atol=1e-5)
        shutil.rmtree(folder)
    if embeddings:
        assert not np.allclose(embeddings["mean"], embeddings["cls"])
