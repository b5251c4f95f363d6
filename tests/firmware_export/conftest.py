"""Hand-made ONNX graphs with a contract, for the firmware exporter's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from policies.runtime.contract import METADATA_KEY, ActionSpec, Contract, ObservationTerm

OBS, ACT = 6, 4


def contract(obs: int = OBS, act: int = ACT) -> Contract:
    """Plain contract for test graphs: one signal ``x``, normalised commands in [-1000, 1000]."""
    return Contract(
        task="op-test",
        control_period_s=0.002,
        observation=[ObservationTerm("x", obs, "x")],
        action=ActionSpec(act, [f"u{i}" for i in range(act)], "normalized", [1.0] * act, [0.0] * act,
                          [-1000.0] * act, [1000.0] * act),
        input_name="x",
        output_name="y",
    )  # fmt: skip


def every_operator_graph(rng: np.random.Generator) -> onnx.ModelProto:
    """``x [N, 6] -> [N, 4]`` through every operator the C generator supports (with broadcasting constants)."""

    def w(name: str, *shape: int, scale: float = 0.5) -> TensorProto:
        return numpy_helper.from_array((scale * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [
        w("W1", 6, 8), w("B1", 8), w("W2", 8, 8), w("c_row", 8), w("c_scalar", 1), w("W3", 4, 8), w("B3", 4),
        w("den", 8, scale=1.0), numpy_helper.from_array(np.array([1, 8], dtype=np.int64), "shape_1x8"),
        numpy_helper.from_array(np.float32(-0.7), "lo"), numpy_helper.from_array(np.float32(0.9), "hi"),
        w("W4", 16, 4),
    ]  # fmt: skip
    inits[7] = numpy_helper.from_array(
        (np.sign(rng.standard_normal(8)) * (0.5 + rng.random(8))).astype(np.float32), "den"
    )
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "B1"], ["g1"], alpha=0.9, beta=1.1),
        helper.make_node("MatMul", ["g1", "W2"], ["m1"]),
        helper.make_node("Add", ["m1", "c_row"], ["a1"]),
        helper.make_node("Sub", ["a1", "c_scalar"], ["s1"]),
        helper.make_node("Div", ["s1", "den"], ["d1"]),
        helper.make_node("Mul", ["d1", "c_row"], ["mu1"]),
        helper.make_node("Relu", ["mu1"], ["r1"]),
        helper.make_node("Tanh", ["a1"], ["t1"]),
        helper.make_node("Sigmoid", ["s1"], ["sg1"]),
        helper.make_node("Elu", ["d1"], ["e1"], alpha=0.7),
        helper.make_node("LeakyRelu", ["m1"], ["l1"], alpha=0.05),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.float32(0.25), "kv")),
        helper.make_node("Mul", ["l1", "k"], ["l2"]),
        helper.make_node("Clip", ["e1", "lo", "hi"], ["c1"]),
        helper.make_node("Neg", ["sg1"], ["n1"]),
        helper.make_node("Max", ["r1", "t1", "n1"], ["mx"]),
        helper.make_node("Min", ["mx", "l2"], ["mn"]),
        helper.make_node("Reshape", ["mn", "shape_1x8"], ["rs"]),
        helper.make_node("Identity", ["c1"], ["id"]),
        helper.make_node("Concat", ["rs", "id"], ["cat"], axis=1),
        helper.make_node("Flatten", ["cat"], ["fl"], axis=1),
        helper.make_node("Gemm", ["fl", "W4"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "every-op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, OBS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ACT])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture
def save_model(tmp_path: Path) -> Callable[..., Path]:
    """``save_model(model, contract=...)``: write ``model`` with the contract in its metadata; returns the path."""

    def save(model: onnx.ModelProto, c: Contract | None = None, name: str = "model.onnx") -> Path:
        if c is not None:
            helper.set_model_props(model, {METADATA_KEY: c.to_json()})
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return save


@pytest.fixture(scope="session")
def op_contract() -> Callable[..., Contract]:
    """:func:`contract` as a fixture."""
    return contract


@pytest.fixture(scope="session")
def every_op_model() -> Callable[[np.random.Generator], onnx.ModelProto]:
    """:func:`every_operator_graph` as a fixture."""
    return every_operator_graph
