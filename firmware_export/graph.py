"""An ONNX graph reduced to what a microcontroller runs: static shapes, folded constants, supported operators.

:func:`load_graph` reads the model with the ``onnx`` package, binds a symbolic leading (batch) dimension of the
single input to 1 (the C function computes one sample per call), infers every shape, and evaluates every node whose
inputs are all constant (``Constant``, ``Sqrt`` of a variance, ``Identity`` of a weight, ...) at export time with
numpy. What is left are the nodes the generated C computes. An operator without a C kernel, a dimension that stays
symbolic, or a shape that depends on run-time data is refused with :class:`UnsupportedModelError` naming the node.

Every operator also has a numpy implementation here (:data:`NUMPY_OPS`): it folds constants and gives a reference
independent of both onnxruntime and the C code.

An int8 policy (``robot-rl export int8``, :mod:`firmware_export.quantize`) carries ``QuantizeLinear`` /
``DequantizeLinear`` in front of its matrix products. :func:`from_model` fuses each such product, with its quantised
input and its int8 weight, into one ``QGemm`` node (int8 weights kept as int8, integer accumulation; see
:func:`qgemm`); a quantisation node anywhere else is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

C_OPS = (
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Tanh", "Sigmoid", "Elu", "LeakyRelu",
    "Clip", "Neg", "Concat", "Reshape", "Flatten", "Identity",
)  # fmt: skip
"""Operators the generated C computes (``Constant`` is always folded away)."""


class UnsupportedModelError(ValueError):
    """The model cannot become static C: unsupported operator, symbolic shape, non-float tensor, NaN weight."""


@dataclass
class Node:
    """One computed node: ``op`` on ``inputs`` (tensor names) giving ``output``, with its ONNX attributes."""

    op: str
    name: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    """A static, float32, single-input single-output graph in execution order.

    Attributes:
        input_name: Name of the graph input, shape ``shapes[input_name]`` (batch bound to 1).
        output_name: Name of the graph output.
        nodes: Nodes the C code computes, in a valid execution order.
        constants: Folded and initializer tensors used by ``nodes`` (float32).
        shapes: Static shape of every tensor.
    """

    input_name: str
    output_name: str
    nodes: list[Node]
    constants: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]

    def run(self, x: np.ndarray) -> np.ndarray:
        """Evaluate the graph with numpy on one input of shape ``shapes[input_name]`` (a reference)."""
        return self.evaluate(x)[self.output_name]

    def evaluate(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every tensor of the graph (constants included) for one input of shape ``shapes[input_name]``."""
        values: dict[str, np.ndarray] = {**self.constants, self.input_name: np.asarray(x, dtype=np.float32)}
        for n in self.nodes:
            values[n.output] = NUMPY_OPS[n.op]([values[i] for i in n.inputs if i], n.attrs).astype(np.float32)
        return values

    @property
    def parameters(self) -> int:
        """Number of constant values the C code stores (weights, biases, normaliser statistics, limits)."""
        used = {i for n in self.nodes for i in n.inputs}
        return int(sum(v.size for k, v in self.constants.items() if k in used))

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one inference in ``Gemm`` / ``MatMul`` nodes."""
        total = 0
        for n in self.nodes:
            if n.op in MATRIX_OPS:
                total += int(np.prod(self.shapes[n.output])) * gemm_k(self, n)
        return total

    @property
    def quantized(self) -> bool:
        """Whether any matrix product computes in int8 (``QGemm``)."""
        return any(n.op == "QGemm" for n in self.nodes)


MATRIX_OPS = ("Gemm", "MatMul", "QGemm")
"""Matrix products: weights constant, ``[M, K] x [K, N]``."""


def gemm_k(graph: Graph, node: Node) -> int:
    """Inner dimension ``K`` of a ``Gemm`` / ``MatMul`` / ``QGemm`` node."""
    a = graph.shapes[node.inputs[0]]
    return a[0] if node.attrs.get("transA", 0) else a[-1]


def weight_nk(graph: Graph, node: Node) -> np.ndarray:
    """The weight of a matrix product as ``[N, K]`` (output channel first), in its stored dtype."""
    w = graph.constants[node.inputs[1]]
    return w if node.op != "MatMul" and node.attrs.get("transB", 0) else w.T


def quantize_input(x: np.ndarray, step: np.ndarray | float) -> np.ndarray:
    """``clip(round_half_even(x / step), -128, 127)`` in float32 arithmetic (ONNX ``QuantizeLinear``, zero point
    0; ``step`` a scalar or one per channel of the last axis), as int8 values held in float32."""
    q = np.rint(np.asarray(x, dtype=np.float32) / np.asarray(step, dtype=np.float32))
    return np.clip(q, -128.0, 127.0).astype(np.float32)


def qgemm(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    """An int8 matrix product: ``x[0]`` (float ``[M, K]``) quantised with the steps ``a["x_step"]`` (``[K]``), times
    the int8 weight ``x[1]`` (``[N, K]`` if ``transB`` else ``[K, N]``) summed exactly in integers, scaled per output
    channel by ``a["scale"]`` (``alpha * dequantisation scale * w_scale[n]``, float32), plus ``beta * x[2]``."""
    xq = quantize_input(x[0], a["x_step"]).astype(np.int64)
    w = x[1].astype(np.int64)
    acc = xq @ (w.T if a.get("transB", 0) else w)
    y = acc.astype(np.float32) * np.asarray(a["scale"], dtype=np.float32)
    return y + np.float32(a.get("beta", 1.0)) * x[2] if len(x) > 2 else y


# ------------------------------------------------------------------------------------------------ numpy ops
def _gemm(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    m = x[0].T if a.get("transA", 0) else x[0]
    w = x[1].T if a.get("transB", 0) else x[1]
    y = a.get("alpha", 1.0) * (m @ w)
    return y + a.get("beta", 1.0) * x[2] if len(x) > 2 else y


def _clip(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    lo = x[1] if len(x) > 1 and x[1] is not None else a.get("min", -np.inf)
    hi = x[2] if len(x) > 2 and x[2] is not None else a.get("max", np.inf)
    return np.minimum(np.maximum(x[0], lo), hi)


def _reshape(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    return x[0].reshape(reshape_target(x[0].shape, [int(v) for v in x[1]]))


def reshape_target(shape: tuple[int, ...], spec: list[int]) -> tuple[int, ...]:
    """ONNX ``Reshape`` semantics: ``0`` copies a dimension, ``-1`` is inferred."""
    out = [shape[i] if v == 0 else v for i, v in enumerate(spec)]
    if -1 in out:
        known = int(np.prod([v for v in out if v != -1]))
        out[out.index(-1)] = int(np.prod(shape)) // max(known, 1)
    return tuple(out)


def _flatten(x: list[np.ndarray], a: dict[str, Any]) -> np.ndarray:
    axis = a.get("axis", 1)
    return x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)


NUMPY_OPS: dict[str, Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]] = {
    "Gemm": _gemm,
    "QGemm": qgemm,
    "MatMul": lambda x, a: x[0] @ x[1],
    "Add": lambda x, a: x[0] + x[1],
    "Sub": lambda x, a: x[0] - x[1],
    "Mul": lambda x, a: x[0] * x[1],
    "Div": lambda x, a: x[0] / x[1],
    "Max": lambda x, a: functools.reduce(np.maximum, x),
    "Min": lambda x, a: functools.reduce(np.minimum, x),
    "Relu": lambda x, a: np.maximum(x[0], 0),
    "Tanh": lambda x, a: np.tanh(x[0]),
    "Sigmoid": lambda x, a: 1.0 / (1.0 + np.exp(-x[0])),
    "Elu": lambda x, a: np.where(x[0] > 0, x[0], a.get("alpha", 1.0) * np.expm1(np.minimum(x[0], 0))),
    "LeakyRelu": lambda x, a: np.where(x[0] >= 0, x[0], a.get("alpha", 0.01) * x[0]),
    "Clip": _clip,
    "Neg": lambda x, a: -x[0],
    "Concat": lambda x, a: np.concatenate(x, axis=a["axis"]),
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Identity": lambda x, a: x[0],
    "Sqrt": lambda x, a: np.sqrt(x[0]),
    "Reciprocal": lambda x, a: 1.0 / x[0],
    "Exp": lambda x, a: np.exp(x[0]),
    "Cast": lambda x, a: x[0].astype(np.float32),
    "Unsqueeze": lambda x, a: np.expand_dims(x[0], tuple(int(v) for v in (x[1] if len(x) > 1 else a["axes"]))),
    "Squeeze": lambda x, a: np.squeeze(x[0], tuple(int(v) for v in (x[1] if len(x) > 1 else a["axes"]))),
}


# ---------------------------------------------------------------------------------------------- loading
def load_graph(path: str | Path) -> Graph:
    """Read an ONNX file into a static :class:`Graph` (see the module docstring).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsupportedModelError: Naming the node, tensor or dimension that cannot become static C.
    """
    return from_model(load_onnx(Path(path)))


def load_onnx(path: Path) -> onnx.ModelProto:
    """Read an ONNX file, with errors naming it.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UnsupportedModelError: It is not an ONNX model.
    """
    if not path.is_file():
        raise FileNotFoundError(f"ONNX file not found: {path}")
    try:
        return onnx.load(str(path))
    except Exception as exc:
        raise UnsupportedModelError(f"{path} is not a valid ONNX model: {exc}") from None


def from_model(model: onnx.ModelProto) -> Graph:
    """:func:`load_graph` on an in-memory model."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inputs = [i for i in g.input if i.name not in inits]
    if len(inputs) != 1 or len(g.output) != 1:
        raise UnsupportedModelError(f"the graph needs one input and one output, has {len(inputs)} and {len(g.output)}")
    inp = inputs[0]
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise UnsupportedModelError(f"input '{inp.name}' is not float32")
    dims = list(inp.type.tensor_type.shape.dim)
    shape = []
    for i, d in enumerate(dims):
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif i == 0:
            shape.append(1)  # the batch: one sample per call
        else:
            raise UnsupportedModelError(
                f"input '{inp.name}' has a symbolic dimension {i} ('{d.dim_param}'); only the batch may be symbolic"
            )
    consts: dict[str, np.ndarray] = {}
    for name, arr in inits.items():
        consts[name] = _float_constant(name, arr)
    shapes: dict[str, tuple[int, ...]] = {inp.name: tuple(shape)}
    shapes.update({k: tuple(v.shape) for k, v in consts.items()})
    nodes: list[Node] = []
    for node in _fuse_int8(_single_assignment([_node(raw) for raw in g.node], set(shapes)), consts):
        if node.op == "Constant":
            consts[node.output] = _float_constant(node.output, node.attrs["value"])
            shapes[node.output] = tuple(consts[node.output].shape)
            continue
        missing = [i for i in node.inputs if i and i not in shapes]
        if missing:
            raise UnsupportedModelError(f"node '{node.name}' ({node.op}) reads unknown tensor(s) {missing}")
        if all(i in consts for i in node.inputs if i):
            if node.op not in NUMPY_OPS:
                raise UnsupportedModelError(f"node '{node.name}': operator {node.op} is not supported")
            value = NUMPY_OPS[node.op]([consts[i] for i in node.inputs if i], node.attrs)
            consts[node.output] = _float_constant(node.output, np.asarray(value))
            shapes[node.output] = tuple(consts[node.output].shape)
            continue
        if node.op not in C_OPS and node.op != "QGemm":
            raise UnsupportedModelError(
                f"node '{node.name}': operator {node.op} is not supported on a microcontroller "
                f"(supported: {', '.join(C_OPS)})"
            )
        shapes[node.output] = _infer(node, shapes, consts)
        nodes.append(node)
    out = g.output[0].name
    if out not in shapes:
        raise UnsupportedModelError(f"graph output '{out}' is not produced by any node")
    if out in consts:
        raise UnsupportedModelError(f"graph output '{out}' does not depend on the input")
    return Graph(inp.name, out, nodes, consts, shapes)


