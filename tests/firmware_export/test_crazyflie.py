"""``robot-rl export crazyflie``: the app's controller core, built for the host, flies the hover evaluation from the
simulated state estimate (through the firmware's force normalisation and its THRUST_MAX clip); policies whose
contract disagrees with the firmware are refused by name; with a firmware checkout the app builds for cf2."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import helper

from firmware_export.crazyflie import CrazyflieAppError, check_contract, export_crazyflie
from policies.runtime.contract import METADATA_KEY, Contract


def test_the_app_flies_the_hover_evaluation_from_the_state_estimate(trained_hover: Any, tmp_path: Path) -> None:
    """The app's C, built for the host, hovers the held-out episodes from the simulated state estimate through the
    firmware's force normalisation (normalised forces of the training model's maximum thrust here: the firmware's
    own 0.12 N THRUST_MAX clip is a physical limit, measured by bench/crazyflie_app.py, not the code's)."""
    from robot_rl.config import load_config
    from robot_rl.transfer.crazyflie_app import airframe, fly_app

    report = export_crazyflie(trained_hover.onnx, tmp_path / "app", vectors=50)
    assert report.rate_hz == 50 and 0 < report.step_stack_bytes <= 512
    names = sorted(p.name for p in (tmp_path / "app").iterdir())
    assert {"Makefile", "Kbuild", "app-config", "src", "README.md", "crazyflie_report.yaml"} <= set(names)
    assert "CONFIG_CONTROLLER_OOT=y" in (tmp_path / "app" / "app-config").read_text()
    cfg = load_config("quadrotor-hover", None, list(trained_hover.overrides))
    full = airframe(trained_hover.onnx)["max_thrust_per_rotor_n"]
    flight = fly_app(tmp_path / "app" / "src", trained_hover.onnx, cfg.env, cfg.seed, worlds=64, thrust_max_n=full)
    assert flight.crash_free_rate >= 0.95 and flight.tail_position_error_m < 0.05, flight  # the task's criterion


def _contract_with(untrained: Path, **changes: Any) -> Contract:
    data = json.loads({p.key: p.value for p in onnx.load(str(untrained)).metadata_props}[METADATA_KEY])
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return Contract.from_json(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"extra__airframe__motor_order": ["m1", "m2", "m3", "m4"]}, "motor order"),
        ({"extra__airframe__reaction_torque_sign_z": [1, -1, 1, -1]}, "M2 and M4 spin clockwise"),
        ({"extra__airframe__rotor_positions_m": [[-1, 1, 0], [1, 1, 0], [1, -1, 0], [-1, -1, 0]]}, "x/y signs"),
        ({"control_period_s": 1 / 60}, "the policy runs at 60 Hz"),
        ({"action__kind": "position"}, "four rotor-speed commands"),
    ],
)
def test_a_contract_that_disagrees_with_the_firmware_is_refused_by_name(
    untrained_hover: Path, changes: dict[str, Any], match: str
) -> None:
    with pytest.raises(CrazyflieAppError, match=match):
        check_contract(_contract_with(untrained_hover, **changes))


def test_the_app_is_refused_before_anything_is_written(untrained_hover: Path, tmp_path: Path) -> None:
    model = onnx.load(str(untrained_hover))
    data = json.loads({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
    data["extra"]["airframe"]["motor_order"] = list(reversed(data["extra"]["airframe"]["motor_order"]))
    helper.set_model_props(model, {METADATA_KEY: json.dumps(data)})
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(CrazyflieAppError, match="motor order"):
        export_crazyflie(bad, tmp_path / "app")
    assert not (tmp_path / "app").exists()


FIRMWARE = os.environ.get("RR_CRAZYFLIE_FIRMWARE", "")


@pytest.mark.skipif(
    not FIRMWARE,
    reason="set RR_CRAZYFLIE_FIRMWARE to a crazyflie-firmware checkout with its submodules (docs/firmware.md, "
    "'On the Crazyflie') to build the app for cf2; CI has no network to fetch one",
)
def test_the_app_builds_into_the_crazyflie_firmware(untrained_hover: Path, tmp_path: Path) -> None:
    report = export_crazyflie(untrained_hover, tmp_path / "app", Path(FIRMWARE), vectors=20)
    assert (tmp_path / "app" / "cf2.bin").stat().st_size > 100_000
    flash = [line for line in report.firmware_size if line.startswith("Flash")]
    assert flash and math.isfinite(float(flash[0].split("|")[1].split("/")[0]))


def test_cli_export_crazyflie_and_its_refusals(
    untrained_hover: Path, untrained_reach: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from robot_rl.cli import main

    out = tmp_path / "app"
    assert main(["export", "crazyflie", str(untrained_hover), "--out", str(out), "--vectors", "20"]) == 0
    assert "stack per control step" in capsys.readouterr().out and (out / "src" / "rr_crazyflie_app.c").is_file()
    assert main(["export", "crazyflie", str(untrained_hover), "--out", str(out), "--vectors", "20"]) == 0  # replaced
    for args, message in [
        ([str(untrained_reach), "--out", str(tmp_path / "arm")], "four rotor-speed commands"),
        ([str(untrained_hover), "--out", str(tmp_path / "x"), "--firmware", str(tmp_path / "nope")], "not a folder"),
        ([str(untrained_hover), "--out", str(tmp_path / "y"), "--firmware", str(tmp_path)], "not a crazyflie-firmware"),
    ]:
        assert main(["export", "crazyflie", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "arm").exists() and not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
