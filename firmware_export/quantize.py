"""Post-training int8 quantisation of an exported policy: int8 weights per output channel, int8 activations at the
input of every matrix product calibrated on recorded observations, float32 everywhere else.

The scheme is symmetric (zero point 0 throughout), as TFLite's and CMSIS-NN's int8 kernels and onnxruntime's QDQ
format are. The input of each product is quantised per input channel ``k`` and that channel's step is folded into the
weights before they are quantised per output channel ``n`` (SmoothQuant's migration of the input's range into the
weights, all of it): an observation channel that spans +-0.5 keeps as many steps as one that spans +-5::

    c_k     = the range in (0, max |x_k|] with the least mean squared quantisation error of x_k over the calibration
              inputs (TensorRT's and NVIDIA pytorch-quantization's "mse" calibrator: outliers saturate instead of
              stretching every step)
    s_k     = c_k / 127,   x_q[k] = clip(round_half_even(x[k] / s_k), -128, 127)
    W'      = W[n, k] * s_k,   s_w[n] = max_k |W'[n, k]| / 127,   W_q = round_half_even(W' / s_w[n])   (int8)
    y[n]    = s_w[n] * sum_k x_q[k] * W_q[n, k] + b[n]             (integer sums; bias, activations, limits float)

On the hover policy this halves the command error of one range per tensor (``docs/firmware.md``, int8).

In the ONNX file this is written with standard operators, which onnxruntime runs (and may fuse): in front of each
``Gemm`` / ``MatMul``, ``QuantizeLinear`` of its input (scales ``s_k`` along axis 1) followed by ``DequantizeLinear``
with scale 1 (the integers ``x_q`` as floats), and ``DequantizeLinear`` (scales ``s_w`` along the output channel) of
an int8 initializer as its weight. :func:`firmware_export.graph.from_model` recognises exactly that
pattern and the generated C computes the integer form (:mod:`firmware_export.codegen`). The normaliser, the
activation functions and the action mapping stay float32, so the contract's action limits hold as before.

The deployment contract is copied unchanged; the file also carries :data:`QUANT_KEY`, a JSON record of the scheme and
the calibration (how many inputs, where they came from), which ``robot-rl inspect`` and the reports show.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from firmware_export.graph import MATRIX_OPS, QDQ_OPS, UnsupportedModelError, from_model, gemm_k
from policies.runtime.contract import METADATA_KEY

QUANT_KEY = "robot_rl.quantization"
"""Metadata key of the quantisation record in an int8 ONNX file."""
SCHEME = (
    "int8 symmetric: inputs per channel (MSE-calibrated ranges, folded into the weights), weights per output "
    "channel, integer sums, float bias"
)
RANGE_CANDIDATES = 128
"""Candidate ranges ``c`` tried per tensor, evenly spaced in ``(0, max |x|]``."""
MAX_RANGE_VALUES = 500_000
"""Most values of one tensor the range search scores (evenly spaced; the maximum always comes from all)."""
MIN_CALIBRATION = 64
"""Fewest calibration inputs accepted: a range from a handful of observations clips the rest of flight."""


class CalibrationError(ValueError):
    """Calibration inputs of the wrong shape, non-finite, too few, or leaving a product's input always zero."""


@dataclass
class LayerQuantization:
    """How one matrix product was quantised.

    Attributes:
        node: The ONNX node (its name or output).
        shape: ``[K, N]``: inputs and outputs.
        x_ranges: The calibrated range ``c_k`` of each input channel (inputs beyond it saturate).
        x_max: ``max |x|`` over the calibration inputs, all channels.
        x_rms_error: Root-mean-square quantisation error of the input over the calibration inputs, all channels.
        weight_error: Largest ``|W' - s_w W_q| / max |W'|`` over the layer (rounding: at most 1/254).
    """

    node: str
    shape: list[int]
    x_ranges: list[float]
    x_max: float
    x_rms_error: float
    weight_error: float


@dataclass
class QuantizationRecord:
    """What :func:`quantize` did, stored in the file under :data:`QUANT_KEY`.

    Attributes:
        scheme: The scheme in words (:data:`SCHEME`).
        calibration_inputs: Number of recorded observations the activation ranges came from.
        calibration_source: Where they came from, in words (task, seeds, randomisation).
        layers: One entry per quantised product, in execution order.
    """

    scheme: str
    calibration_inputs: int
    calibration_source: str
    layers: list[LayerQuantization] = field(default_factory=list)

    def to_json(self) -> str:
        """The record as JSON text (what the file carries)."""
        return json.dumps(asdict(self), sort_keys=True)