def _single_assignment(nodes: list[Node], given: set[str]) -> list[Node]:
    """``nodes``, each writing a tensor nothing else defines (ONNX's rule; a name written twice would make the
    graph's meaning depend on who reads it first).

    Raises:
        UnsupportedModelError: Naming the node and the tensor it would overwrite.
    """
    defined = set(given)
    for node in nodes:
        if node.output in defined:
            raise UnsupportedModelError(
                f"node '{node.name}' ({node.op}) writes tensor '{node.output}', which the graph already defines "
                "(an input, an initializer or another node's output)"
            )
        defined.add(node.output)
    return nodes


QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _fuse_int8(nodes: list[Node], consts: dict[str, np.ndarray]) -> list[Node]:
    """Replace each ``Gemm``/``MatMul`` whose input is ``DequantizeLinear(QuantizeLinear(x))`` and whose weight is
    ``DequantizeLinear`` of an int8 initializer by one ``QGemm`` (the pattern :mod:`firmware_export.quantize`
    writes); the quantisation nodes it consumed are dropped.

    Raises:
        UnsupportedModelError: A quantisation node outside that pattern, or one whose zero point, scale, dtype or
            axis the int8 C kernel does not compute (named).
    """
    for n in nodes:
        if n.op == "QGemm":  # the name of the fused node here, not an operator a file may bring
            raise UnsupportedModelError(f"node '{n.name}': operator QGemm is not supported on a microcontroller")
    if not any(n.op in QDQ_OPS for n in nodes):
        return nodes
    producer = {n.output: n for n in nodes}
    used: set[str] = set()
    out: list[Node] = []
    for node in nodes:
        if node.op not in ("Gemm", "MatMul"):
            out.append(node)
            continue
        dq_x, dq_w = producer.get(node.inputs[0]), producer.get(node.inputs[1])
        if dq_x is None or dq_w is None or dq_x.op != "DequantizeLinear" or dq_w.op != "DequantizeLinear":
            out.append(node)
            continue
        q_x = producer.get(dq_x.inputs[0])
        if q_x is None or q_x.op != "QuantizeLinear":
            raise UnsupportedModelError(
                f"node '{node.name}' ({node.op}): its input is dequantised from '{dq_x.inputs[0]}', which no "
                "QuantizeLinear produces; only the QuantizeLinear -> DequantizeLinear pattern is supported"
            )
        trans_b = int(node.attrs.get("transB", 0)) if node.op == "Gemm" else 0
        w_q = consts.get(dq_w.inputs[0])
        if w_q is None or w_q.dtype != np.int8 or w_q.ndim != 2:
            raise UnsupportedModelError(
                f"node '{node.name}' ({node.op}): its quantised weight must be a 2-D int8 initializer"
            )
        channel_axis = 0 if trans_b else 1
        x_step = _qdq_scale(q_x, consts, w_q.shape[1 - channel_axis], node.name)
        x_unit = float(_qdq_scale(dq_x, consts, 1, node.name)[0])
        w_scale = _qdq_scale(dq_w, consts, w_q.shape[channel_axis], node.name, channel_axis)
        alpha = float(node.attrs.get("alpha", 1.0))
        scale = (alpha * x_unit * w_scale.astype(np.float64)).astype(np.float32)
        used.update((q_x.output, dq_x.output, dq_w.output))
        attrs = {"transB": trans_b, "beta": float(node.attrs.get("beta", 1.0)), "x_step": x_step, "scale": scale}
        inputs = [q_x.inputs[0], dq_w.inputs[0], *(node.inputs[2:3] if node.op == "Gemm" else [])]
        out.append(Node("QGemm", node.name, inputs, node.output, attrs))
    for n in out:
        if n.op in QDQ_OPS and n.output not in used:
            raise UnsupportedModelError(
                f"node '{n.name}': {n.op} is supported only in front of a matrix product, on its input and on an "
                "int8 weight (the pattern `robot-rl export int8` writes)"
            )
    return [n for n in out if n.op not in QDQ_OPS]


