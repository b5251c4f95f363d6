"""``robot-rl export int8 RUN``: the trained hover policy's int8 copy flies the held-out episodes as the float one
does (in the training simulator and in PyBullet), its commands stay within a few hundredths of float on the recorded
inputs, and bad requests are refused before anything is written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from firmware_export.quantize import quantization_record
from policies.runtime.onnx_policy import OnnxPolicy
from robot_rl.cli import main


@pytest.fixture(scope="module")
def int8_run(trained_hover: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A copy of the trained hover run after ``robot-rl export int8`` (with PyBullet), and what it printed."""
    run = tmp_path_factory.mktemp("int8") / "run"
    shutil.copytree(trained_hover.run_dir, run)
    code = main(["export", "int8", str(run), "--calibration-episodes", "16", "--episodes", "32", "--sim", "pybullet"])
    assert code == 0
    return run, (run / "int8.yaml").read_text()


SHARES_THE_EXPORT = pytest.mark.xdist_group("int8-export")
"""The tests that use ``int8_run`` run on one pytest-xdist worker, so that the export (about 35 s) is made once."""


@SHARES_THE_EXPORT
def test_int8_copy_flies_as_the_float_policy(int8_run: tuple[Path, str]) -> None:
    run, text = int8_run
    report = yaml.safe_load(text)
    assert set(report) == {"randomization_on", "randomization_off", "action_error", "pybullet"}
    for setting in ("randomization_on", "randomization_off"):
        f, q = report[setting]["float"], report[setting]["int8"]
        assert f["criterion_met"] and q["criterion_met"], (setting, f, q)
        assert abs(q["success_rate"] - f["success_rate"]) <= 0.1, (setting, f, q)
    assert report["pybullet"]["int8"]["criterion_met"], report["pybullet"]
    error = report["action_error"]
    assert error["inputs"] >= 32 * 100 and error["mean"] < 0.03 and error["p99"] < 0.1, error  # 8 bits: ~1-2 %
    model = onnx.load(str(run / "policy_int8.onnx"))
    record = quantization_record(model)
    assert record is not None and record["calibration_inputs"] > 1000, record
    policy = OnnxPolicy(run / "policy_int8.onnx")  # a robot loads it as it loads the float file
    assert policy.contract == OnnxPolicy(run / "policy.onnx").contract
    assert np.isfinite(policy.self_test()).all()


@SHARES_THE_EXPORT
def test_int8_export_feeds_the_firmware_exporter(int8_run: tuple[Path, str], tmp_path: Path) -> None:
    run, _ = int8_run
    out = tmp_path / "fw"
    assert main(["export", "firmware", str(run / "policy_int8.onnx"), "--target", "host", "--out", str(out)]) == 0
    fw = yaml.safe_load((out / "firmware_report.yaml").read_text())
    assert fw["int8"] and fw["verified"]["host"] <= fw["tolerance"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--calibration-episodes", "0"], "--calibration-episodes"),
        (["--episodes", "0", "--sim", "pybullet"], "--sim flies --episodes"),
    ],
)
def test_bad_int8_requests_are_refused_before_anything_is_written(
    trained_hover: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_hover.run_dir, run)
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", "int8", str(run), *args]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
