"""A diffusion student learns ``panda-reach`` from its PPO teacher's demonstrations in CI-sized time, and its
exported ONNX sampler, run through ``policies.runtime`` only, flies the same closed loop; a lift student that sees
the wrist camera learns what the biased cube estimate alone cannot, and lifts through the runtime and over ROS 2."""

from __future__ import annotations

import csv
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from policies.runtime.chunking import ChunkedOnnxPolicy
from robot_rl.config import task_defaults
from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env
from robot_rl.imitation.collect import collect
from robot_rl.imitation.config import load_bc_config
from robot_rl.imitation.train_bc import train_bc
from robot_rl.runs import PPORun
from sim.rendering import CameraRenderer

CI_STUDENT = [
    "policy.pred_horizon=8",  # executed as configs/bc-diffusion.yaml: temporal ensembling, m = -0.3
    "policy.down_dims=[32,64]",
    "train.batch_size=128",
    "train.max_steps=1500",
    "train.eval_episodes=64",
    "train.save_interval=1000",
]
"""A smaller U-Net and chunk than configs/bc-diffusion.yaml, so that training fits in under 2 minutes on one core
(measured 2026-11-27: 76.3 % over 300 episodes after 1,500 steps, 85.4 % over 192 after 2,500; the full config and
its figures are in docs/benchmarks.md)."""
SUCCESS_BAR = 0.6
"""The student must reach 60 % (teacher: >= 90 %, an untrained student: ~0 %)."""


@pytest.mark.slow
def test_diffusion_student_learns_panda_reach_and_its_onnx_export_runs_the_loop(
    trained_reach: Any, tmp_path: Path
) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        teacher = PPORun.load(trained_reach.run_dir)
        summary = collect(teacher, 100, tmp_path / "demos", num_envs=100, quiet=True)
        assert summary.kept == 100 and summary.success_rate >= 0.8
        cfg = load_bc_config(
            "diffusion", overrides=CI_STUDENT, dataset=str(tmp_path / "demos"), run_root=str(tmp_path / "runs")
        )
        result = train_bc(cfg, quiet=True)
    finally:
        torch.set_num_threads(previous)
    assert result.evaluation is not None
    assert result.evaluation.success_rate >= SUCCESS_BAR, result.evaluation.line()
    rows = list(csv.DictReader((result.run_dir / "metrics.csv").open()))
    losses = [float(r["train/loss"]) for r in rows if r["train/loss"]]
    assert losses[-1] < 0.3 * losses[0]

    # The exported graph through the robot-side runtime: commands in radians, mapped back to the env's action.
    episodes = 32
    policy = ChunkedOnnxPolicy(result.run_dir / "policy.onnx", num_envs=episodes, seed=0)
    env = make_eval_env("panda-reach", teacher.cfg.env, episodes, torch.device("cpu"), True)

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        command = policy.run_obs(obs["policy"].numpy())
        return torch.from_numpy(policy.normalized_action(command))

    deployed = evaluate_env(env, act, seed=EVAL_SEED_OFFSET)
    assert deployed.episodes["success"].mean() >= SUCCESS_BAR - 0.15, deployed.figures


CAMERA_STUDENT = [
    "policy.cameras=[wrist]",
    "train.batch_size=128",
    "train.max_steps=2000",
    "train.eval_episodes=50",
    "train.save_interval=1000",
]
"""An MLP student of the scripted lift expert that also sees 32 x 32 wrist-camera images, 100 demonstrations (the
benchmark uses 64 x 64, 200 demonstrations and 2,000 steps of 256: docs/benchmarks.md). Measured: 88.7 % with the
camera, 25.7 % for the same student without it (300 episodes each); the camera student again 85.3 % (2026-11-27,
200 s on one core with its evaluation). Each is evaluated over 150 episodes here. Fewer steps or a smaller batch
narrowed the gap without the camera: 84.0 % against 46.7 % after 1,000 steps, 83.3 % against 51.3 % with batches of
64 (150 episodes each). Since the hand's housing has its real length (2026-11-29), 1,500 steps left the camera
student at 74.7-99.3 % over four collect-and-train seeds (one below the bar); 2,000 steps: 84.7-98.7 %, and the
student without the camera 69.3-77.3 % (docs/benchmarks.md, "The housing at its real length")."""