def _qdq_scale(node: Node, consts: dict[str, np.ndarray], channels: int, where: str, axis: int = 1) -> np.ndarray:
    """The scale of a quantisation node (constant, finite, positive; a scalar or one per channel along ``axis``) as
    float32 ``[channels]``, checking that its zero point is an int8 zero.

    Raises:
        UnsupportedModelError: Naming ``where`` and what the int8 kernel cannot compute.
    """
    what = f"node '{where}': {node.op} '{node.name}'"
    ins = node.inputs
    if len(ins) < 2 or ins[1] not in consts:
        raise UnsupportedModelError(f"{what} needs a constant scale")
    scale = consts[ins[1]].astype(np.float32).reshape(-1)
    if scale.size not in (1, channels) or not (np.isfinite(scale).all() and (scale > 0).all()):
        raise UnsupportedModelError(f"{what}: its scale must be finite and positive, one value or one per channel")
    if len(ins) > 2 and ins[2]:
        zero = consts.get(ins[2])
        if zero is None or zero.dtype != np.int8 or np.any(zero != 0):
            raise UnsupportedModelError(f"{what}: only int8 with zero point 0 (symmetric) is supported")
    elif node.op == "QuantizeLinear":
        raise UnsupportedModelError(f"{what}: without a zero point it quantises to uint8; int8 is supported")
    if scale.size > 1 and int(node.attrs.get("axis", 1)) != axis:
        raise UnsupportedModelError(f"{what}: per-channel scales must lie along axis {axis}")
    return np.broadcast_to(scale, (channels,)).astype(np.float32)


