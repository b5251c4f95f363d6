"""Scripted experts for the cube tasks: privileged state machines that make demonstrations where no RL teacher
succeeds yet (``robot-rl collect panda-lift --teacher scripted``).

An expert reads the simulator's exact state (cube pose, TCP pose, joints; what a PPO teacher's critic sees) and
moves the TCP through waypoints with resolved-rate inverse kinematics: damped least squares on the TCP site's
Jacobian (MuJoCo ``mj_jacSite`` on the task's own model), turned into the task's normalised action
(``q_target = q + action_scale * a`` for relative joint targets). The demonstrations it writes hold only what the
student has on the robot (the ``policy`` group), like every teacher's.

An expert normally reads the exact cube position (``cube="exact"``). With ``cube="onboard"`` it reads the estimate the
student sees (the ``object_position`` observation: delayed, noisy, biased) instead; its success then approximates
what a student imitating it can reach from the onboard observations (``bench/imitation.py`` reports both). The
cube's yaw and size stay exact: cubes start square to the robot and the onboard observation has neither.

Waypoints (heights relative to the cube's centre; the lift expert keeps a phase counter per world):

- ``panda-lift``: above the cube (+10 cm, fingers open, yaw aligned with a cube face) -> down to the cube's centre
  -> close the fingers for 0.3 s -> lift to 16 cm above the table.
- ``panda-multitask``: the lift script on the named cube, or with ``env.skills: [lift, push]`` in a push episode the
  push script towards a goal past the zone's near edge in the cube's lane, fingers held closed.
- ``panda-push`` (no phase memory: the move follows from the finger tips' place relative to the cube): above a
  point 3 cm behind the cube on the line from the goal -> down to the cube's centre height -> push along the line,
  every step re-aiming at the cube and steering the finger tips back onto the line through the cube's centre (a push
  off the centre turns the cube and lets it slide off sideways) -> hold when the cube is within 2 cm of the goal. If
  the cube slips sideways off the finger tips anyway, the tips are low but no longer behind it: up, and start again.
"""

from __future__ import annotations

import abc
import math

import mujoco
import numpy as np
import torch

from sim.robots import panda
from sim.tasks.panda.base import GRIPPER_DOWN, CubeTask, PandaTask, yaw_rotation
from sim.vec_env import VecEnv

CUBE_SOURCES = ("exact", "onboard")
"""Where an expert reads the cube position (see :class:`ScriptedExpert`)."""
DAMPING = 0.05
"""Damped-least-squares regularisation (m, rad): keeps joint steps bounded near singular poses."""
MAX_STEP_M = 0.08
"""Largest TCP position correction asked for in one control period, m (2 m/s at 25 Hz; the impedance lags far
behind, so this only shapes long moves)."""
MAX_STEP_RAD = 0.2
"""Largest TCP orientation correction in one control period, rad."""
GAIN = 0.6
"""Joint step per control period as a multiple of the inverse-kinematics step (the impedance lags its target)."""
POSTURE_GAIN = 0.1
"""Fraction of the distance to the home posture corrected per control period in the Jacobian's null space."""


class TcpJacobians:
    """TCP Jacobians ``[N, 6, 7]`` (linear rows first) of a Panda task at every world's current arm joints, from
    ``mj_jacSite`` on the task's own model (a Python loop over worlds). The last result is kept: asked again at the
    same joints (two scripts in one control period, :class:`MultitaskExpert`) it is not computed again."""

    def __init__(self, env: PandaTask) -> None:
        self.env = env
        self._model = env._model
        self._data = mujoco.MjData(self._model)
        self._jacp = np.zeros((3, self._model.nv))
        self._jacr = np.zeros((3, self._model.nv))
        self._qadr = env._arm_qpos.cpu().numpy()
        self._dofs = env._dofs.cpu().numpy()
        self._at: torch.Tensor | None = None
        self._last = torch.zeros(0)

    def __call__(self) -> torch.Tensor:
        q_now = self.env._q.detach()
        if self._at is not None and torch.equal(self._at, q_now):
            return self._last
        q = q_now.cpu().double().numpy()
        out = np.zeros((q.shape[0], 6, 7))
        m, d = self._model, self._data
        for i in range(q.shape[0]):
            d.qpos[self._qadr] = q[i]
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self.env._tcp)
            out[i, :3] = self._jacp[:, self._dofs]
            out[i, 3:] = self._jacr[:, self._dofs]
        self._at = q_now.clone()
        self._last = torch.as_tensor(out, dtype=torch.float32, device=self.env.device)
        return self._last


