"""A quadrotor policy as an out-of-tree app of Bitcraze's ``crazyflie-firmware`` (``robot-rl export crazyflie``).

The app replaces the firmware's controller (``CONFIG_CONTROLLER_OOT``; ``controllerOutOfTree`` in
``templates/crazyflie/rr_crazyflie_app.c``): every stabilizer tick (1 kHz) it gets the state estimate, the gyro and
the commander's setpoint; at the contract's rate it builds the policy's observation (position and velocity relative
to the setpoint, attitude, body rates, the last commands), runs the generated C policy and hands the four rotor
forces to the firmware's own power distribution (``controlModeForce``: normalised by the platform's ``THRUST_MAX``,
motor order M1..M4, battery-compensated thrust to PWM). The core (``rr_crazyflie.c``) takes plain floats and keeps
its state in a caller-owned struct, so a host program steps the same code in simulation.

Conventions checked against the firmware at the commit in :data:`FIRMWARE_COMMIT` before anything is written:

- motor order and spin: ``power_distribution_quadrotor.c`` (``powerDistributionForceTorque``) mixes roll torque with
  signs (-, -, +, +), pitch (-, +, +, -) and yaw (-, +, -, +) over M1..M4, so M1 sits front right, M2 rear right,
  M3 rear left, M4 front left (x forward, y left), and M2 and M4 spin clockwise seen from above (their drag torque
  is +z). The contract's ``airframe.motor_order``, rotor positions and ``reaction_torque_sign_z`` must say the same.
- frames and units: ``stabilizer_types.h``: ``state_t.position`` (m) and ``velocity`` (m/s) in the world frame
  (z up), ``attitudeQuaternion`` body -> world, ``sensorData_t.gyro`` in deg/s (body), ``setpoint_t.position`` /
  ``velocity`` with ``mode.x/y/z == modeAbs`` for a position setpoint; ``mode.z == modeDisable`` is the commander's
  stop (motors off here too).
- rate: ``RATE_DO_EXECUTE`` runs a step every ``1000 / rate`` ticks; the contract's rate must be one of the
  firmware's ``RATE_*_HZ`` (25, 50, 100, 250, 500, 1000).

When a firmware checkout is given (``--firmware``), the app is built for ``cf2`` there with ``arm-none-eabi-gcc`` (the
firmware's own make, out-of-tree) and the firmware's size summary is kept; the checkout's submodules must be present.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from firmware_export.codegen import c_float
from firmware_export.export import FirmwareReport, export_firmware, read_model
from firmware_export.graph import UnsupportedModelError
from firmware_export.targets import TARGETS, TEMPLATES, ToolchainError, compile_objects, require
from policies.runtime.contract import Contract
from policies.runtime.files import check_export_folder, replace_export_folder
from policies.runtime.text import make_comment, printable

EXPORT_KIND = "crazyflie-app"
FIRMWARE_COMMIT = "2a18fc299d7b"
"""The crazyflie-firmware commit the conventions above were read from (and the app was built against)."""
MOTOR_ORDER = ("m1_front_right", "m2_rear_right", "m3_rear_left", "m4_front_left")
ROTOR_SIGNS_XY = ((1, -1), (-1, -1), (-1, 1), (1, 1))
"""Signs of each motor's x (forward) and y (left) position, M1..M4 (the firmware mixer above)."""
REACTION_TORQUE_SIGN_Z = (-1, 1, -1, 1)
"""Sign of each motor's drag torque on the body about +z, M1..M4: M2 and M4 spin clockwise seen from above."""
FIRMWARE_RATES_HZ = (25, 50, 100, 250, 500, 1000)
SIGNALS = {"pos_w", "rot_mat", "lin_vel_w", "ang_vel_b", "last_action"}
"""The signals the app computes from the firmware's state: exactly what a hover policy reads."""
MAX_TARGET_SPEED_M_S = 0.5
"""Largest setpoint velocity fed forward, m/s (the ROS 2 node's default; the policies were measured to 0.31 m/s)."""
APP_SOURCES = ("rr_crazyflie.c", "rr_crazyflie.h", "rr_crazyflie_app.c")
STACK_BUDGET_BYTES = 512
"""Most stack one control step may take in the stabilizer task (``STABILIZER_TASK_STACKSIZE``: 3 x 150 words)."""


class CrazyflieAppError(UnsupportedModelError):
    """The policy cannot run as a Crazyflie controller (its contract disagrees with the firmware), named."""


