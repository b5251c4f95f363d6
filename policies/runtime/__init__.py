"""Robot-side runtime: numpy + onnxruntime only (importable without torch, simulators or ROS)."""

from policies.runtime.chunking import ChunkedOnnxPolicy, ChunkExecutor, open_policy
from policies.runtime.contract import (
    CONTRACT_VERSION,
    METADATA_KEY,
    ActionSpec,
    ChunkSpec,
    Contract,
    ContractError,
    ObservationTerm,
)
from policies.runtime.observation import ObservationBuilder
from policies.runtime.onnx_policy import OnnxPolicy, PolicyFileError, load_contract

__all__ = [
    "CONTRACT_VERSION",
    "METADATA_KEY",
    "ActionSpec",
    "ChunkExecutor",
    "ChunkSpec",
    "ChunkedOnnxPolicy",
    "Contract",
    "ContractError",
    "ObservationBuilder",
    "ObservationTerm",
    "OnnxPolicy",
    "PolicyFileError",
    "load_contract",
    "open_policy",
]
