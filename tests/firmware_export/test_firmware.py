"""Firmware export: generated C99 against onnxruntime on the host and on a Cortex-M4F under QEMU, the C safety
layer against the Python one, the trained policy flying in closed loop from C, and every bad input refused."""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from firmware_export.export import TOLERANCE, export_firmware, read_model
from firmware_export.graph import C_OPS, UnsupportedModelError, from_model
from firmware_export.targets import TEMPLATES
from policies.runtime.contract import Contract, ContractError
from policies.runtime.files import EXPORT_MARKER
from policies.runtime.passivity import EnergyTank, TankParams
from policies.runtime.safety import limit_command

SaveModel = Callable[..., Path]
MakeContract = Callable[..., Contract]
MakeModel = Callable[[np.random.Generator], onnx.ModelProto]


def no_leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------------------------- generated C vs onnxruntime
def test_trained_quadrotor_policy_matches_onnxruntime_on_host_and_cortex_m4f(trained_hover: Any, tmp_path: Path):
    out = tmp_path / "fw"
    report = export_firmware(trained_hover.onnx, out, "cortex-m4f", vectors=1000)
    assert set(report.verified) == {"host", "cortex-m4f"}
    assert max(report.verified.values()) <= TOLERANCE
    assert report.parameters == 6946 and report.macs == 6720  # 37 -> 64 -> 64 -> 4 with normaliser and limits
    assert report.flash_bytes is not None and 0 < report.flash_bytes <= 32 * 1024
    assert report.stack_bytes is not None and report.stack_bytes <= 4 * 1024 and report.static_ram_bytes == 0
    assert report.instructions_per_step is not None and report.instructions_per_step > report.macs
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["rr_policy.h", "rr_policy.c", "rr_safety.h", "rr_safety.c", "rr_example_task.c", "rr_policy.mk",
         "firmware_report.yaml", EXPORT_MARKER]
    )  # fmt: skip
    assert not no_leftovers(tmp_path)


def test_every_supported_operator_matches_onnxruntime(
    save_model: SaveModel, tmp_path: Path, op_contract: MakeContract, every_op_model: MakeModel
) -> None:
    model = every_op_model(np.random.default_rng(0))
    covered = {n.op_type for n in model.graph.node} - {"Constant"}
    assert covered == set(C_OPS), set(C_OPS) - covered
    path = save_model(model, op_contract())
    report = export_firmware(path, tmp_path / "fw", "cortex-m4f", vectors=1000)
    assert set(report.verified) == {"host", "cortex-m4f"} and max(report.verified.values()) <= TOLERANCE
    graph = from_model(onnx.load(str(path)))
    x = np.random.default_rng(1).standard_normal((1, 6)).astype(np.float32)
    import onnxruntime as ort

    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(graph.run(x), expected, rtol=1e-5, atol=1e-6)  # the numpy reference agrees too


# ------------------------------------------------------------------------------------------------- bad input
def _single(op: str, **attrs: Any) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((6, 4), dtype=np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node(op, ["h"], ["y"], name="the_node", **attrs),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_bad_models_are_refused_by_name_and_leave_nothing(
    save_model: SaveModel, tmp_path: Path, op_contract: MakeContract
) -> None:
    contract = op_contract
    out = tmp_path / "fw"
    cases: list[tuple[onnx.ModelProto, Any, type[Exception], str]] = [
        (_single("Softmax", axis=1), contract(), UnsupportedModelError, "node 'the_node': operator Softmax"),
        (_single("Relu"), None, ContractError, "carries no deployment contract"),
    ]
    dynamic = _single("Relu")
    dynamic.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    cases.append((dynamic, contract(), UnsupportedModelError, r"symbolic dimension 1 \('features'\)"))
    nan = _single("Relu")
    nan.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((6, 4), np.nan, dtype=np.float32), "W"))
    cases.append((nan, contract(), UnsupportedModelError, "tensor 'W' holds non-finite values"))
    shape_of = _single("Relu")
    shape_of.graph.node.insert(0, helper.make_node("Shape", ["x"], ["s"], name="dyn_shape"))
    shape_of.graph.node[2].input[0] = "h"
    shape_of.graph.node.insert(2, helper.make_node("Reshape", ["h", "s"], ["h2"], name="dyn_reshape"))
    cases.append((shape_of, contract(), UnsupportedModelError, "operator Shape is not supported"))
    for i, (model, c, error, match) in enumerate(cases):
        path = save_model(model, c, name=f"bad{i}.onnx")
        with pytest.raises(error, match=match):
            export_firmware(path, out, "host", vectors=10)
        assert not out.exists() and not no_leftovers(tmp_path), match
    with pytest.raises(FileNotFoundError):
        read_model(tmp_path / "missing.onnx")


