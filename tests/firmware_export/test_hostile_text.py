"""Text from a model file never becomes code: property-based fuzzing of every string that reaches the generated C and
Makefile (contract text, ONNX node and initializer names). Each case is refused when the contract loads, or the
generated files compile and hold the text only inside escaped comments; a marker payload never runs, neither when the
C is built and run for verification nor when the Makefile fragment is read by make."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from firmware_export.codegen import generate
from firmware_export.export import _makefile, export_firmware, read_model
from firmware_export.graph import UnsupportedModelError, from_model
from policies.runtime.contract import METADATA_KEY, ContractError

OBS, ACT = 3, 2
MARKER = "rr_pwned_marker"
FRAGMENTS = [
    "*/", "/*", "//", "\n", "\r", "\\", "??/", "\"", "'", "#include <stdlib.h>", f"int {MARKER} = 1;",
    f'system("touch {MARKER}");', f"$(shell touch {MARKER})", "\x1b[2J", "\u202e", "$", "#", "`", "a", "_", " ",
]  # fmt: skip
hostile = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), min_size=1, max_size=6).map("".join)


def model(node_name: str, init_name: str, contract: dict[str, Any]) -> onnx.ModelProto:
    """``x [1, 3] @ W -> tanh -> y [1, 2]``, with hostile names, and ``contract`` (plain data) in its metadata."""
    w = numpy_helper.from_array(np.full((OBS, ACT), 0.1, np.float32), init_name)
    nodes = [helper.make_node("MatMul", ["x", init_name], ["h"], name=node_name),
             helper.make_node("Tanh", ["h"], ["y"], name=node_name + "_2")]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, OBS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ACT])],
        [w],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    helper.set_model_props(m, {METADATA_KEY: json.dumps(contract)})
    return m


def contract_data(task: str = "op-test", term: str = "x", source: str = "x", unit: str = "m", names: Any = None,
                  action_unit: str = "") -> dict[str, Any]:  # fmt: skip
    return {
        "task": task,
        "control_period_s": 0.01,
        "observation": [{"name": term, "size": OBS, "source": source, "unit": unit}],
        "action": {
            "size": ACT,
            "names": names or ["u0", "u1"],
            "kind": "normalized",
            "scale": [1.0, 1.0],
            "offset": [0.0, 0.0],
            "low": [-1.0, -1.0],
            "high": [1.0, 1.0],
            "unit": action_unit,
        },
        "input_name": "x",
        "output_name": "y",
    }


def _outside_comments(code: str) -> str:
    import re

    return re.sub(r"/\*.*?\*/", " ", code, flags=re.DOTALL)


def _generate(tmp_path: Path, m: onnx.ModelProto) -> dict[str, str] | None:
    """The generated files, or ``None`` when the model is refused by name (ContractError / UnsupportedModelError)."""
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    try:
        _, contract = read_model(path)
        files = generate(from_model(onnx.load(str(path))), contract).files
    except (ContractError, UnsupportedModelError) as exc:
        assert "\n" not in str(exc) and "\x1b" not in str(exc), str(exc)  # one line, no terminal escapes
        return None
    return {**files, "rr_policy.mk": _makefile("host", contract)}


def _check(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for name in ("rr_policy.h", "rr_policy.c"):
        assert MARKER not in _outside_comments(files[name]), name
        assert "system" not in _outside_comments(files[name]), name
    done = subprocess.run(
        ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "rr_policy.c"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    make = subprocess.run(["make", "-p", "-n", "-f", "rr_policy.mk"], cwd=tmp_path, capture_output=True, text=True)
    assert "RR_SRCS" in make.stdout, make.stderr  # make read the whole fragment ...
    assert not (tmp_path / MARKER).exists()  # ... and ran nothing from it
    assert all(line.startswith(("#", "RR_")) or not line for line in files["rr_policy.mk"].splitlines())


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(node=hostile, init=hostile)
def test_hostile_onnx_node_and_initializer_names_stay_inside_comments(tmp_path: Path, node: str, init: str) -> None:
    assume(init not in ("x", "h", "y"))  # a weight named as a tensor the graph computes: refused (next test)
    files = _generate(tmp_path, model(node or "n", init or "W", contract_data()))
    assert files is not None  # graph names are never refused, only escaped
    _check(tmp_path, files)


@pytest.mark.parametrize("name", ["h", "y"])
def test_a_tensor_defined_twice_is_refused_by_name(name: str) -> None:
    with pytest.raises(UnsupportedModelError, match=f"writes tensor '{name}', which the graph already defines"):
        from_model(model("n", name, contract_data()))


@SETTINGS
@given(field=st.sampled_from(["task", "term", "source", "unit", "names", "action_unit"]), text=hostile)
def test_hostile_contract_text_is_refused_or_stays_inside_comments(tmp_path: Path, field: str, text: str) -> None:
    kwargs: dict[str, Any] = {field: [text, "u1"] if field == "names" else text}
    files = _generate(tmp_path, model("n", "W", contract_data(**kwargs)))
    if files is not None:
        _check(tmp_path, files)


def test_a_hostile_model_exports_verifies_and_its_payload_never_runs(tmp_path: Path) -> None:
    """The whole export, which builds and runs the C for the host to verify it: the graph's names carry a payload
    that would call system() if it escaped its comment; the export succeeds and the marker is never made."""
    payload = f'*/ int main(void) {{ return system("touch {tmp_path / MARKER}"); }} /*'
    path = tmp_path / "m.onnx"
    onnx.save(model(payload, payload + "W", contract_data(unit="m/s")), str(path))
    report = export_firmware(path, tmp_path / "fw", "host", vectors=20)
    assert report.verified["host"] <= 1e-5 and not (tmp_path / MARKER).exists()
    source = (tmp_path / "fw" / "rr_policy.c").read_text()
    assert "system" not in _outside_comments(source)
    assert "/* MatMul _/ int main(void) _ return system(_touch" in source  # escaped inside its comment, readable


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "hover\n$(shell touch x)"}, "task must be a task name"),
        ({"term": "x */ int y; /*"}, "observation term name must be a name"),
        ({"unit": "m */"}, "observation term 'x': unit must be a unit"),
        ({"names": ["u0\x1b[2J", "u1"]}, "action.names[0] must be a name"),
        ({"source": ""}, "source must be a non-empty string"),
    ],
)
def test_contract_text_outside_its_character_set_is_refused_when_the_contract_loads(
    change: dict[str, Any], message: str
) -> None:
    from policies.runtime.contract import Contract

    with pytest.raises(ContractError) as info:
        Contract.from_dict(contract_data(**change))
    assert message in str(info.value) and "\n" not in str(info.value) and "\x1b" not in str(info.value)