@dataclass
class CrazyflieReport:
    """What ``export crazyflie`` produced.

    Attributes:
        out: The app folder.
        rate_hz: The policy's rate in the firmware.
        step_stack_bytes: Stack of one control step on the Cortex-M4F (``rr_cf_step`` and its deepest callee,
            ``-fstack-usage``; the policy's intermediates static).
        policy: The generated policy's report (flash, instructions per step, verification), target ``cortex-m4f``.
        firmware: The firmware checkout it was built in (``None``: not built).
        firmware_size: The firmware's own size summary of the ``cf2`` build (Flash / RAM / CCM lines).
    """

    out: str
    rate_hz: int
    policy: FirmwareReport
    step_stack_bytes: int = 0
    firmware: str | None = None
    firmware_size: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Readable summary lines."""
        out = [f"Crazyflie app: {self.out} (policy at {self.rate_hz} Hz in the 1 kHz stabilizer loop)"]
        out += self.policy.lines()[1:]
        out.append(
            f"  stack per control step in the stabilizer task: {self.step_stack_bytes:,} B (intermediates static)"
        )
        if self.firmware is not None:
            out.append(f"  built for cf2 in {self.firmware}:")
            out += [f"    {line}" for line in self.firmware_size]
        else:
            out.append("  not built: give --firmware PATH (a crazyflie-firmware checkout with its submodules)")
        return out


def check_contract(contract: Contract) -> int:
    """The policy's rate in the firmware, after checking its contract against the firmware's conventions.

    Raises:
        CrazyflieAppError: Naming the first disagreement (action kind, motor order or spin, signals, rate).
    """
    a = contract.action
    if a.kind != "rpm" or a.size != 4:
        raise CrazyflieAppError(f"a Crazyflie app needs four rotor-speed commands (kind rpm); this policy has {a.size} "
                                f"commands of kind '{printable(a.kind)}'")  # fmt: skip
    airframe = contract.extra.get("airframe")
    if not isinstance(airframe, dict):
        raise CrazyflieAppError("the contract states no airframe (extra.airframe): motor order and spin are unknown")
    order = tuple(str(v) for v in airframe.get("motor_order", ()))
    if order != MOTOR_ORDER:
        raise CrazyflieAppError(f"the contract's motor order {[printable(v) for v in order]} is not the firmware's "
                                f"{list(MOTOR_ORDER)}")  # fmt: skip
    positions = airframe.get("rotor_positions_m", [])
    signs = [(_sign(p[0]), _sign(p[1])) for p in positions] if isinstance(positions, list) else []
    if tuple(signs) != ROTOR_SIGNS_XY:
        raise CrazyflieAppError(f"the contract's rotor positions put the motors at x/y signs {signs}; the firmware's "
                                f"M1..M4 are at {list(ROTOR_SIGNS_XY)}")  # fmt: skip
    torque = tuple(_sign(v) for v in airframe.get("reaction_torque_sign_z", ()))
    if torque != REACTION_TORQUE_SIGN_Z:
        raise CrazyflieAppError(f"the contract's rotor drag torques have signs {list(torque)}; the firmware's M1..M4 "
                                f"have {list(REACTION_TORQUE_SIGN_Z)} (M2 and M4 spin clockwise)")  # fmt: skip
    for key in ("max_thrust_per_rotor_n", "thrust_curve_linear", "max_rpm"):
        if not isinstance(airframe.get(key), int | float):
            raise CrazyflieAppError(f"the contract's airframe has no number '{key}' (the thrust model)")
    sources = {t.source for t in contract.observation}
    if sources != SIGNALS:
        raise CrazyflieAppError(f"the app computes the signals {sorted(SIGNALS)}; this policy reads "
                                f"{sorted(printable(s) for s in sources)}")  # fmt: skip
    rate = 1.0 / contract.control_period_s
    if round(rate) not in FIRMWARE_RATES_HZ or abs(rate - round(rate)) > 1e-6:
        raise CrazyflieAppError(f"the policy runs at {rate:g} Hz; the firmware steps controllers at "
                                f"{', '.join(map(str, FIRMWARE_RATES_HZ))} Hz")  # fmt: skip
    return round(rate)


def _sign(v: Any) -> int:
    return 1 if float(v) > 0 else (-1 if float(v) < 0 else 0)


def export_crazyflie(onnx_path: Path, out: Path, firmware: Path | None = None, vectors: int = 1000) -> CrazyflieReport:
    """Generate the app for ``onnx_path`` into ``out`` (replaced whole, only on success), verify its policy against
    onnxruntime on a Cortex-M4F under QEMU and, with ``firmware``, build it for ``cf2`` there.

    Raises:
        CrazyflieAppError / UnsupportedModelError / ContractError: The policy cannot be this app (named).
        ToolchainError: A compiler, QEMU or the firmware build failed (its output in the message).
    """
    check_export_folder(out, EXPORT_KIND, [onnx_path])
    _, contract = read_model(onnx_path)
    rate = check_contract(contract)
    if firmware is not None and not (firmware / "tools" / "make" / "oot.mk").is_file():
        raise ToolchainError(f"'{firmware}' is not a crazyflie-firmware checkout (no tools/make/oot.mk)")
    with tempfile.TemporaryDirectory(prefix="robot-rl-crazyflie-") as scratch:
        work = Path(scratch)
        policy = export_firmware(onnx_path, work / "policy", "cortex-m4f", vectors)
        app = work / "app"
        (app / "src").mkdir(parents=True)
        for name in ("rr_policy.c", "rr_policy.h"):
            shutil.copy(work / "policy" / name, app / "src" / name)
        for name in APP_SOURCES:
            shutil.copy(TEMPLATES / "crazyflie" / name, app / "src" / name)
        (app / "src" / "rr_crazyflie_config.h").write_text(_config_header(contract, rate))
        (app / "src" / "Kbuild").write_text(
            "obj-y += rr_crazyflie_app.o rr_crazyflie.o rr_policy.o\n"
            "ccflags-y += -DRR_STATIC_BUFFERS  # the policy's intermediates in static RAM: the stabilizer task's "
            "stack is 1.8 KB\n"
        )
        (app / "Kbuild").write_text("obj-y += src/\n")
        (app / "app-config").write_text(
            "CONFIG_APP_ENABLE=y\nCONFIG_APP_PRIORITY=1\nCONFIG_APP_STACKSIZE=350\nCONFIG_CONTROLLER_OOT=y\n"
        )
        (app / "Makefile").write_text(_makefile(contract))
        (app / "README.md").write_text(_readme(contract, rate))
        report = CrazyflieReport(str(out), rate, policy, step_stack_bytes=step_stack(app / "src", work / "stack"))
        if report.step_stack_bytes > STACK_BUDGET_BYTES:
            raise ToolchainError(
                f"one control step needs {report.step_stack_bytes} B of the stabilizer task's stack; the app allows "
                f"{STACK_BUDGET_BYTES} B (the task has 1,800 B for everything)"
            )
        if firmware is not None:
            report.firmware = str(firmware.resolve())
            report.firmware_size = build_in_firmware(app, firmware.resolve())
        (app / "crazyflie_report.yaml").write_text(yaml.safe_dump(asdict(report), sort_keys=False))
        replace_export_folder(app, out, EXPORT_KIND)
    return report


def step_stack(src: Path, work: Path) -> int:
    """Stack of one ``rr_cf_step`` on the Cortex-M4F, bytes: its own frame plus its deepest callee's
    (``-fstack-usage`` of the app's core and policy, built with ``-DRR_STATIC_BUFFERS`` as the app is)."""
    shutil.copytree(src, work)
    compile_objects(TARGETS["cortex-m4f"], work, ["rr_crazyflie.c", "rr_policy.c"], ("-DRR_STATIC_BUFFERS",))
    frames: dict[str, int] = {}
    for su in work.glob("*.su"):
        for line in su.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 2:
                frames[parts[0].rsplit(":", 1)[-1]] = int(parts[1])
    deepest = max(
        frames.get("rr_obs_build", 0) + frames.get("rr_obs_check", 0),  # rr_obs_build calls rr_obs_check
        frames.get("rr_policy_step", 0),
        frames.get("rr_normalized_action", 0),
    )
    return frames.get("rr_cf_step", 0) + deepest


def build_in_firmware(app: Path, firmware: Path, timeout_s: float = 900.0) -> list[str]:
    """Build a copy of ``app`` out of tree in ``firmware`` for ``cf2``; the firmware's size summary lines.

    Raises:
        ToolchainError: ``arm-none-eabi-gcc`` or ``make`` is missing, or the build failed (its last output).
    """
    require("arm-none-eabi-gcc")
    make = require("make")
    with tempfile.TemporaryDirectory(prefix="robot-rl-cf-build-") as tmp:
        build = Path(tmp) / "app"
        shutil.copytree(app, build)
        cmd = [make, "-j2", f"CRAZYFLIE_BASE={firmware}"]
        try:
            done = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ToolchainError(f"the firmware build did not finish within {timeout_s:g} s") from None
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-3000:]
            raise ToolchainError(f"the crazyflie-firmware build failed ({done.returncode}):\n{tail}")
        sizes = [ln.strip() for ln in done.stdout.splitlines() if re.match(r"\s*(Flash|RAM|CCM)\s*\|", ln)]
        if not (build / "build" / "cf2.bin").is_file():
            raise ToolchainError("the crazyflie-firmware build finished without build/cf2.bin")
        shutil.copy(build / "build" / "cf2.bin", app / "cf2.bin")
    return sizes