def _node(raw: onnx.NodeProto) -> Node:
    attrs = {}
    for a in raw.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        attrs[a.name] = value
    if len(raw.output) != 1:
        raise UnsupportedModelError(
            f"node '{raw.name}' ({raw.op_type}) has {len(raw.output)} outputs; one is supported"
        )
    return Node(raw.op_type, raw.name or raw.output[0], list(raw.input), raw.output[0], attrs)


def _float_constant(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "fiu":
        raise UnsupportedModelError(f"tensor '{name}' has dtype {arr.dtype}; only numbers are supported")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise UnsupportedModelError(f"tensor '{name}' holds non-finite values (NaN or inf weights)")
    return arr if arr.dtype.kind in "iu" else arr.astype(np.float32)


def _infer(node: Node, shapes: dict[str, tuple[int, ...]], consts: dict[str, np.ndarray]) -> tuple[int, ...]:
    """Static output shape of a computed node (numpy on zeros of the input shapes: same rules as the C code)."""
    ins = [i for i in node.inputs if i]
    if node.op in MATRIX_OPS:
        if node.inputs[1] not in consts or (len(ins) > 2 and ins[2] not in consts):
            raise UnsupportedModelError(f"node '{node.name}' ({node.op}): weights and bias must be constant")
        if len(shapes[ins[0]]) != 2 or len(shapes[ins[1]]) != 2 or node.attrs.get("transA", 0):
            raise UnsupportedModelError(f"node '{node.name}' ({node.op}): only [M, K] x [K, N] products are supported")
    if node.op == "Reshape" and node.inputs[1] not in consts:
        raise UnsupportedModelError(f"node '{node.name}' (Reshape): the target shape depends on run-time data")
    if node.op == "Clip":
        dynamic = [i for i in ins[1:] if i not in consts]
        if dynamic:
            raise UnsupportedModelError(f"node '{node.name}' (Clip): its bounds {dynamic} must be constant")
    probe = [consts[i] if i in consts else np.zeros(shapes[i], dtype=np.float32) for i in ins]
    try:
        out = NUMPY_OPS[node.op](probe, node.attrs)
    except Exception as exc:
        raise UnsupportedModelError(
            f"node '{node.name}' ({node.op}): shapes {[p.shape for p in probe]}: {exc}"
        ) from None
    return tuple(np.asarray(out).shape)