CAMERA_BAR = 0.75
"""Success the camera student must reach (the scripted expert on the exact cube: 100 %; an untrained student: 0 %)."""
CAMERA_GAIN = 0.1
"""Points the camera student must gain over the same student without the camera. The figures above were measured
while the table's friction hid the cube's (1.0-1.2 in every world). Since the cube's own friction (nominal 0.8) is the
pair's, a grasp the bias puts off-centre slides the cube between the fingers more often: 90.0 % with the camera
against 77.3 % without (150 episodes each, 2026-11-28)."""


ROS_CONFIG = Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "robot_rl_ros" / "config"


@pytest.mark.slow
@pytest.mark.xdist_group("ros2-closed-loop")  # its last part runs on the simulated robot's /clock (test_sim_time)
def test_a_wrist_camera_student_lifts_more_often_than_on_the_biased_cube_estimate_alone(tmp_path: Path) -> None:
    """The onboard cube estimate carries a 1 cm per-episode bias, so a student on observations alone misses more
    grasps; the wrist camera sees the cube between the fingers, without that bias. Exported, it lifts through
    ``policies.runtime`` and over ROS 2 (images, joint states, poses over DDS)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = tmp_path / "demos"
        collect("panda-lift", 100, data, num_envs=100, action_noise=0.2, quiet=True, cameras=("wrist",), image_size=32)
        rates, runs = {}, {}
        for name, extra in (("camera", CAMERA_STUDENT), ("state", CAMERA_STUDENT[1:])):
            cfg = load_bc_config("mlp", overrides=extra, dataset=str(data), run_root=str(tmp_path / name))
            result = train_bc(cfg, quiet=True, export=name == "camera")
            assert result.evaluation is not None
            rates[name], runs[name] = result.evaluation.success_rate, result.run_dir
    finally:
        torch.set_num_threads(previous)
    assert rates["camera"] >= CAMERA_BAR and rates["camera"] >= rates["state"] + CAMERA_GAIN, rates

    # The exported graph through the robot-side runtime, fed the wrist camera's images like the robot would be.
    episodes = 32
    policy = ChunkedOnnxPolicy(runs["camera"] / "policy.onnx", num_envs=episodes, seed=0)
    env = make_eval_env("panda-lift", task_defaults("panda-lift").env, episodes, torch.device("cpu"), True)
    camera = CameraRenderer(env, {"wrist": (32, 32)})

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        command = policy.run_obs(obs["policy"].numpy(), camera.render())
        return torch.from_numpy(policy.normalized_action(command))

    deployed = evaluate_env(env, act, seed=EVAL_SEED_OFFSET)
    camera.close()
    assert deployed.episodes["success"].mean() >= CAMERA_BAR - 0.15, deployed.figures

    # On the robot's side of ROS 2: the policy node reads the wrist camera (sensor_msgs/Image), the joint states with
    # the finger, the tool pose and the cube tracker's pose over DDS, and commands the simulated Panda (randomised,
    # rendering its wrist camera). Without the energy tank: this student of the scripted expert never trained behind
    # one, and since late set-points are held as computed (the tank's bookkeeping then describes what is applied)
    # the 40 J tank takes most of such a policy's success (6 of 20 over DDS in CI; docs/benchmarks.md, "The energy
    # tank in the training loop"); a student behind the tank must learn from a teacher trained behind it. Twenty 5 s
    # episodes, counted by the simulated robot, on its clock (docs/ros2.md, "Simulated time"): in lockstep every
    # command answers the sensors of its period, and the loop runs as fast as the node answers instead of 100 s of
    # real time; at least a quarter must lift (an untrained student lifts none). In real time, where a loaded machine
    # makes set-points late, a student of this recipe lifted in 9 and at least 10 of 20 in two CI runs without the
    # tank (18 of 24 behind it before late set-points were held as computed; docs/benchmarks.md).
    from robot_rl_ros.graph import read_params, run_graph, use_simulated_time

    params = read_params(ROS_CONFIG / "panda_lift_sim.yaml")
    params["policy_node"].update(model_path=str(runs["camera"] / "policy.onnx"), passivity=False)
    params["sim_robot_node"].update(image_size=32)
    use_simulated_time(params)
    result = run_graph(params, sim=True, duration_s=300.0, namespace=f"t{uuid.uuid4().hex[:8]}", episodes=20)
    assert result.fault == "" and result.rejected == 0 and result.sim["rejected"] == 0, result
    lifted = result.sim["episodes_succeeded"]
    assert len(lifted) == 20 and sum(lifted) >= len(lifted) / 4, lifted
