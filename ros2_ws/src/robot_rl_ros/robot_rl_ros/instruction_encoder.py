"""The policy node's instruction encoder (``embed_instructions``): an instruction text outside the contract's table
embedded by the encoder the policy was trained with (:mod:`policies.nets.language`, imported only here and only when
the parameter asks for it: torch and sentence-transformers on the robot computer). The one module of the node's room
that reaches ``policies.nets`` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def instruction_embedder(language: dict[str, Any]) -> Callable[[str], np.ndarray]:
    """What embeds an instruction text as the policy of ``language`` (a contract's ``chunk.language``) reads it,
    with the encoder it was trained with; loaded and tried once here, so that the first operator text does not wait
    for it.

    Raises:
        ValueError: The encoder is not installed, or another one is (names the field).
    """
    try:
        from policies.nets import language as encoder  # torch and sentence-transformers: only where asked for
    except ImportError as exc:
        raise ValueError(f"parameter embed_instructions needs the instruction encoder's packages here: {exc}") from None
    encoder.check_identity(language["encoder"], "the model")
    tokens = int(language.get("tokens", 0))
    encoder.features(list(language["instructions"])[:1], tokens)
    return lambda text: encoder.features([text], tokens)[0]