def test_a_failed_export_keeps_the_previous_one(
    save_model: SaveModel, tmp_path: Path, op_contract: MakeContract, every_op_model: MakeModel
) -> None:
    contract = op_contract
    good = save_model(every_op_model(np.random.default_rng(0)), contract(), name="good.onnx")
    out = tmp_path / "fw"
    export_firmware(good, out, "host", vectors=20)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = save_model(_single("Softmax", axis=1), contract(), name="bad.onnx")
    with pytest.raises(UnsupportedModelError):
        export_firmware(bad, out, "host", vectors=20)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ------------------------------------------------------------------------------- C safety layer vs Python
def _c_streams_harness(tmp_path: Path, body: str) -> str:
    src = tmp_path / "harness.c"
    src.write_text('#include <stdio.h>\n#include "rr_safety.h"\n' + body)
    exe = tmp_path / "harness"
    cmd = ["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{TEMPLATES}", str(src),
           str(TEMPLATES / "rr_safety.c"), "-lm", "-o", str(exe)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


def _c_array(name: str, a: np.ndarray, ctype: str = "double") -> str:
    flat = ", ".join(f"{v!r}" if ctype == "double" else f"{float(v)!r}f" for v in np.asarray(a).reshape(-1).tolist())
    return f"static const {ctype} {name}[{max(1, a.size)}] = {{{flat}}};\n"


@pytest.mark.parametrize("power_w", [0.0, 3.0])
def test_c_energy_tank_reproduces_python_on_recorded_streams(tmp_path: Path, power_w: float) -> None:
    """Torque and set-point streams, as a pure energy tank and with a refill (``tank_power_w``)."""
    rng = np.random.default_rng(4)
    j, steps, dt = 3, 400, 0.002
    params = TankParams(t_init=0.5, t_min=0.1, t_max=0.8, margin=0.01, damping=(0.3, 0.1, 0.2), power_w=power_w)
    # Torque stream: an always-pushing, sometimes adversarial policy on an explicit-Euler unit-inertia plant.
    tau = rng.normal(0.0, 3.0, (steps, j)) + 2.0
    q, qd = np.zeros((steps + 1, j)), np.zeros((steps + 1, j))
    tank = EnergyTank(params, j)
    py_t, py_a, py_c = [], [], []
    for k in range(steps):
        r = tank.torque(tau[k], q[k], qd[k], dt)
        q[k + 1] = q[k] + qd[k] * dt
        qd[k + 1] = qd[k] + (r.command - 0.3 * qd[k]) * dt * 50.0
        py_t.append(r.tank), py_a.append(r.alpha), py_c.append(r.command)
    # Set-point stream: random jumps under stiffness K.
    sp_tank = EnergyTank(params, j)
    targets = rng.normal(0.0, 0.4, (steps, j))
    k_gain = np.array([30.0, 20.0, 10.0])
    prev = np.zeros(j)
    sp_q, sp_qd = rng.normal(0, 0.1, (steps, j)), rng.normal(0, 0.5, (steps, j))
    sp_t, sp_a, sp_c = [], [], []
    for k in range(steps):
        r = sp_tank.setpoint(targets[k], prev, sp_q[k], sp_qd[k], k_gain, dt)
        prev = r.command
        sp_t.append(r.tank), sp_a.append(r.alpha), sp_c.append(r.command)
    tank_args = f"{params.t_init!r}, {params.t_min!r}, {params.t_max!r}, {params.margin!r}"
    body = (
        _c_array("TAU", tau) + _c_array("Q", q) + _c_array("QD", qd) + _c_array("TG", targets)
        + _c_array("SQ", sp_q) + _c_array("SQD", sp_qd) + _c_array("K", k_gain)
        + _c_array("DAMP", np.array(params.damping))
        + f"""
int main(void) {{
    rr_tank t, s; rr_tank_report r; double cmd[{j}], prev[{j}] = {{0}}; int k, i;
    if (rr_tank_init(&t, {j}, {tank_args}, DAMP, {j})) return 1;
    if (rr_tank_init(&s, {j}, {tank_args}, DAMP, {j})) return 1;
    if (rr_tank_set_power(&t, {power_w!r}) || rr_tank_set_power(&s, {power_w!r})) return 1;
    for (k = 0; k < {steps}; ++k) {{
        rr_tank_torque(&t, TAU + k * {j}, Q + k * {j}, QD + k * {j}, {dt!r}, cmd, &r);
        printf("T %.17g %.17g", r.tank, r.alpha);
        for (i = 0; i < {j}; ++i) printf(" %.17g", cmd[i]);
        printf("\\n");
    }}
    for (k = 0; k < {steps}; ++k) {{
        rr_tank_setpoint(&s, TG + k * {j}, prev, SQ + k * {j}, SQD + k * {j}, K, {dt!r}, cmd, &r);
        for (i = 0; i < {j}; ++i) prev[i] = cmd[i];
        printf("S %.17g %.17g", r.tank, r.alpha);
        for (i = 0; i < {j}; ++i) printf(" %.17g", cmd[i]);
        printf("\\n");
    }}
    return 0;
}}
"""
    )  # fmt: skip
    rows = [line.split() for line in _c_streams_harness(tmp_path, body).splitlines()]
    c_t = np.array([[float(v) for v in r[1:]] for r in rows if r[0] == "T"])
    c_s = np.array([[float(v) for v in r[1:]] for r in rows if r[0] == "S"])
    np.testing.assert_allclose(c_t[:, 0], py_t, rtol=0, atol=1e-6)
    np.testing.assert_allclose(c_t[:, 1], py_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(c_t[:, 2:], np.array(py_c), rtol=0, atol=1e-6)
    np.testing.assert_allclose(c_s[:, 0], sp_t, rtol=0, atol=1e-6)
    np.testing.assert_allclose(c_s[:, 1], sp_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(c_s[:, 2:], np.array(sp_c), rtol=0, atol=1e-6)
    assert min(py_a) < 0.5 and min(sp_a) < 0.5  # the streams do exercise the throttling
    assert min(py_t) >= params.t_min - 1e-12 and min(sp_t) >= params.t_min - 1e-12


def test_c_command_limits_reproduce_python(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a, steps = 4, 300
    low, high = np.array([-1.0, -2.0, 0.0, -0.5]), np.array([1.0, 2.0, 3.0, 0.5])
    max_delta = np.array([0.1, -1.0, 0.3, 0.05])
    commands = rng.normal(0.0, 2.0, (steps, a)).astype(np.float32)
    commands[::37, 1] = np.nan
    commands[::53, 2] = np.inf
    prev = np.zeros(a, dtype=np.float32)
    expected, refused = [], []
    for c in commands:
        r = limit_command(c, prev, low, high, max_delta)
        prev = r.command
        expected.append(r.command), refused.append(r.refused)
    body = (
        _c_array("CMD", np.nan_to_num(commands, nan=1e30, posinf=2e30), "float")
        + _c_array("LO", low, "float") + _c_array("HI", high, "float") + _c_array("MD", max_delta, "float")
        + f"""
#include <math.h>
int main(void) {{
    float prev[{a}] = {{0}}, out[{a}], c[{a}]; int k, i, rc;
    for (k = 0; k < {steps}; ++k) {{
        for (i = 0; i < {a}; ++i) {{
            float v = CMD[k * {a} + i];
            c[i] = v == 1e30f ? NAN : (v == 2e30f ? INFINITY : v);
        }}
        rc = rr_limit_command(c, prev, LO, HI, MD, {a}, out);
        printf("%d", rc);
        for (i = 0; i < {a}; ++i) {{ printf(" %.9g", (double)out[i]); prev[i] = out[i]; }}
        printf("\\n");
    }}
    return 0;
}}
"""
    )  # fmt: skip
    rows = [line.split() for line in _c_streams_harness(tmp_path, body).splitlines()]
    assert [int(r[0]) == -4 for r in rows] == refused and any(refused)
    np.testing.assert_array_equal(np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float32), expected)


# ----------------------------------------------------------------------------------- closed loop from C
def test_generated_c_flies_the_quadrotor_evaluation_like_onnx(trained_hover: Any, tmp_path: Path) -> None:
    from policies.runtime import OnnxPolicy
    from robot_rl.config import load_config
    from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env

    out = tmp_path / "fw"
    export_firmware(trained_hover.onnx, out, "host", vectors=10)
    lib_path = tmp_path / "librr.so"
    cmd = ["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC",
           str(out / "rr_policy.c"), "-lm", "-o", str(lib_path)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    lib = ctypes.CDLL(str(lib_path))
    fptr = ctypes.POINTER(ctypes.c_float)
    lib.rr_policy_step.argtypes, lib.rr_policy_step.restype = [fptr, fptr], ctypes.c_int
    onnx_policy = OnnxPolicy(trained_hover.onnx)

    def c_policy(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        x = np.ascontiguousarray(obs["policy"].cpu().numpy(), dtype=np.float32)
        command = np.zeros((x.shape[0], 4), dtype=np.float32)
        for i in range(x.shape[0]):
            rc = lib.rr_policy_step(x[i].ctypes.data_as(fptr), command[i].ctypes.data_as(fptr))
            assert rc == 0
        return torch.from_numpy(onnx_policy.normalized_action(command))

    def ort_policy(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.from_numpy(onnx_policy.normalized_action(onnx_policy.run_obs(obs["policy"].cpu().numpy())))

    cfg = load_config("quadrotor-hover", None, list(trained_hover.overrides))
    results = []
    for policy in (c_policy, ort_policy):
        env = make_eval_env(cfg.task, cfg.env, 128, torch.device("cpu"), randomize=True)
        results.append(evaluate_env(env, policy, seed=cfg.seed + EVAL_SEED_OFFSET).summary())
    c, ort_ = results
    assert c["crash_free_rate"] == ort_["crash_free_rate"] >= 0.9
    assert c["tail_position_error_m"] == pytest.approx(ort_["tail_position_error_m"], abs=2e-3)


def test_cli_export_firmware_end_to_end(trained_hover: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from robot_rl.cli import main

    out = tmp_path / "deploy"
    assert main(["export", "firmware", str(trained_hover.onnx), "--target", "host", "--out", str(out),
                 "--vectors", "50"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "6,720 MACs per step" in printed and "verified on host" in printed and str(out) in printed
    assert (out / "rr_policy.c").is_file() and (out / "firmware_report.yaml").is_file()
    assert main(["export", "firmware", str(tmp_path / "nope.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


@pytest.mark.parametrize("obs_dt", [None, 0.0025], ids=["contract-period", "RR_OBS_DT"])
def test_c_observation_builder_matches_the_runtime_builder(
    save_model: SaveModel, tmp_path: Path, obs_dt: float | None
) -> None:
    """Same terms, scales, histories (newest first), fresh-history fill, clipped integrals and NaN refusal as
    ObservationBuilder; built with ``-DRR_OBS_DT`` the integrals integrate over that period, as the runtime's do when
    given ``control_period_s``."""
    from firmware_export.codegen import generate
    from policies.runtime.contract import ActionSpec, ObservationTerm
    from policies.runtime.observation import ObservationBuilder

    terms = [
        ObservationTerm("base.ang-vel", 3, "ang_vel", scale=0.25, history=2),
        ObservationTerm("joint_pos", 4, "joint_pos", scale=1.5, history=3),
        ObservationTerm("last_action", 4, "last_action"),
        ObservationTerm("ang-vel:integral", 3, "ang_vel", scale=2.0, history=2, integral_limit=0.02, integral_band=0.8),
    ]
    c = Contract("obs-test", 0.01, terms, ActionSpec(4, list("abcd"), "normalized", [1.0] * 4, [0.0] * 4,
                 [-9.0] * 4, [9.0] * 4), input_name="x", output_name="y")  # fmt: skip
    w = numpy_helper.from_array(np.ones((28, 4), dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sources = generate(from_model(model), c).files
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    rng = np.random.default_rng(7)
    steps = 8
    sig = {s: rng.normal(0, 1, (steps, n)).astype(np.float32) for s, n in (("ang_vel", 3), ("joint_pos", 4),
                                                                          ("last_action", 4))}  # fmt: skip
    sig["joint_pos"][5, 2] = np.nan  # refused at step 5
    fill = "\n".join(
        f"        for (i = 0; i < {n}; ++i) s.{name}[i] = {name.upper()}[k * {n} + i];"
        for name, n in (("ang_vel", 3), ("joint_pos", 4), ("last_action", 4))
    )
    arrays = "".join(
        _c_array(name.upper(), np.nan_to_num(sig[name], nan=1e30), "float")
        for name in ("ang_vel", "joint_pos", "last_action")
    )
    body = f"""#include <stdio.h>
#include <math.h>
#include "rr_policy.h"
{arrays}
int main(void) {{
    rr_obs_state st; rr_signals s; float obs[RR_OBS_DIM]; int k, i, rc;
    rr_obs_reset(&st);
    for (k = 0; k < {steps}; ++k) {{
{fill}
        for (i = 0; i < 4; ++i) if (s.joint_pos[i] == 1e30f) s.joint_pos[i] = NAN;
        if (k == 3) rr_obs_reset(&st);
        rc = rr_obs_build(&st, &s, obs);
        printf("%d", rc);
        for (i = 0; i < RR_OBS_DIM; ++i) printf(" %.9g", (double)obs[i]);
        printf("\\n");
    }}
    return 0;
}}
"""
    (tmp_path / "main.c").write_text(body)
    cmd = ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "main.c", "rr_policy.c", "-lm", "-o", "obs"]
    cmd += [] if obs_dt is None else [f"-DRR_OBS_DT={obs_dt}f"]
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    rows = [
        r.split() for r in subprocess.run([str(tmp_path / "obs")], capture_output=True, text=True).stdout.splitlines()
    ]
    builder = ObservationBuilder(terms, 1, xp=np, dt=c.control_period_s if obs_dt is None else obs_dt)
    last = None
    for k, row in enumerate(rows):
        if k == 3:
            builder.reset()
        if k == 5:
            assert int(row[0]) == -3  # RR_ERR_NONFINITE_SIGNAL, histories untouched (checked at step 6)
            continue
        expected = builder({s: v[k : k + 1] for s, v in sig.items()})[0]
        assert int(row[0]) == 0
        np.testing.assert_array_equal(np.array(row[1:], dtype=np.float32), expected)
        last = expected
    assert last is not None


def test_c_energy_tank_refuses_non_finite_inputs_like_python(tmp_path: Path) -> None:
    body = """
#include <math.h>
int main(void) {
    rr_tank t; rr_tank_report r; double damp[1] = {0.1}, cmd[2] = {7.0, 7.0};
    double tau[2] = {1.0, 1.0}, q[2] = {0.0, 0.0}, qd[2] = {1.0, 1.0}, k[2] = {1.0, 1.0};
    double before;
    if (rr_tank_init(&t, 2, 1.0, 0.1, 2.0, 0.0, damp, 1)) return 1;
    if (rr_tank_torque(&t, tau, q, qd, 0.01, cmd, &r) != RR_TANK_OK) return 2;
    before = t.tank;
    cmd[0] = cmd[1] = 7.0;
    tau[0] = NAN;
    printf("%d %d", rr_tank_torque(&t, tau, q, qd, 0.01, cmd, &r), t.tank == before && cmd[0] == 7.0);
    k[1] = INFINITY;
    printf(" %d", rr_tank_setpoint(&t, q, q, q, qd, k, 0.01, cmd, &r));
    tau[0] = 1.0;
    printf(" %d\\n", rr_tank_torque(&t, tau, q, qd, 0.0, cmd, &r));
    return 0;
}
"""
    assert _c_streams_harness(tmp_path, body).split() == ["-5", "1", "-5", "-5"]