def check_calibration(obs: np.ndarray, obs_dim: int) -> np.ndarray:
    """``obs`` as float32 ``[B, obs_dim]``.

    Raises:
        CalibrationError: Wrong shape or dtype, fewer than :data:`MIN_CALIBRATION` rows, or a non-finite value.
    """
    x = np.asarray(obs)
    if x.dtype.kind != "f":
        raise CalibrationError(f"calibration inputs must be floating point, got {x.dtype}")
    if x.ndim != 2 or x.shape[1] != obs_dim:
        raise CalibrationError(f"calibration inputs must have shape [B, {obs_dim}] (obs_dim), got {list(x.shape)}")
    if x.shape[0] < MIN_CALIBRATION:
        raise CalibrationError(f"{x.shape[0]} calibration inputs; at least {MIN_CALIBRATION} are needed")
    if not np.isfinite(x).all():
        raise CalibrationError("calibration inputs hold non-finite values")
    return x.astype(np.float32)


def quantize(model: onnx.ModelProto, obs: np.ndarray, source: str) -> tuple[onnx.ModelProto, QuantizationRecord]:
    """An int8 copy of ``model`` calibrated on ``obs`` (see the module docstring).

    Args:
        model: A float policy with its deployment contract (``robot-rl export onnx``); one input, one output.
        obs: ``[B, obs_dim]`` policy inputs recorded in flight (the graph's own input: before its normaliser).
        source: Where ``obs`` came from, in words (kept in the record).

    Returns:
        The quantised model (contract and metadata copied, :data:`QUANT_KEY` added) and its record.

    Raises:
        UnsupportedModelError: The model is already quantised, has no matrix product, or cannot become a static
            graph (:func:`firmware_export.graph.from_model`).
        CalibrationError: ``obs`` is malformed, or an input of a product is zero on every calibration input.
    """
    if any(n.op_type in QDQ_OPS for n in model.graph.node):
        raise UnsupportedModelError("the model is already quantised (it holds QuantizeLinear / DequantizeLinear)")
    if METADATA_KEY not in {p.key for p in model.metadata_props}:
        raise UnsupportedModelError(f"the model carries no deployment contract (metadata key '{METADATA_KEY}')")
    graph = from_model(model)
    products = [n for n in graph.nodes if n.op in MATRIX_OPS]
    if not products:
        raise UnsupportedModelError("the model has no matrix product (Gemm / MatMul) to quantise")
    x = check_calibration(obs, int(np.prod(graph.shapes[graph.input_name])))
    seen: dict[str, list[np.ndarray]] = {n.output: [] for n in products}
    for row in x:
        values = graph.evaluate(row[None])
        for n in products:
            seen[n.output].append(values[n.inputs[0]].reshape(-1, gemm_k(graph, n)))
    inputs = {k: np.concatenate(v) for k, v in seen.items()}  # [B * M, K] per product
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    record = QuantizationRecord(SCHEME, int(x.shape[0]), source)
    by_output = {n.output: n for n in products}
    nodes: list[onnx.NodeProto] = []
    for raw in g.node:
        node = by_output.get(raw.output[0]) if len(raw.output) == 1 else None
        if node is None:
            nodes.append(raw)
            continue
        if not inputs[node.output].any():
            raise CalibrationError(f"node '{node.name}': its input is zero on every calibration input")
        i = len(record.layers)
        layer, new_nodes = _quantize_product(g, raw, graph.constants[node.inputs[1]], inputs[node.output], i)
        record.layers.append(layer)
        nodes += new_nodes
    del g.node[:]
    g.node.extend(nodes)
    _drop_unused(g)
    out.metadata_props.append(onnx.StringStringEntryProto(key=QUANT_KEY, value=record.to_json()))
    onnx.checker.check_model(out)
    return out, record


def calibrated_range(values: np.ndarray) -> tuple[float, float, float]:
    """The range ``c`` of int8 steps ``c / 127`` with the least mean squared error on ``values`` (rounding inside,
    saturation beyond), among :data:`RANGE_CANDIDATES` evenly spaced in ``(0, max |values|]``.

    Returns:
        ``(c, max |values|, rms error at c)``; ``(0, 0, 0)`` when every value is zero.
    """
    v = np.abs(np.asarray(values, dtype=np.float64).reshape(-1))
    top = float(v.max()) if v.size else 0.0
    if top == 0.0:
        return 0.0, 0.0, 0.0
    if v.size > MAX_RANGE_VALUES:
        v = v[np.linspace(0, v.size - 1, MAX_RANGE_VALUES).round().astype(int)]
    best = (np.inf, top)
    for c in top * np.arange(1, RANGE_CANDIDATES + 1) / RANGE_CANDIDATES:
        step = c / 127.0
        err = float(np.mean((np.minimum(np.rint(v / step), 127.0) * step - v) ** 2))
        best = min(best, (err, float(c)))
    return best[1], top, float(np.sqrt(best[0]))


