"""The frozen instruction encoder: offline, deterministic, unit-length, identified by its weights; instruction text
from outside is checked before it is encoded."""

from __future__ import annotations

import numpy as np
import pytest

from policies.nets import language
from policies.nets.language import LanguageError, check_identity, embed, encoder_identity


def test_embeddings_are_unit_length_deterministic_and_tell_colours_apart() -> None:
    texts = ["lift the red cube", "lift the blue cube", "pick up the red cube", "lift the red cube"]
    e = embed(texts)
    assert e.shape == (4, language.DIM) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(e[0], e[3])
    assert embed([]).shape == (0, language.DIM)
    assert float(e[0] @ e[1]) < 0.95  # the colour word moves the embedding


def test_the_encoder_is_identified_by_its_weights_and_another_is_refused() -> None:
    here = encoder_identity()
    assert here["name"] == language.ENCODER and len(here["sha256"]) == 64 and here["dim"] == 384
    check_identity(dict(here), "run")
    with pytest.raises(LanguageError, match=r"run was trained with instruction encoder sha256 'abc', this machine"):
        check_identity({**here, "sha256": "abc"}, "run")
    with pytest.raises(LanguageError, match="must be a mapping"):
        check_identity("minilm", "run")


@pytest.mark.parametrize(
    ("text", "message"),
    [(3, "must be text, got int"), ("x" * 257, "257 characters long"), ("lift\x07 it", "control characters")],
)
def test_malformed_instructions_are_refused_by_name(text: object, message: str) -> None:
    with pytest.raises(LanguageError, match=message):
        embed([text])  # type: ignore[list-item]


def test_token_outputs_are_unit_rows_padded_with_zeros_and_a_long_instruction_is_refused() -> None:
    texts = ["lift the red cube", "can you hold up the red box", ""]
    t = language.embed_tokens(texts, 12)
    assert t.shape == (3, 12 * language.DIM) and t.dtype == np.float32
    rows = t.reshape(3, 12, language.DIM)
    norms = np.linalg.norm(rows, axis=-1)
    # [CLS] + words + [SEP]: 6, 9 and 2 rows of unit length, then zero rows
    for i, n in enumerate((6, 9, 2)):
        np.testing.assert_allclose(norms[i, :n], 1.0, atol=1e-5)
        assert not norms[i, n:].any()
    np.testing.assert_array_equal(language.features(texts[:1], 12), t[:1])
    np.testing.assert_array_equal(language.features(texts[:1]), embed(texts[:1]))
    # the colour word's row is nearer the same colour word in another phrasing than another colour in the same one
    red, box, blue = rows[0, 3], rows[1, 6], language.embed_tokens(["lift the blue cube"], 12).reshape(12, -1)[3]
    assert float(red @ box) > float(red @ blue)
    with pytest.raises(LanguageError, match=r"instruction 'can you hold up the red box' is 9 tokens long; this "
                       r"policy reads at most 8 \(policy.language_tokens\)"):  # fmt: skip
        language.embed_tokens(texts, 8)
    with pytest.raises(LanguageError, match=r"instruction tokens must be in \[1, 64\], got 0"):
        language.embed_tokens(texts, 0)


def test_the_embedding_caches_keep_at_most_max_cached_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of distinct texts (an operator topic the node embeds) cannot grow the caches without bound; the
    newest stay, and a batch larger than the cap is still answered whole."""
    monkeypatch.setattr(language, "MAX_CACHED", 3)
    monkeypatch.setattr(language, "_CACHE", {})
    texts = [f"lift cube {i}" for i in range(5)]
    batch = embed(texts)
    assert batch.shape == (5, language.DIM) and list(language._CACHE) == texts[2:]
    np.testing.assert_array_equal(embed(texts[4:]), batch[4:])