def _config_header(c: Contract, rate: int) -> str:
    airframe = c.extra["airframe"]
    envelope = c.extra.get("training_envelope", {})
    radius = float(envelope.get("init_pos_radius_m", 0.5)) if isinstance(envelope, dict) else 0.5
    return (
        f"/* Generated by robot-rl from the contract of task '{make_comment(c.task)}'. Do not edit. */\n"
        "#ifndef RR_CRAZYFLIE_CONFIG_H\n#define RR_CRAZYFLIE_CONFIG_H\n\n"
        f"#define RR_CF_RATE_HZ {rate} /* the policy's control rate */\n"
        f"#define RR_CF_MAX_THRUST_N {c_float(airframe['max_thrust_per_rotor_n'])} /* thrust at max_rpm, N */\n"
        f"#define RR_CF_THRUST_CURVE_LINEAR {c_float(airframe['thrust_curve_linear'])}\n"
        f"#define RR_CF_MAX_RPM {c_float(airframe['max_rpm'])}\n"
        f"#define RR_CF_ENVELOPE_M {c_float(radius)} /* largest target offset the policy was trained on */\n"
        "#ifndef RR_CF_MAX_TARGET_SPEED_M_S\n"
        f"#define RR_CF_MAX_TARGET_SPEED_M_S {c_float(MAX_TARGET_SPEED_M_S)} /* setpoint velocity fed forward */\n"
        "#endif\n\n#endif /* RR_CRAZYFLIE_CONFIG_H */\n"
    )