class ScriptedExpert(abc.ABC):
    """Base of the Panda tasks' experts: Jacobians, the inverse-kinematics step and the phase bookkeeping.

    Args:
        env: The task (a :class:`~sim.tasks.panda.base.PandaTask` with relative joint-impedance targets).
        cube: Where a cube task's cube position comes from: ``"exact"`` (simulator state) or ``"onboard"`` (the
            student's ``object_position`` observation).

    Call :meth:`act` once per control period, :meth:`reset` for worlds that start a new episode.
    """

    def __init__(self, env: VecEnv, cube: str = "exact") -> None:
        if not isinstance(env, PandaTask) or env.cfg.control_mode != "impedance" or env.cfg.targets != "relative":
            raise ValueError("scripted experts drive Panda tasks with relative joint-impedance targets only")
        if cube not in CUBE_SOURCES:
            raise ValueError(f"unknown cube source '{cube}'; choose one of {', '.join(CUBE_SOURCES)}")
        self.env: PandaTask = env
        self.cube = cube
        self.kinematics = TcpJacobians(env)
        n = env.num_envs
        self.phase = torch.zeros(n, dtype=torch.long, device=env.device)
        self.timer = torch.zeros(n, dtype=torch.long, device=env.device)
        self.anchor = torch.zeros(n, 3, device=env.device)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Restart the script of worlds in ``mask`` (all if ``None``)."""
        rows = slice(None) if mask is None else mask
        self.phase[rows] = 0
        self.timer[rows] = 0

    def arm_action(self, p_des: torch.Tensor, r_des: torch.Tensor) -> torch.Tensor:
        """Normalised arm actions ``[N, 7]`` moving the TCP towards ``p_des [N, 3]`` (m) and ``r_des [N, 3, 3]``."""
        env = self.env
        e_pos = p_des - env._tcp_pos
        r = env._tcp_rot
        e_rot = 0.5 * torch.linalg.cross(r, r_des, dim=1).sum(-1)  # sum over columns of r_k x r_des_k
        e_pos = e_pos * (MAX_STEP_M / e_pos.norm(dim=-1, keepdim=True).clamp_min(MAX_STEP_M))
        e_rot = e_rot * (MAX_STEP_RAD / e_rot.norm(dim=-1, keepdim=True).clamp_min(MAX_STEP_RAD))
        j = self.kinematics()
        v = torch.cat((e_pos, e_rot), -1)
        jjt = j @ j.transpose(1, 2) + DAMPING**2 * torch.eye(6, device=j.device)
        j_pinv = j.transpose(1, 2) @ torch.linalg.inv(jjt)  # [N, 7, 6]
        dq = (j_pinv @ v.unsqueeze(-1)).squeeze(-1)
        # null space: drift back to the home posture (a 7-joint arm otherwise wanders into its joint limits)
        posture = POSTURE_GAIN * (env.home - env._q)
        null = torch.eye(7, device=j.device) - j_pinv @ j
        dq = dq + (null @ posture.unsqueeze(-1)).squeeze(-1)
        return (GAIN * dq / env.cfg.action_scale).clamp(-1.0, 1.0)

    @property
    def cube_env(self) -> CubeTask:
        """The task, as a cube task (a ``TypeError`` for a task without a cube)."""
        if not isinstance(self.env, CubeTask):
            raise TypeError(f"{self.env.task_name} has no cube")
        return self.env

    def cube_position(self) -> torch.Tensor:
        """Cube centre the expert acts on, m ``[N, 3]``: exact, or the onboard estimate (see ``cube``)."""
        if self.cube == "exact":
            return self.cube_env.cube_pos
        return self.cube_env.cube_estimate()

    def tcp_error(self, p_des: torch.Tensor) -> torch.Tensor:
        """Distance of the TCP from ``p_des``, m ``[N]``."""
        return (p_des - self.env._tcp_pos).norm(dim=-1)

    @abc.abstractmethod
    def act(self) -> torch.Tensor:
        """Normalised actions ``[N, A]`` for the current state (advances the phases)."""


def cube_yaw(quat: torch.Tensor) -> torch.Tensor:
    """Yaw of a cube about the vertical, folded into ``[-pi/4, pi/4)`` (a cube looks the same every 90 deg)."""
    w, x, y, z = quat.unbind(-1)
    yaw = torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return torch.remainder(yaw + math.pi / 4, math.pi / 2) - math.pi / 4


class LiftExpert(ScriptedExpert):
    """``panda-lift``: approach, descend, grasp, lift (see the module docstring)."""

    grasp_steps = 8
    hover = 0.10
    lift_to = 0.16

    def act(self) -> torch.Tensor:
        env = self.cube_env
        cube = self.cube_position()
        r_des = yaw_rotation(cube_yaw(env.cube_quat)) @ GRIPPER_DOWN.to(env.device)
        above = cube + torch.tensor([0.0, 0.0, self.hover], device=env.device)
        p = self.phase
        p[(p == 0) & (self.tcp_error(above) < 0.015)] = 1
        descended = (p == 1) & (self.tcp_error(cube) < 0.008)
        self.anchor[descended] = cube[descended]
        p[descended] = 2
        self.timer[p == 2] += 1
        p[(p == 2) & (self.timer > self.grasp_steps)] = 3
        target = torch.where((p == 0)[:, None], above, cube)
        lifted = self.anchor.clone()
        lifted[:, 2] = panda.TABLE_HEIGHT + self.lift_to
        target = torch.where((p == 3)[:, None], lifted, torch.where((p == 2)[:, None], self.anchor, target))
        grip = torch.where(p >= 2, -1.0, 1.0)[:, None]
        return torch.cat((self.arm_action(target, r_des), grip), 1)


class PushExpert(ScriptedExpert):
    """``panda-push``: get behind the cube, push it along the line to the goal (see the module docstring).

    The expert keeps no memory: each step's target follows from where the finger tips are relative to the cube and
    the goal, so a student that sees the same (onboard) quantities can tell which move comes next. ``phase`` reports
    the move (0 above / around, 1 descend, 2 push, 3 hold) for diagnostics only.
    """

    behind = 0.03
    """Start of the push: finger tips this far behind the cube's near face, m."""
    hover = 0.08
    """Height of moves around the cube above the pushing height, m."""
    done_within = 0.02
    """Hold still once the cube's centre is this close to the goal, m."""
    lead = 0.015
    """Push advance per control period: the target leads the finger tips' current depth behind the cube by this, m."""
    lost_at = 1.0
    """Sideways offset of the finger tips from the cube's centre line beyond which they no longer push, in cube
    half-edges."""
    low = 0.04
    """Finger tips lower than this above the cube's centre are at pushing height, m."""
    over = 0.02
    """Finger tips within this of the start point (in the table plane) descend onto it, m."""

    def act(self) -> torch.Tensor:
        env = self.cube_env
        cube = self.cube_position()
        half = env.cube_half()
        goal: torch.Tensor = env.goal  # type: ignore[attr-defined]  # PandaPush's
        to_goal = goal - cube[:, :2]
        dist = to_goal.norm(dim=-1)
        d = to_goal / dist[:, None].clamp_min(1e-6)
        z = (cube[:, 2] - 0.2 * half)[:, None]
        start_xy = cube[:, :2] - d * (half[:, None] + self.behind)
        tcp = env._tcp_pos
        rel = tcp[:, :2] - cube[:, :2]
        lateral = (rel[:, 0] * d[:, 1] - rel[:, 1] * d[:, 0]).abs()
        along = (rel * d).sum(-1)
        low = tcp[:, 2] < cube[:, 2] + self.low
        # behind the cube: past its centre's half-edge, no farther back than the start point's descent zone
        behind = (along < -0.5 * half) & (along > -(half + self.behind + self.over))
        pushing = low & behind & (lateral < self.lost_at * half)
        over_start = (tcp[:, :2] - start_xy).norm(dim=-1) < self.over
        # pushing: on the centre line at the finger tips' current depth, advanced by `lead` (corrects sideways drift)
        push = torch.cat((cube[:, :2] + d * (along[:, None] + self.lead), z), 1)
        descend = torch.cat((start_xy, z), 1)
        rise = torch.cat((tcp[:, :2], z + self.hover), 1)  # low but not pushing: straight up first, clear of the cube
        above = torch.cat((start_xy, z + self.hover), 1)
        target = torch.where((low & ~over_start)[:, None], rise, above)
        target = torch.where(over_start[:, None], descend, target)
        target = torch.where(pushing[:, None], push, target)
        done = dist < self.done_within
        target = torch.where(done[:, None], tcp, target)
        self.phase[:] = torch.where(done, 3, torch.where(pushing, 2, torch.where(over_start, 1, 0)))
        r_des = GRIPPER_DOWN.to(env.device).expand(env.num_envs, 3, 3)
        return self.arm_action(target, r_des)


class MultitaskExpert(ScriptedExpert):
    """``panda-multitask``: :class:`LiftExpert` on the named cube, or :class:`PushExpert` (fingers closed) in the
    worlds whose instruction asks for a push. Both scripts run in every world (each keeps its own phases); each
    world takes the action of its skill."""

    def __init__(self, env: VecEnv, cube: str = "exact") -> None:
        super().__init__(env, cube)
        self.lift = LiftExpert(env, cube)
        self.push = PushExpert(env, cube)
        self.push.kinematics = self.kinematics = self.lift.kinematics  # one Jacobian evaluation per period serves all

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Restart both scripts in the worlds of ``mask`` (all if ``None``)."""
        self.lift.reset(mask)
        self.push.reset(mask)

    def act(self) -> torch.Tensor:
        from sim.tasks.panda.multitask import PandaMultitask

        env = self.env
        if not isinstance(env, PandaMultitask):
            raise TypeError(f"the multitask expert drives panda-multitask, not {env.task_name}")
        lift = self.lift.act()
        if "push" not in env.cfg.skills:
            return lift
        push = self.push.act()
        push = torch.cat((push, torch.full_like(push[:, :1], -1.0)), 1)  # fingers closed
        return torch.where(env._pushing()[:, None], push, lift)
