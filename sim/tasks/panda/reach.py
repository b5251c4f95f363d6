"""Task ``panda-reach``: bring the Panda's tool centre point (TCP) to a random target pose and hold it there.

Every episode draws a target position in a box in front of the robot and a target orientation with the gripper
pointing down, turned about the vertical by a random yaw. The arm starts near the home pose (``sim.robots.panda``).

Onboard (``policy``) observation, ``7 + 7 + 9 + 9 + A * H`` values::

    joint_positions [7] rad | joint_velocities [7] rad/s | tcp_position [3] m | tcp_orientation [6] |
    target_position [3] m | target_orientation [6] | last_action [A] x H

Poses are in the robot's base frame; orientations are the first two columns of the rotation matrix (tool to base),
column by column. The TCP pose is what the robot reports from its own kinematics (libfranka's ``O_T_EE``, published
by franka_ros2 in ``franka_robot_state``), here from the simulated kinematics.

Privileged (``critic``): the noise-free joints, the TCP pose and its error, the randomised parameters, latency.

Success: at the time limit, TCP position error < ``success_position_error`` and orientation error <
``success_orientation_error``. Criterion: success in >= 90 % of evaluation episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from policies.runtime.contract import ObservationTerm
from sim import rewards
from sim.measurements import Measurement, Pose
from sim.registry import TaskSpec
from sim.robots import panda
from sim.tasks.base import check_fields, check_randomization
from sim.tasks.panda.base import (
    GRIPPER_DOWN,
    PandaConfig,
    PandaTask,
    arm_param_specs,
    rot6,
    rotation_error,
    yaw_rotation,
)


def _default_rewards() -> dict[str, float]:
    # Per-second rates (the env multiplies by dt); a 3 s episode at the target earns about 3.
    return {
        "position_error": -1.0,
        "position_fine": 1.0,
        "orientation_error": -0.3,
        "action_rate": -0.02,
        "joint_velocity": -0.001,
    }


@dataclass
class PandaReachConfig(PandaConfig):
    """Configuration of ``panda-reach`` (see the module docstring and :class:`PandaConfig`).

    Attributes:
        target_low: Lower corner of the target box, m (base frame).
        target_high: Upper corner of the target box, m.
        target_yaw_range: Target yaw about the vertical, uniform in ``±`` this, rad.
        fine_sigma: Width of the ``position_fine`` kernel, m.
        success_position_error: Success threshold on the final TCP position error, m.
        success_orientation_error: Success threshold on the final orientation error, rad.
    """

    target_low: tuple[float, float, float] = (0.35, -0.25, 0.15)
    target_high: tuple[float, float, float] = (0.65, 0.25, 0.50)
    target_yaw_range: float = math.pi / 4
    fine_sigma: float = 0.1
    success_position_error: float = 0.05
    success_orientation_error: float = 0.3
    reward_scales: dict[str, float] = field(default_factory=_default_rewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(self, ("target_low", "target_high", "target_yaw_range"), "env.", positive=False)
        check_fields(self, ("fine_sigma", "success_position_error", "success_orientation_error"), "env.")
        if any(lo > hi for lo, hi in zip(self.target_low, self.target_high, strict=True)):
            raise ValueError(f"env.target_low {list(self.target_low)} exceeds env.target_high somewhere")
        check_randomization(self.randomization, arm_param_specs(panda.build_model("impedance")))


class PandaReach(PandaTask):
    """TCP to a random target pose (see the module docstring)."""

    task_name = "panda-reach"
    success_bar = 0.9
    median_figures = (
        ("final_position_error_m", "final_position_error"),
        ("final_orientation_error_rad", "final_orientation_error"),
    )
    goal_state = ("target_pos", "target_rot")

    def __init__(self, cfg: PandaReachConfig, num_envs: int, device: torch.device, seed: int = 0) -> None:
        terms = [
            ObservationTerm("target_position", 3, "target_pos", unit="m"),
            ObservationTerm("target_orientation", 6, "target_rot6"),
        ]
        self.target_pos = torch.zeros(num_envs, 3, device=device)
        self.target_rot = GRIPPER_DOWN.to(device).expand(num_envs, 3, 3).clone()
        self._setup(cfg, panda.Scene(), num_envs, device, seed, terms, 3 + 6 + 3 + 1, {})
        self.cfg: PandaReachConfig = cfg

    def _reset_task(self, rows: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        c, n = self.cfg, rows.numel()
        lo = torch.tensor(c.target_low, device=self.device)
        hi = torch.tensor(c.target_high, device=self.device)
        self.target_pos[rows] = lo + (hi - lo) * torch.rand(n, 3, generator=self.gen, device=self.device)
        yaw = c.target_yaw_range * (2 * torch.rand(n, generator=self.gen, device=self.device) - 1)
        self.target_rot[rows] = yaw_rotation(yaw) @ GRIPPER_DOWN.to(self.device)

    def _rot6(self) -> torch.Tensor:
        return rot6(self.target_rot)

    def _errors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """TCP position error (m) and orientation error (rad), ``[N]`` each."""
        return (self._tcp_pos - self.target_pos).norm(dim=-1), rotation_error(self._tcp_rot, self.target_rot)

    def _signals(self) -> dict[str, torch.Tensor]:
        return {**self._arm_signals(), "target_pos": self.target_pos, "target_rot6": self._rot6()}

    def _privileged(self) -> torch.Tensor:
        _, ang = self._errors()
        tcp = self._tcp_pos
        extra = torch.cat((self.target_pos, self._rot6(), tcp - self.target_pos, ang[:, None]), 1)
        return torch.cat((self._arm_privileged(), extra), 1)

    def reward_names(self) -> list[str]:
        """Reward terms of this task."""
        return ["position_error", "position_fine", "orientation_error", "action_rate", "joint_velocity"]

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        dist, ang = self._errors()
        return {
            "position_error": dist,
            "position_fine": rewards.exp_kernel(dist.square(), self.cfg.fine_sigma),
            "orientation_error": ang,
            "action_rate": rewards.squared_norm(action - self.last_action),
            "joint_velocity": rewards.squared_norm(self._dq),
        }

    def _terminated(self) -> torch.Tensor:
        return ~self._state_finite()

    def _success(self) -> torch.Tensor:
        dist, ang = self._errors()
        c = self.cfg
        return (dist < c.success_position_error) & (ang < c.success_orientation_error) & self._state_finite()

    def _episode_metrics(self) -> dict[str, torch.Tensor]:
        dist, ang = self._errors()
        return {"final_position_error": dist, "final_orientation_error": ang}

    def _metrics(self) -> dict[str, torch.Tensor]:
        dist, ang = self._errors()
        return {"position_error": dist, "orientation_error": ang}

    def _task_measurements(self, world: int) -> list[Measurement]:
        """The reach goal, as an operator sends it (latched)."""
        pos, rot = (x[world].detach().cpu().numpy() for x in (self.target_pos, self.target_rot))
        return [Pose("goal", pos, rot, self.BASE_FRAME, latched=True)]

    def contract_extra(self) -> dict[str, object]:
        """Arm facts plus the target convention."""
        c = self.cfg
        return {
            **self.arm_contract_extra(),
            "target": "target_position: TCP goal in the base frame, m; target_orientation: first two columns "
            "of the goal rotation (tool to base), column by column",
            "training_envelope": {
                "target_low_m": list(c.target_low),
                "target_high_m": list(c.target_high),
                "target_yaw_range_rad": c.target_yaw_range,
                "target_orientation": "gripper pointing down (tool z = -base z), turned about base z by the yaw",
                "init_joint_range_rad": c.init_joint_range,
                "episode_length_s": c.episode_length_s,
            },
            "success": {
                "position_error_m": c.success_position_error,
                "orientation_error_rad": c.success_orientation_error,
                "rate": self.success_bar,
            },
        }


SPEC = TaskSpec(
    name="panda-reach",
    config_cls=PandaReachConfig,
    factory=PandaReach,
    backend="mujoco | mjwarp",
    description="Franka Panda TCP to a random pose; joint impedance or torque; MuJoCo or MuJoCo Warp",
    robot="panda",
    success=">= 90% of 3 s episodes end with the TCP within 5 cm and 0.3 rad of the target",
    transfer={"pybullet": "robot_rl.transfer.pybullet_panda:PandaReachBullet"},
)
"""The task's registration (sim/tasks/__init__.py lists it)."""
