"""int8 policies: the quantised ONNX against its float source and its numpy reference, the int8 C against
onnxruntime on the host and on a Cortex-M4F under QEMU, and every malformed quantisation refused by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from firmware_export.export import INT8_TOLERANCE, TOLERANCE, export_firmware
from firmware_export.graph import UnsupportedModelError, from_model
from firmware_export.quantize import QUANT_KEY, CalibrationError, quantization_record, quantize
from policies.runtime.contract import METADATA_KEY, Contract
from policies.runtime.onnx_policy import OnnxPolicy

SaveModel = Callable[..., Path]
MakeContract = Callable[..., Contract]
MakeModel = Callable[[np.random.Generator], onnx.ModelProto]


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {session.get_inputs()[0].name: row[None]})[0] for row in x])


@pytest.fixture
def int8_every_op(save_model: SaveModel, op_contract: MakeContract, every_op_model: MakeModel) -> tuple[Path, Path]:
    """The every-operator graph (Gemm with alpha and beta, MatMul, Gemm without bias) and its int8 copy."""
    float_path = save_model(every_op_model(np.random.default_rng(0)), op_contract(), "float.onnx")
    calibration = np.random.default_rng(1).standard_normal((500, 6)).astype(np.float32)
    model, _ = quantize(onnx.load(str(float_path)), calibration, "unit test: standard normal inputs")
    int8_path = save_model(model, None, "int8.onnx")
    return float_path, int8_path


def test_int8_model_runs_the_integer_arithmetic_and_stays_close_to_float(int8_every_op: tuple[Path, Path]) -> None:
    float_path, int8_path = int8_every_op
    model = onnx.load(str(int8_path))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") == 3 and ops.count("DequantizeLinear") == 6
    weights = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]
    assert len(weights) == 3 and not {"W1", "W2", "W4"} & {t.name for t in model.graph.initializer}
    record = quantization_record(model)
    assert record is not None and record["calibration_inputs"] == 500 and len(record["layers"]) == 3  # type: ignore[arg-type]
    graph = from_model(model)
    assert graph.quantized and [n.op for n in graph.nodes].count("QGemm") == 3
    x = np.random.default_rng(2).standard_normal((200, 6)).astype(np.float32)
    got = _run(int8_path, x)
    reference = np.concatenate([graph.run(row[None]) for row in x])  # integer sums in numpy: the C's arithmetic
    apart = np.abs(got - reference).max(axis=1) > 1e-5 * (1 + np.abs(reference).max(axis=1))
    assert apart.mean() <= 0.02  # the rest: an activation a rounding step apart (numpy's and onnxruntime's tanh)
    want = _run(float_path, x)
    assert np.abs(got - want).mean() < 0.02 * np.abs(want).mean()  # 8 bits: about 1 % of the signal


def test_int8_firmware_matches_onnxruntime_on_host_and_cortex_m4f(
    int8_every_op: tuple[Path, Path], tmp_path: Path
) -> None:
    float_path, int8_path = int8_every_op
    report = export_firmware(int8_path, tmp_path / "fw", "cortex-m4f", vectors=300)
    assert report.int8 and INT8_TOLERANCE <= report.tolerance <= 10 * INT8_TOLERANCE  # outputs up to a few units
    assert set(report.verified) == {"host", "cortex-m4f"} and max(report.verified.values()) <= report.tolerance
    assert max(report.int8_steps.values()) <= 0.05 * 300
    source = (tmp_path / "fw" / "rr_policy.c").read_text()
    assert "static const signed char" in source and "QGemm" in source
    float_report = export_firmware(float_path, tmp_path / "fw_float", "host", vectors=10)
    assert float_report.tolerance == TOLERANCE and not float_report.int8


def test_trained_policy_int8_is_smaller_in_flash_and_flies_the_same_commands(trained_hover: Any, tmp_path: Path):
    """The hover policy's int8 copy, calibrated on its own flights' inputs: a quarter of the weight bytes and
    commands within a few per cent of float on held-out inputs (the flights themselves: tests/test_int8_cli.py)."""
    policy = OnnxPolicy(trained_hover.onnx)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, policy.obs_dim)).astype(np.float32)  # inputs of a flight's magnitude
    model, _ = quantize(onnx.load(str(trained_hover.onnx)), x[:400], "unit test")
    path = tmp_path / "policy_int8.onnx"
    onnx.save(model, str(path))
    q = OnnxPolicy(path)  # opens and honours the contract's action mapping, as a robot loads it
    diff = np.abs(policy.normalized_action(policy.run_obs(x[400:])) - q.normalized_action(q.run_obs(x[400:])))
    assert diff.mean() < 0.03
    fp = export_firmware(trained_hover.onnx, tmp_path / "f", "host", vectors=10)
    iq = export_firmware(path, tmp_path / "q", "host", vectors=300)
    assert iq.flash_bytes is not None and fp.flash_bytes is not None and iq.flash_bytes < 0.5 * fp.flash_bytes


# ------------------------------------------------------------------------------------------------- bad input
def test_calibration_inputs_are_checked(save_model: SaveModel, op_contract: MakeContract, every_op_model: MakeModel):
    model = every_op_model(np.random.default_rng(0))
    helper.set_model_props(model, {METADATA_KEY: op_contract().to_json()})
    good = np.zeros((100, 6), dtype=np.float32) + 0.5
    for bad, match in [
        (good[:, :5], r"shape \[B, 6\]"),
        (good[:10], "at least 64"),
        (np.where(np.arange(6) == 2, np.nan, good), "non-finite"),
        (good.astype(np.int64), "floating point"),
    ]:
        with pytest.raises(CalibrationError, match=match):
            quantize(model, bad, "test")
    quantized, _ = quantize(model, good, "test")
    with pytest.raises(UnsupportedModelError, match="already quantised"):
        quantize(quantized, good, "test")
    bare = every_op_model(np.random.default_rng(0))
    with pytest.raises(UnsupportedModelError, match="no deployment contract"):
        quantize(bare, good, "test")


def _edited(model: onnx.ModelProto, edit: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    edit(out)
    return out


def _set_init(name: str, value: np.ndarray) -> Callable[[onnx.ModelProto], None]:
    def edit(m: onnx.ModelProto) -> None:
        for i, t in enumerate(m.graph.initializer):
            if t.name == name:
                m.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, name))

    return edit


def _node_attr(op_name: str, **attrs: Any) -> Callable[[onnx.ModelProto], None]:
    def edit(m: onnx.ModelProto) -> None:
        for n in m.graph.node:
            if n.name == op_name:
                del n.attribute[:]
                n.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())

    return edit


def _rename_op(old: str, new: str) -> Callable[[onnx.ModelProto], None]:
    def edit(m: onnx.ModelProto) -> None:
        for n in m.graph.node:
            if n.op_type == old:
                n.op_type = new
                return

    return edit


def _dequantize_output(m: onnx.ModelProto) -> None:
    """A stray QuantizeLinear -> DequantizeLinear on the graph output (not in front of a product)."""
    out = m.graph.output[0].name
    for n in m.graph.node:
        for i, o in enumerate(n.output):
            if o == out:
                n.output[i] = "pre_out"
    m.graph.node.extend(
        [
            helper.make_node("QuantizeLinear", ["pre_out", "rr_int8_0_one", "rr_int8_0_zero"], ["q_out"]),
            helper.make_node("DequantizeLinear", ["q_out", "rr_int8_0_one", "rr_int8_0_zero"], [out]),
        ]
    )


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_set_init("rr_int8_0_x_zero", np.full(6, 3, dtype=np.int8)), "zero point 0"),
        (_set_init("rr_int8_0_zero", np.asarray(0, dtype=np.uint8)), "zero point 0"),
        (_set_init("rr_int8_0_x_step", np.full(6, -0.1, dtype=np.float32)), "finite and positive"),
        (_set_init("rr_int8_1_w_scale", np.zeros(8, dtype=np.float32)), "finite and positive"),
        (_set_init("rr_int8_1_w_q", np.zeros((8, 8), dtype=np.int16)), "2-D int8 initializer"),
        (_node_attr("rr_int8_1_weight", axis=0), "along axis 1"),
        (_rename_op("Gemm", "QGemm"), "QGemm is not supported"),
        (_dequantize_output, "only in front of a matrix product"),
    ],
    ids=["zero-point", "uint8", "negative-scale", "zero-weight-scale", "int16-weight", "wrong-axis", "raw-qgemm",
         "stray-qdq"],
)  # fmt: skip
def test_malformed_quantisation_is_refused_by_name(
    int8_every_op: tuple[Path, Path], edit: Callable[[onnx.ModelProto], None], match: str
) -> None:
    model = _edited(onnx.load(str(int8_every_op[1])), edit)
    with pytest.raises(UnsupportedModelError, match=match):
        from_model(model)


def test_quantization_record_must_be_an_object(int8_every_op: tuple[Path, Path]) -> None:
    model = onnx.load(str(int8_every_op[1]))
    for p in model.metadata_props:
        if p.key == QUANT_KEY:
            p.value = "[1, 2"
    with pytest.raises(UnsupportedModelError, match="not a JSON object"):
        quantization_record(model)
