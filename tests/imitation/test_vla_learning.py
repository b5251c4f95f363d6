"""A small vision-language-action student learns panda-multitask from the scripted expert's demonstrations and follows
the instruction: its arm goes to the named cube, and with an instruction naming another cube it goes elsewhere."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml

from policies.runtime.chunking import ChunkedOnnxPolicy
from robot_rl.imitation.collect import collect
from robot_rl.imitation.config import load_bc_config
from robot_rl.imitation.evaluate import ChunkEvalResult
from robot_rl.imitation.train_bc import train_bc
from robot_rl.runs.bc import BCRun
from tests.imitation.test_bc_cli import robot_rl

CI_VLA = [
    "policy.d_model=64",
    "policy.layers=2",
    "policy.expert_layers=2",
    "policy.pred_horizon=8",
    "policy.action_horizon=4",
    "policy.ensemble_decay=null",
    "train.batch_size=128",
    "train.max_steps=2500",
    "train.warmup_steps=200",
    "train.learning_rate=5.0e-4",
    "train.eval_episodes=60",
    "train.save_interval=1000",
]
"""A smaller VLA than configs/bc-vla.yaml (0.3 M parameters), re-planning every 4 steps, so that training and the
evaluations fit in about 80 s on 2 cores. Measured (seed 0): the arm reached the named cube in 56 % of the episodes,
1.7 % with an instruction naming another cube; it lifted it in 7 % (the full-size student: docs/vla.md). On
2026-11-30: 47 % told the drawn cube, 3 % told another, 53 % with the second held-out paraphrase list (60 episodes
each)."""


DDS_EPISODES = 8
"""Episodes of 3 s over DDS per instruction set (told the right cube, told another)."""
ROS_CONFIG = Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "robot_rl_ros" / "config"

REACHED_M = 0.05
"""The fingertips' centre came within 5 cm of the named cube's centre (the cube's neighbours are >= 8.5 cm away)."""


def _reached(result: ChunkEvalResult) -> float:
    """Share of episodes in which the arm reached the named cube."""
    closest = np.concatenate([r.episodes["closest_approach"] for r in result.per_seed])
    return float((closest < REACHED_M).mean())


@pytest.mark.slow
@pytest.mark.xdist_group("ros2-closed-loop")  # its last part runs on the simulated robot's /clock (test_sim_time)
def test_a_vla_student_follows_the_instruction(tmp_path: Path) -> None:
    """Two things the untrained policy does not do: go to the cube the instruction names (with an instruction naming
    another cube, it goes there instead), and lift it in some episodes. The full-size student's lift success is in
    docs/vla.md; this budget checks that the instruction steers the arm."""
    summary = collect("panda-multitask", 150, tmp_path / "demos", num_envs=150, action_noise=0.1, quiet=True)
    assert summary.kept == 150
    cfg = load_bc_config("vla", overrides=CI_VLA, dataset=str(tmp_path / "demos"), run_root=str(tmp_path / "runs"))
    result = train_bc(cfg, quiet=True)
    assert result.evaluation is not None
    run = BCRun.load(result.run_dir)
    told = _reached(result.evaluation)
    run.env_cfg = dataclasses.replace(run.env_cfg, instructions="wrong-colour")
    misled = _reached(run.evaluate(60, seeds=(0,), stem="eval_instructions-wrong-colour"))
    run.env_cfg = dataclasses.replace(run.env_cfg, instructions="heldout2")
    paraphrased = _reached(run.evaluate(60, seeds=(0,), stem="eval_instructions-heldout2"))
    assert told >= 0.35, (told, result.evaluation.line())
    assert misled <= 0.5 * told, (told, misled)  # ignoring the instruction would reach the named cube 1 time in 3
    assert paraphrased >= 0.5 * told, (told, paraphrased)  # paraphrases never trained on steer the arm too

    # the student reads instructions within the span of its 9 training texts' embeddings (8 dimensions)
    subspace = run.policy.instruction_subspace
    assert subspace is not None and round(float(subspace.projection.trace())) == 8

    runtime = ChunkedOnnxPolicy(result.run_dir / "policy.onnx", num_envs=1)
    lang = runtime.chunk.language
    assert lang["encoder"]["sha256"] == run.checkpoint["language"]["encoder"]["sha256"]
    assert sorted(lang["instructions"]) == sorted(run.checkpoint["language"]["instructions"])
    runtime.set_instruction("lift the red cube")
    signals = {t.source: np.zeros((1, t.size), np.float32) for t in runtime.contract.observation}
    assert np.isfinite(runtime(signals)).all()

    # robot-rl eval --instructions: another set, success per instruction, its own file (eval.yaml stays)
    out = robot_rl("eval", result.run_dir, "--instructions", "heldout", "--episodes", "9", "--seeds", "1")
    assert out.returncode == 0, out.stderr
    assert "'can you hold up the red box'" in out.stdout
    held = yaml.safe_load((result.run_dir / "eval_instructions-heldout.yaml").read_text())
    assert sum(row["episodes"] for row in held["per_instruction"]) == 9
    assert yaml.safe_load((result.run_dir / "eval.yaml").read_text())["episodes"] == 180
    bad = robot_rl("eval", result.run_dir, "--instructions", "polite", "--episodes", "2")
    assert bad.returncode == 2 and "--instructions polite: env.instructions must be one of" in bad.stderr

    # robot-rl eval --chunking: receding horizon under a simulated delay, the steps at the joins, its own file
    out = robot_rl("eval", result.run_dir, "--chunking", "rtc", "--inference-delay", "2", "--episodes", "6",
                   "--seeds", "1")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "chunk joins: largest action step" in out.stdout and "loop idle 0.0%" in out.stdout
    timed = yaml.safe_load((result.run_dir / "eval_chunking-rtc-d2.yaml").read_text())["execution"]
    assert timed["schedule"] == "rtc" and timed["ensemble_decay"] is None and timed["join_step_max"] > 0
    bad = robot_rl("eval", result.run_dir, "--inference-delay", "2", "--episodes", "2")
    assert bad.returncode == 2 and "--inference-delay applies with --chunking" in bad.stderr

    # Over ROS 2: the simulated robot says each episode's instruction on a topic (std_msgs/String, latched) and
    # publishes the three cubes' tracked poses; the node follows the instruction it hears. Told the cube the episode
    # drew, the arm goes nearer to it than when told another cube's colour (episodes counted by the simulated robot,
    # on its clock: docs/ros2.md, "Simulated time").
    from robot_rl_ros.graph import read_params, run_graph, use_simulated_time

    params = read_params(ROS_CONFIG / "panda_multitask_sim.yaml")
    params["policy_node"].update(model_path=str(result.run_dir / "policy.onnx"), watchdog_s=0.5)
    use_simulated_time(params)
    closest = {}
    for said in ("train", "wrong-colour"):
        params["sim_robot_node"].update(env_overrides=[f"instructions={said}"], episode_length_s=3.0)
        ran = run_graph(params, sim=True, duration_s=240.0, namespace=f"t{uuid.uuid4().hex[:8]}", episodes=DDS_EPISODES)
        assert ran.fault == "" and ran.rejected == 0 and len(ran.sim["episode_metrics"]) == DDS_EPISODES, ran
        closest[said] = float(np.median([e["closest_approach"] for e in ran.sim["episode_metrics"]]))
    assert closest["train"] < closest["wrong-colour"], closest