def _quantize_product(
    g: onnx.GraphProto, raw: onnx.NodeProto, weight: np.ndarray, inputs: np.ndarray, i: int
) -> tuple[LayerQuantization, list[onnx.NodeProto]]:
    """The nodes that replace product ``raw`` (its calibration ``inputs``, ``[B, K]``): Q/DQ of its input, DQ of
    its int8 weight with the input steps folded in, the product itself."""
    trans_b = raw.op_type == "Gemm" and any(a.name == "transB" and a.i for a in raw.attribute)
    fits = [calibrated_range(inputs[:, k]) for k in range(inputs.shape[1])]
    ranges = np.asarray([f[0] for f in fits])
    x_step = np.where(ranges > 0, ranges / 127.0, 1.0).astype(np.float32)  # a channel always zero: any step
    w_nk = (weight.T if not trans_b else weight).astype(np.float64) * x_step.astype(np.float64)[None, :]
    w_max = np.max(np.abs(w_nk), axis=1)
    w_scale = np.where(w_max > 0, w_max / 127.0, 1.0).astype(np.float32)
    w_q_nk = np.clip(np.rint(w_nk / w_scale.astype(np.float64)[:, None]), -127, 127).astype(np.int8)
    error = float(np.max(np.abs(w_nk - w_q_nk * w_scale.astype(np.float64)[:, None])) / max(float(w_max.max()), 1e-30))
    w_q, axis = (w_q_nk, 0) if trans_b else (np.ascontiguousarray(w_q_nk.T), 1)  # axis: the output channel
    names = {k: f"rr_int8_{i}_{k}" for k in ("x_step", "x_zero", "one", "zero", "w_q", "w_scale", "w_zero")}
    names |= {k: f"rr_int8_{i}_{k}" for k in ("x_q", "x_int", "w_dq")}
    g.initializer.extend(
        [
            numpy_helper.from_array(x_step, names["x_step"]),
            numpy_helper.from_array(np.zeros(x_step.shape, dtype=np.int8), names["x_zero"]),
            numpy_helper.from_array(np.asarray(1.0, dtype=np.float32), names["one"]),
            numpy_helper.from_array(np.asarray(0, dtype=np.int8), names["zero"]),
            numpy_helper.from_array(w_q, names["w_q"]),
            numpy_helper.from_array(w_scale, names["w_scale"]),
            numpy_helper.from_array(np.zeros(w_scale.shape, dtype=np.int8), names["w_zero"]),
        ]
    )
    quant = [
        helper.make_node(
            "QuantizeLinear",
            [raw.input[0], names["x_step"], names["x_zero"]],
            [names["x_q"]],
            f"rr_int8_{i}_quantize",
            axis=1,
        ),
        helper.make_node(
            "DequantizeLinear", [names["x_q"], names["one"], names["zero"]], [names["x_int"]], f"rr_int8_{i}_input"
        ),
        helper.make_node(
            "DequantizeLinear",
            [names["w_q"], names["w_scale"], names["w_zero"]],
            [names["w_dq"]],
            f"rr_int8_{i}_weight",
            axis=axis,
        ),
    ]
    product = onnx.NodeProto()
    product.CopyFrom(raw)
    product.input[0], product.input[1] = names["x_int"], names["w_dq"]
    rms = float(np.sqrt(np.mean([f[2] ** 2 for f in fits])))
    layer = LayerQuantization(
        raw.name or raw.output[0],
        [int(w_nk.shape[1]), int(w_nk.shape[0])],
        [float(r) for r in ranges],
        float(np.max(np.abs(inputs))),
        rms,
        error,
    )
    return layer, [*quant, product]


def _drop_unused(g: onnx.GraphProto) -> None:
    """Remove nodes and initializers no longer reached from the graph's outputs (the float weights replaced)."""
    needed = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(list(g.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)


def quantization_record(model: onnx.ModelProto) -> dict[str, object] | None:
    """The :data:`QUANT_KEY` record of a model as plain data (``None``: a float model).

    Raises:
        UnsupportedModelError: The record is not a JSON object.
    """
    props = {p.key: p.value for p in model.metadata_props}
    if QUANT_KEY not in props:
        return None
    try:
        value = json.loads(props[QUANT_KEY])
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UnsupportedModelError(f"metadata '{QUANT_KEY}' is not a JSON object")
    return value