def _makefile(c: Contract) -> str:
    return (
        f"# robot-rl policy of task {make_comment(c.task)} as a crazyflie-firmware out-of-tree app.\n"
        "#   make CRAZYFLIE_BASE=/path/to/crazyflie-firmware      (its submodules checked out)\n"
        f"# Built and checked against crazyflie-firmware {FIRMWARE_COMMIT}.\n"
        "CRAZYFLIE_BASE ?= ../crazyflie-firmware\n"
        "OOT := $(CURDIR)\n"
        "OOT_CONFIG := $(CURDIR)/app-config\n"
        "include $(CRAZYFLIE_BASE)/tools/make/oot.mk\n"
    )


def _readme(c: Contract, rate: int) -> str:
    return f"""# robot-rl policy as a Crazyflie controller

Generated by `robot-rl export crazyflie` from the policy of task `{make_comment(c.task)}`.

    make CRAZYFLIE_BASE=/path/to/crazyflie-firmware   # a checkout with its submodules, e.g. {FIRMWARE_COMMIT}
    make cload                                        # flash over the radio (cfclient's tools)

Select the controller with the parameter `stabilizer.controller = 6` (ControllerTypeOot). The policy runs at
{rate} Hz inside the 1 kHz stabilizer loop and writes motor forces through the firmware's power distribution
(`controlModeForce`). Send position setpoints (the high-level commander or `cf.commander.send_position_setpoint`):
the policy flies to them, feeding a world-frame setpoint velocity forward (at most
{MAX_TARGET_SPEED_M_S:g} m/s), with the target's offset held within the envelope it was trained in; a
velocity-mode or attitude setpoint holds the last position target. The commander's stop (`mode.z` disabled, also its
timeout) turns the motors off and the next flight starts fresh. A non-finite state latches motors off until then.

Files: `src/rr_policy.c/.h` (the policy, generated and verified against onnxruntime), `src/rr_crazyflie.c/.h`
(the controller core: plain floats, no firmware types), `src/rr_crazyflie_app.c` (the firmware binding),
`src/rr_crazyflie_config.h` (the contract's rate, thrust model and envelope).
"""
