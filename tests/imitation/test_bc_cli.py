"""``robot-rl collect`` / ``train-bc`` / ``eval`` / ``export`` of students, end to end on a tiny teacher, and every
user error they refuse (exit status 2, one line naming what is wrong, nothing written)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

import sim
from policies.runtime.chunking import ChunkedOnnxPolicy
from robot_rl.config import load_config
from robot_rl.imitation.collect import teacher_world
from robot_rl.imitation.dataset import DatasetError, load_dataset
from robot_rl.imitation.evaluate import evaluate_chunk_policy, evaluate_teacher
from robot_rl.imitation.students import student_config
from robot_rl.imitation.train_bc import execution_note
from robot_rl.runner import OnPolicyRunner
from robot_rl.runs import PPORun
from robot_rl.runs.bc import BCRun
from sim.tasks.panda.multitask import training_texts
from sim.typed_config import ConfigError
from tests.conftest import one_torch_thread, robot_rl

TINY_TRAINING = [
    "policy.pred_horizon=8",
    "policy.action_horizon=4",
    "train.batch_size=16",
    "train.warmup_steps=2",
    "train.log_interval=5",
    "train.save_interval=5",
    "train.eval_episodes=4",
]
"""Settings every student kind has (a key of another kind is refused: an MLP has no ``down_dims``)."""
TINY_STUDENT = [*TINY_TRAINING, "policy.down_dims=[8,16]", "policy.inference_steps=3", "policy.train_steps=20"]
"""A tiny diffusion student."""


def robot_rl_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m robot_rl.cli ARGS`` as its own process."""
    return subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", *map(str, args)], capture_output=True, text=True, timeout=600
    )


def tiny_ppo_run(task: str, root: Path, *settings: str) -> Path:
    """A PPO run of ``task`` (its config file, then ``settings``) after one tiny iteration (it acts; it does not
    succeed)."""
    overrides = [
        *settings,
        "num_envs=8",
        "ppo.num_steps=4",
        "ppo.num_minibatches=1",
        "runner.max_iterations=1",
        "runner.eval_interval=0",
        "runner.save_interval=1",
        f"run_root={root}",
    ]
    torch.set_num_threads(1)
    run_dir = root / "run"
    run_dir.mkdir()
    OnPolicyRunner(load_config(task, None, overrides), run_dir, quiet=True).train()
    return run_dir


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A panda-reach PPO run after one tiny iteration."""
    return tiny_ppo_run("panda-reach", tmp_path_factory.mktemp("teacher"))


@pytest.fixture(scope="module")
def dataset(teacher: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "reach"
    result = robot_rl(
        "collect", "panda-reach", "--teacher", teacher, "--episodes", "6", "--num-envs", "3", "--keep-failed",
        "--action-noise", "0.1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "episodes kept: 6 of 6 rolled out" in result.stdout and "frames: 450" in result.stdout
    return out


def test_collected_dataset_reads_with_pyarrow_alone_as_documented(dataset: Path) -> None:
    info = json.loads((dataset / "meta" / "info.json").read_text())
    assert info["fps"] == 25.0 and info["total_episodes"] == 6 and info["robot_type"] == "franka-emika-panda"
    contract = info["robot_rl"]["contract"]
    width = sum(t["size"] * t["history"] for t in contract["observation"])
    assert info["features"]["observation.state"]["shape"] == [width]
    assert info["features"]["action"]["names"] == contract["action"]["names"]
    assert info["robot_rl"]["task"] == "panda-reach" and info["robot_rl"]["action_noise"] == 0.1
    table = pq.read_table(dataset / info["data_path"].format(episode_chunk=0, episode_index=5))
    assert table.num_rows == 75
    state = np.asarray(table.column("observation.state").to_pylist())
    action = np.asarray(table.column("action").to_pylist())
    assert state.shape == (75, width) and np.abs(action).max() <= 1.0
    assert table.column("next.done").to_pylist()[-1] is True
    episodes = [json.loads(line) for line in (dataset / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert [e["length"] for e in episodes] == [75] * 6


def test_train_bc_evaluates_exports_and_resumes(teacher: Path, dataset: Path, tmp_path: Path) -> None:
    sets = [arg for s in TINY_STUDENT for arg in ("--set", s)]
    args = ["train-bc", "--policy", "diffusion", "--dataset", dataset, "--run-root", tmp_path, "--quiet", *sets]
    result = robot_rl_process(*args, "--max-steps", "10")
    assert result.returncode == 0, result.stderr
    assert "10 gradient steps" in result.stdout and "95% CI" in result.stdout
    # the diffusion config ensembles its plans; the dataset's teacher is a PPO run: one line says how to plan
    assert "note: the dataset's teacher is a PPO policy and this student executes temporal ensembling" in result.stderr
    (run,) = (tmp_path / "panda-reach").iterdir()
    for name in ("checkpoint.pt", "metrics.csv", "learning_curve.png", "eval.yaml", "eval.png", "policy.onnx"):
        assert (run / name).is_file(), name
    summary = yaml.safe_load((run / "eval.yaml").read_text())
    assert summary["episodes"] == 12 and len(summary["success_ci95"]) == 2 and summary["seeds"] == [0, 1, 2]
    student = BCRun.load(run)
    assert student.teacher is not None and Path(student.teacher).resolve() == teacher.resolve()
    # the end summary runs that teacher on the same 12 episodes and says how far the student is from it
    beside = summary["teacher"]
    assert beside["run"] == student.teacher and len(beside["success_ci95"]) == 2
    assert beside["gap_points"] == pytest.approx(100 * (beside["success_rate"] - summary["success_rate"]))
    assert f"teacher {student.teacher} on the same episodes: success" in result.stdout, result.stdout
    # the teacher on the student's seeds: the same starts and randomised parameters, episode for episode
    mine = evaluate_chunk_policy(student.policy, student.spec(), "panda-reach", student.env_cfg, ["policy"], 3, [1])
    theirs = evaluate_teacher(PPORun.load(teacher), "panda-reach", student.env_cfg, 3, [1])
    (a,), (b,) = mine.per_seed, theirs.per_seed
    assert a.start_params.keys() == b.start_params.keys() and a.start_params
    for name, values in a.start_params.items():
        np.testing.assert_array_equal(values, b.start_params[name], err_msg=name)
    policy = ChunkedOnnxPolicy(run / "policy.onnx")
    assert policy.chunk.pred_horizon == 8 and policy.chunk.sampler["inference_steps"] == 3
    assert policy.chunk.ensemble_decay == -0.3  # configs/bc-diffusion.yaml: temporal ensembling
    policy.self_test()

    resumed = robot_rl("train-bc", "--resume", run, "--max-steps", "15", "--quiet", "--no-export")
    assert resumed.returncode == 0, resumed.stderr
    assert "15 gradient steps" in resumed.stdout
    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 15

    # the exported student in PyBullet, executed as asked (robot-rl eval --sim), set beside the training simulator's
    # success only where eval.yaml executed it alike (a tiny student's 0 % is no figure to compare: a made-up 50 %)
    saved = yaml.safe_load((run / "eval.yaml").read_text())
    (run / "eval.yaml").write_text(yaml.safe_dump({**saved, "success_rate": 0.5}))
    as_trained = robot_rl("eval", run, "--sim", "pybullet", "--episodes", "1")
    assert as_trained.returncode == 0, as_trained.stderr
    sim2sim = yaml.safe_load((run / "sim2sim_pybullet.yaml").read_text())
    assert sim2sim["randomization_on"]["training_simulator_success"] == 0.5
    assert sim2sim["execution"]["ensemble_decay"] == -0.3
    exported = (run / "policy.onnx").read_bytes()
    out = robot_rl("eval", run, "--sim", "pybullet", "--episodes", "1", "--action-horizon", "1")
    assert out.returncode == 0, out.stderr
    assert "pybullet, randomisation on : criterion" in out.stdout
    assert (run / "policy.onnx").read_bytes() == exported  # executed otherwise, the user's export left as it was
    sim2sim = yaml.safe_load((run / "sim2sim_pybullet.yaml").read_text())
    assert sim2sim["randomization_on"]["episodes"] == 1 and sim2sim["execution"]["action_horizon"] == 1
    assert "training_simulator_success" not in sim2sim["randomization_on"]  # eval.yaml's ensembled: not its peer

    evaluated = robot_rl("eval", run, "--episodes", "3", "--seeds", "2", "--steps", "2", "--action-horizon", "1")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "over 6 episodes, 2 seeds" in evaluated.stdout
    assert f"teacher {student.teacher} on the same episodes" in evaluated.stdout  # the same 6 episodes
    assert yaml.safe_load((run / "eval.yaml").read_text())["teacher"]["run"] == student.teacher
    execution = yaml.safe_load((run / "eval.yaml").read_text())["execution"]
    assert execution["action_horizon"] == 1 and execution["ensemble_decay"] is None  # receding horizon asked for
    assert execution["noise_scale"] == 1.0  # the run's: sampling as trained
    quiet = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--action-horizon", "1", "--noise-scale", "0")
    assert quiet.returncode == 0, quiet.stderr
    assert yaml.safe_load((run / "eval.yaml").read_text())["execution"]["noise_scale"] == 0.0
    loud = robot_rl("eval", run, "--episodes", "2", "--noise-scale", "2")
    assert loud.returncode == 2 and "--noise-scale must be in [0, 1], got 2.0" in loud.stderr
    ensembled = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--ensemble-decay", "-0.6")
    assert ensembled.returncode == 0, ensembled.stderr
    assert yaml.safe_load((run / "eval.yaml").read_text())["execution"]["ensemble_decay"] == -0.6
    timed = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--chunking", "sync", "--inference-delay", "2")
    assert timed.returncode == 0 and "loop idle" in timed.stdout, timed.stderr  # the loop waited for its plans
    assert yaml.safe_load((run / "eval_chunking-sync-d2.yaml").read_text())["execution"]["idle_fraction"] > 0
    refused = robot_rl("eval", run, "--chunking", "rtc", "--episodes", "2")
    assert refused.returncode == 2 and "--chunking rtc needs a sampler that inpaints" in refused.stderr
    late = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--chunking", "async", "--inference-delay", "1",
                    "--ensemble-decay", "-0.6")  # fmt: skip
    assert late.returncode == 0, late.stderr  # ensembling under a delay: each plan averaged in a period later
    execution = yaml.safe_load((run / "eval_chunking-async-d1.yaml").read_text())["execution"]
    assert execution["ensemble_decay"] == -0.6 and execution["inference_delay_steps"] == 1
    # ensembled, every period averages a new plan in: how the actions move is measured at every step
    assert "action steps, a new plan averaged in every period: largest" in late.stdout and "join_step_p95" in execution
    trained = yaml.safe_load((run / "config.yaml").read_text())["policy"]["ensemble_decay"]
    for extra, decay in (((), trained), (("--action-horizon", "4"), None)):  # async keeps the run's ensembling
        kept = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--chunking", "async", "--inference-delay", "1",
                        *extra)  # fmt: skip
        assert kept.returncode == 0, kept.stderr
        assert yaml.safe_load((run / "eval_chunking-async-d1.yaml").read_text())["execution"]["ensemble_decay"] == decay
    blind = robot_rl("eval", run, "--visual", "randomized")
    assert blind.returncode == 2 and "--visual randomized: this student sees no camera" in blind.stderr
    exported = robot_rl("export", "onnx", run, "--out", tmp_path / "deploy")
    assert exported.returncode == 0, exported.stderr
    assert ChunkedOnnxPolicy(tmp_path / "deploy" / "policy.onnx").chunk.obs_horizon == 2
    shown = robot_rl("inspect", tmp_path / "deploy" / "policy.onnx")
    assert shown.returncode == 0 and "chunk" in shown.stdout and "ddim" in shown.stdout


def test_execution_note_only_for_students_of_ppo_teachers_that_do_not_plan_every_period() -> None:
    chunked, every_period = student_config({"kind": "mlp"}), student_config({"kind": "mlp", "action_horizon": 1})
    ensembled = student_config({"kind": "diffusion", "action_horizon": 1, "ensemble_decay": -0.3})
    assert "executes 8 actions per plan" in str(execution_note("ppo", chunked))
    assert "executes temporal ensembling per plan" in str(execution_note("ppo", ensembled))
    assert execution_note("ppo", every_period) is None
    assert execution_note("scripted", chunked) is None and execution_note(None, chunked) is None


def test_mlp_student_trains_on_the_same_data(dataset: Path, tmp_path: Path) -> None:
    result = robot_rl(
        "train-bc", "--policy", "mlp", "--dataset", dataset, "--run-root", tmp_path, "--quiet", "--max-steps", "5",
        "--set", "train.eval_episodes=2", "--set", "policy.mlp_hidden=[16]", "--set", "train.log_interval=5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "panda-reach").iterdir()
    assert ChunkedOnnxPolicy(run / "policy.onnx").chunk.noise_input == ""
    refused = robot_rl("eval", run, "--episodes", "2", "--noise-scale", "0")
    assert refused.returncode == 2 and "--noise-scale: a mlp student draws no noise" in refused.stderr
    # in another world than the demonstrations' (the student as trained): behind a small tank, with a command delay
    tank = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--set", "env.passivity.tank_max_j=5",
                    "--set", "env.command_delay=[0.0,0.02]")  # fmt: skip
    assert tank.returncode == 0, tank.stderr
    assert "evaluating in another world than the demonstrations': env.passivity.tank_max_j=5" in tank.stdout
    assert "behind a 5 J tank (lowest " in tank.stdout, tank.stdout
    written = yaml.safe_load((run / "eval_set-passivity.tank_max_j-5_command_delay--0.0-0.02-.yaml").read_text())
    assert written["env_overrides"] == ["env.passivity.tank_max_j=5", "env.command_delay=[0.0,0.02]"]
    # the tank's level: never under its minimum (env.passivity.tank_min_j, 0.1 J), never over its size
    assert written["tank_max_j"] == 5 and 0.1 - 1e-9 <= written["lowest_tank_j"] <= 5, written
    assert "teacher" not in written  # in another world the teacher is not run beside (its own config differs)
    # a teacher folder that does not load: the student's evaluation stands, one line says why the teacher is missing
    broken, fake = tmp_path / "broken-student", tmp_path / "fake-teacher"
    shutil.copytree(run, broken)
    fake.mkdir()
    (fake / "checkpoint.pt").write_bytes(b"not a checkpoint")
    state = torch.load(broken / "checkpoint.pt", weights_only=True)
    torch.save({**state, "teacher": str(fake)}, broken / "checkpoint.pt")
    alone = robot_rl("eval", broken, "--episodes", "2", "--seeds", "1")
    assert alone.returncode == 0, alone.stderr
    assert "  teacher not evaluated beside the student: " in alone.stdout and str(fake) in alone.stdout, alone.stdout
    assert "teacher" not in yaml.safe_load((broken / "eval.yaml").read_text())
    adds = "changes what the student reads or commands (observation terms 6 -> 7: + 'last_action'"
    for item, message in (
        ("env.action_history=2", adds),
        ("env.action_scale=0.5", "(the action's scale"),
        ("ppo.gamma=0.9", "'ppo.gamma' is not an env setting"),
        ("env.no_such_key=1", "no_such_key"),
    ):
        bad = robot_rl("eval", run, "--episodes", "2", "--set", item)
        assert bad.returncode == 2 and message in bad.stderr and bad.stderr.count("\n") == 1, (item, bad.stderr)


def test_collect_records_a_calibrated_view_and_the_student_is_evaluated_without_the_bias(
    teacher: Path, tmp_path: Path
) -> None:
    """``collect --unbiased joint_pos``: the recorded joint positions lack the per-episode encoder bias the teacher
    acted on (the teacher's labels differ from its action on the recorded state), and the dataset's env, where
    students are evaluated, has that bias at zero."""
    out = tmp_path / "calibrated"
    result = robot_rl(
        "collect", "panda-reach", "--teacher", teacher, "--episodes", "2", "--num-envs", "2", "--keep-failed",
        "--unbiased", "joint_pos", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "recorded without their per-episode bias: joint_pos" in result.stdout
    meta = json.loads((out / "meta" / "info.json").read_text())
    info = meta["robot_rl"]
    assert info["unbiased"] == ["joint_pos"] and info["env"]["noise"]["bias_std"]["joint_pos"] == 0.0
    assert load_config("panda-reach", None, []).env.noise.bias_std["joint_pos"] > 0  # the teacher's view has one
    table = pq.read_table(out / meta["data_path"].format(episode_chunk=0, episode_index=0))
    state = torch.tensor(table.column("observation.state").to_pylist(), dtype=torch.float32)
    label = torch.tensor(table.column("action").to_pylist(), dtype=torch.float32)
    with torch.inference_mode():
        on_recorded = PPORun.load(teacher).model.action_mean(state).clamp(-1, 1)
    assert not torch.allclose(on_recorded, label, atol=1e-5)  # the teacher acted on another (the biased) view


def test_collect_unbiased_gives_the_students_contract_a_calibrated_camera(tmp_path: Path) -> None:
    """``collect panda-lift --unbiased object_pos``: the student's contract states the cube tracker it was recorded
    with (noise and delay, no bias), where PyBullet and a robot integrator read it."""
    out = tmp_path / "lift"
    result = robot_rl(
        "collect", "panda-lift", "--teacher", "scripted", "--episodes", "1", "--num-envs", "1", "--keep-failed",
        "--unbiased", "object_pos", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads((out / "meta" / "info.json").read_text())["robot_rl"]
    cube = info["contract"]["extra"]["cube"]
    assert cube["estimate_bias_m"] == 0.0 and cube["estimate_noise_m"] == 0.005
    assert cube["estimate_delay_periods"] == 1 and info["env"]["noise"]["bias_std"]["object_pos"] == 0.0


def test_dagger_collection_lets_the_student_drive_and_the_teacher_label(
    teacher: Path, dataset: Path, tmp_path: Path
) -> None:
    """``collect --student RUN --include DATASET``: the demonstrations are copied first, then the student's own
    episodes follow (failures kept), every recorded action is the teacher's for the recorded state."""
    trained = robot_rl(
        "train-bc", "--policy", "mlp", "--dataset", dataset, "--run-root", tmp_path / "bc", "--quiet", "--max-steps",
        "5", "--set", "train.eval_episodes=2", "--set", "policy.mlp_hidden=[16]", "--set", "policy.action_horizon=1",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (student,) = (tmp_path / "bc" / "panda-reach").iterdir()
    out = tmp_path / "dagger"
    result = robot_rl(
        "collect", "panda-reach", "--teacher", teacher, "--student", student, "--include", dataset, "--episodes", "3",
        "--num-envs", "3", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "episodes kept: 3 of 3 rolled out and 6 copied (student success" in result.stdout
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 9 and info["robot_rl"]["dagger"]["student"] == str(student)
    assert info["robot_rl"]["included"] == {"dataset": str(dataset), "episodes": 6}
    model = PPORun.load(teacher).model
    for index in (0, 8):  # a copied demonstration and a DAgger episode: the teacher's labels both
        table = pq.read_table(out / info["data_path"].format(episode_chunk=0, episode_index=index))
        state = torch.tensor(table.column("observation.state").to_pylist(), dtype=torch.float32)
        action = np.asarray(table.column("action").to_pylist())
        with torch.inference_mode():
            np.testing.assert_allclose(action, model.action_mean(state).clamp(-1, 1).numpy(), atol=1e-5)
    scripted = robot_rl(
        "collect", "panda-reach", "--teacher", "scripted", "--student", student, "--episodes", "1", "--out", out / "x"
    )
    assert scripted.returncode == 2 and "needs a PPO teacher" in scripted.stderr
    mixed = robot_rl(
        "collect", "panda-reach", "--teacher", teacher, "--include", dataset, "--unbiased", "joint_pos", "--episodes",
        "1", "--out", out / "y",
    )  # fmt: skip
    assert mixed.returncode == 2 and "recorded with --unbiased none, this collection with ['joint_pos']" in mixed.stderr
    assert not (out / "y").exists()


def test_a_refused_include_closes_the_simulation_and_writes_nothing(
    teacher: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The included dataset is refused after the teacher's simulation is open: it is closed, nothing is written."""
    import robot_rl.imitation.collect as collect_module

    run = PPORun.load(teacher)  # the run keeps its own one-world simulation
    opened: list[object] = []
    closed: list[object] = []
    make = collect_module.sim.make

    def recorded(*args: object, **kwargs: object) -> object:
        env = make(*args, **kwargs)  # type: ignore[arg-type]
        close = env.close
        env.close = lambda: (closed.append(env), close())  # type: ignore[method-assign]
        opened.append(env)
        return env

    monkeypatch.setattr(collect_module.sim, "make", recorded)
    with pytest.raises(DatasetError, match="recorded with --unbiased none, this collection with"):
        collect_module.collect(run, 1, tmp_path / "y", 2, include=dataset, unbiased=("joint_pos",))
    assert opened and all(env in closed for env in opened)
    assert not (tmp_path / "y").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--teacher", "{missing}", "--episodes", "2", "--out", "{new}"], "run folder '{missing}' does not exist"),
        (["--teacher", "{teacher}", "--episodes", "2", "--out", "{data}"], "already exists; datasets are never"),
        (["--teacher", "{teacher}", "--episodes", "0", "--out", "{new}"], "--episodes must be in [1, 65536]"),
        (["--teacher", "{teacher}", "--episodes", "2", "--out", "{new}"], "succeeded in none of"),
        (
            ["--teacher", "{teacher}", "--episodes", "2", "--out", "{new}", "--unbiased", "object_pos"],
            "--unbiased: panda-reach: ['object_pos'] carry no per-episode bias to leave out (signals with one: "
            "joint_pos)",
        ),
        (["--teacher", "{teacher}", "--episodes", "2", "--out", "{new}", "--set", "env.x=1"], "applies to scripted"),
        (["--teacher", "scripted", "--episodes", "2", "--out", "{new}", "--set", "ppo.gamma=1"], "only env.* keys"),
    ],
)
def test_collect_refuses_bad_input_and_writes_nothing(
    teacher: Path, dataset: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    names = {"missing": tmp_path / "nope", "new": tmp_path / "new", "teacher": teacher, "data": dataset}
    result = robot_rl("collect", "panda-reach", "--quiet", *(a.format(**names) for a in args))
    assert result.returncode == 2, result.stderr
    assert message.format(**names) in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_collect_refuses_a_teacher_of_another_task(teacher: Path, tmp_path: Path) -> None:
    result = robot_rl("collect", "panda-push", "--teacher", teacher, "--episodes", "2", "--out", tmp_path / "x")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "(panda-reach) cannot act in panda-push: panda-push gives no observation of task 'panda-reach'" in (
        result.stderr
    )
    again = robot_rl("collect", "panda-reach", "--teacher", teacher, "--episodes", "2", "--out", tmp_path / "x",
                     "--set", "env.episode_length_s=2")  # fmt: skip
    assert again.returncode == 2 and "a PPO teacher of 'panda-reach' collects in the world it was trained" in (
        again.stderr
    )
    assert not (tmp_path / "x").exists()


def test_a_lift_teacher_records_the_named_cube_in_panda_multitask_in_its_own_world(tmp_path: Path) -> None:
    """``collect panda-multitask --teacher LIFT_RUN``: the lift teacher acts on panda-lift's layout with the named
    cube's estimate, in panda-multitask's world with the settings it was trained with (configs/panda-lift.yaml: the
    tank, the measured delay, the gripper open at zero); the dataset records the onboard layout and the instruction."""
    lift = tiny_ppo_run("panda-lift", tmp_path)
    out = tmp_path / "d"
    result = robot_rl(
        "collect", "panda-multitask", "--teacher", lift, "--episodes", "3", "--num-envs", "3", "--keep-failed",
        "--out", out, "--quiet", "--set", "env.episode_length_s=1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = load_dataset(out)
    info = data.robot_rl
    assert info["task"] == "panda-multitask" and info["teacher_obs_groups"] == ["panda-lift"]
    assert info["teacher"] == str(lift)  # the run folder: bench/manipulation.py --students evaluates it beside
    env = info["env"]
    assert env["gripper_action"] == "open-at-zero" and env["passivity"]["tank_max_j"] == 40.0
    assert env["command_delay"] == [0.0, 0.012] and env["episode_length_s"] == 1  # inherited, then --set
    model = PPORun.load(lift).model
    colours = ["red", "green", "blue"]
    for ep in data.episodes:  # the recorded actions are the lift actor's on the named cube's recorded estimate
        named = next(i for i, c in enumerate(colours) if c in ep.task.split())
        state = torch.as_tensor(ep.state)
        view = torch.cat((state[:, :24], state[:, 24 + 3 * named : 27 + 3 * named], state[:, 33:]), 1)
        torch.testing.assert_close(
            torch.as_tensor(ep.action), model.action_mean(view).clamp(-1, 1).detach(), atol=1e-5, rtol=0
        )
    pushes = robot_rl("collect", "panda-multitask", "--teacher", lift, "--episodes", "1", "--out", tmp_path / "e",
                      "--set", "env.skills=[lift,push]")  # fmt: skip
    assert pushes.returncode == 2 and "a panda-lift teacher only makes the 'lift' skill" in pushes.stderr
    assert pushes.stderr.count("\n") == 1 and not (tmp_path / "e").exists()
    centred = robot_rl("collect", "panda-multitask", "--teacher", lift, "--episodes", "1", "--out", tmp_path / "e",
                       "--set", "env.gripper_action=centred")  # fmt: skip
    assert centred.returncode == 2 and "commands the robot otherwise than panda-multitask" in centred.stderr
    assert "the action's" in centred.stderr and centred.stderr.count("\n") == 1 and not (tmp_path / "e").exists()
    # beside its student (bench/manipulation.py --students): the same view, in the world it recorded in, checked alike
    teacher = PPORun.load(lift)
    world = teacher_world(teacher, "panda-multitask", ("env.episode_length_s=1",))
    assert evaluate_teacher(teacher, "panda-multitask", world.env, 3, [1]).episodes == 3
    other = teacher_world(teacher, "panda-multitask", ("env.gripper_action=centred",))
    with pytest.raises(ConfigError, match="commands the robot otherwise than panda-multitask"):
        evaluate_teacher(teacher, "panda-multitask", other.env, 3, [1])
    longer = teacher_world(teacher, "panda-multitask", ("env.action_history=1",))
    with pytest.raises(ConfigError, match=r"reads otherwise than panda-multitask gives it \(observation terms \d+ -> "):
        evaluate_teacher(teacher, "panda-multitask", longer.env, 3, [1])
    # the same from the command line: robot-rl eval LIFT_RUN --task panda-multitask
    there = robot_rl("eval", lift, "--task", "panda-multitask", "--episodes", "3", "--seeds", "1",
                     "--set", "env.episode_length_s=1")  # fmt: skip
    assert there.returncode == 0, there.stderr
    assert "panda-lift run in panda-multitask, on the view panda-multitask gives of panda-lift: success" in there.stdout
    assert "over 3 episodes, 1 seeds, behind a 40 J tank (lowest " in there.stdout
    written = yaml.safe_load((lift / "eval_task-panda-multitask_set-episode_length_s-1.yaml").read_text())
    assert written["env_overrides"] == ["env.episode_length_s=1"] and written["episodes"] == 3
    assert sum(row["episodes"] for row in written["per_instruction"]) == 3 and written["tank_max_j"] == 40.0
    for args, message in (
        (["--set", "env.gripper_action=centred"], "commands the robot otherwise than panda-multitask"),
        (["--set", "ppo.gamma=0.9"], "'ppo.gamma' is not an env setting"),
        (["--task", "panda-lift"], "is the run's own task"),
        (["--task", "no-such-task"], "no-such-task"),
        (["--sim", "pybullet"], "--task evaluates in another task's worlds"),
    ):
        task = [] if "--task" in args else ["--task", "panda-multitask"]
        bad = robot_rl("eval", lift, *task, *args, "--episodes", "1")
        assert bad.returncode == 2 and message in bad.stderr and bad.stderr.count("\n") == 1, (args, bad.stderr)
    assert sorted(p.name for p in lift.glob("eval_task-*")) == [
        "eval_task-panda-multitask_set-episode_length_s-1.png", "eval_task-panda-multitask_set-episode_length_s-1.yaml"
    ]  # fmt: skip


def test_a_push_teacher_records_the_named_cube_pushed_into_the_zone_with_the_gripper_held_closed(
    tmp_path: Path,
) -> None:
    """``collect panda-multitask --teacher PUSH_RUN --set env.skills=[push]``: a panda-push teacher (trained for the
    zone: ``env.goal_x``) acts on panda-push's layout with the named cube's estimate and the zone's middle in its lane
    as the goal; its 7 joint actions are recorded with the gripper held closed, in the world it was trained in."""
    push = tiny_ppo_run("panda-push", tmp_path, "env.goal_x=[0.7,0.78]", "env.cube_high=[0.6,0.15]")
    out = tmp_path / "d"
    result = robot_rl(
        "collect", "panda-multitask", "--teacher", push, "--episodes", "3", "--num-envs", "3", "--keep-failed",
        "--out", out, "--quiet", "--set", "env.episode_length_s=1", "--set", "env.skills=[push]",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = load_dataset(out)
    info = data.robot_rl
    assert info["teacher_obs_groups"] == ["panda-push"] and info["env"]["skills"] == ["push"]
    assert info["env"]["physics_dt"] == 0.008 and info["env"]["passivity"]["tank_max_j"] == 80.0  # inherited
    for ep in data.episodes:  # the gripper held closed (-1 closes it in either mapping: tests/sim/test_multitask.py)
        assert ep.task in training_texts(("push",)) and np.all(np.asarray(ep.action)[:, 7] == -1.0)
    teacher = PPORun.load(push)  # what it acts on there: the view panda-multitask gives of panda-push, then -1
    world = teacher_world(teacher, "panda-multitask", ("env.skills=[push]",))
    env = sim.make("panda-multitask", 4, "cpu", world.env)
    act = teacher.policy_in(env, teacher.act_in(env))
    obs = env.reset(seed=3)
    with torch.inference_mode():
        action = act(obs)
        assert torch.equal(action[:, :7], teacher.model.action_mean(obs["panda-push"]))
        assert torch.all(action[:, 7] == -1)
    env.close()
    lifts = robot_rl("collect", "panda-multitask", "--teacher", push, "--episodes", "1", "--out", tmp_path / "e")
    assert lifts.returncode == 2 and "a panda-push teacher only makes the 'push' skill" in lifts.stderr
    assert "--set 'env.skills=[push]'" in lifts.stderr and lifts.stderr.count("\n") == 1
    assert not (tmp_path / "e").exists()
    there = robot_rl("eval", push, "--task", "panda-multitask", "--episodes", "3", "--seeds", "1",
                     "--set", "env.episode_length_s=1", "--set", "env.skills=[push]")  # fmt: skip
    assert there.returncode == 0, there.stderr
    assert "panda-push run in panda-multitask, on the view panda-multitask gives of panda-push: success" in there.stdout


def test_a_lift_teacher_goes_on_training_in_panda_multitask_on_its_view_and_records_there(tmp_path: Path) -> None:
    """``train panda-multitask --config configs/panda-multitask-lift.yaml --init-from LIFT_RUN``: the actor reads
    panda-lift's view (``env.task_view``) and starts as the lift teacher's; the run records demonstrations as a
    teacher of the task itself, acting on the view and recording the onboard layout."""
    lift = tiny_ppo_run("panda-lift", tmp_path)
    quick = ["--max-iterations", "1", "--num-envs", "4", "--quiet", "--set", "runner.eval_interval=0",
             "--set", "runner.eval_episodes=2", "--set", "ppo.num_steps=4", "--set", "ppo.num_minibatches=1",
             "--set", "env.episode_length_s=0.5"]  # fmt: skip
    config = Path(__file__).parents[2] / "configs" / "panda-multitask-lift.yaml"
    result = robot_rl("train", "panda-multitask", "--config", config, "--init-from", lift, "--no-export",
                      "--run-root", tmp_path / "mt", *quick)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "actor; the critic starts fresh (a critic of panda-lift)" in result.stdout
    (run,) = (tmp_path / "mt" / "panda-multitask").iterdir()
    assert PPORun.load(run).cfg.policy.actor_obs == ["panda-lift"]
    out = tmp_path / "d"
    collected = robot_rl("collect", "panda-multitask", "--teacher", run, "--episodes", "2", "--num-envs", "2",
                         "--keep-failed", "--out", out, "--quiet")  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    info = load_dataset(out).robot_rl
    assert info["teacher_obs_groups"] == ["panda-lift"] and info["obs_groups"] == ["policy"]
    assert info["env"]["task_view"] == "panda-lift" and info["teacher"] == str(run)
    # another task's run starts one only whose actor reads that task's view
    refused = robot_rl("train", "panda-multitask", "--init-from", lift, "--run-root", tmp_path / "no", *quick)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "holds a 'panda-lift' policy, not 'panda-multitask' (a policy of another task starts a run only" in (
        refused.stderr
    )
    pushes = robot_rl("train", "panda-multitask", "--config", config, "--init-from", lift, "--no-export",
                      "--set", "env.skills=[lift,push]", "--run-root", tmp_path / "no", *quick)  # fmt: skip
    assert pushes.returncode == 2 and "a panda-lift teacher only makes the 'lift' skill" in pushes.stderr
    centred = robot_rl("train", "panda-multitask", "--config", config, "--init-from", lift, "--no-export",
                       "--set", "env.gripper_action=centred", "--run-root", tmp_path / "no", *quick)  # fmt: skip
    assert centred.returncode == 2 and centred.stderr.count("\n") == 1
    assert "commands the robot otherwise than panda-multitask in this world (the action's" in centred.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "{missing}"], "dataset folder '{missing}' does not exist"),
        (["--dataset", "{data}", "--set", "policy.horizon=3"], "unknown config key 'policy.horizon'"),
        (["--dataset", "{data}", "--set", "policy.action_horizon=32"], "action_horizon 32 exceeds pred_horizon 16"),
        ([], "no dataset given"),
        (["--dataset", "{data}", "--set", "tasks=[nothing like it]"], "has the task 'nothing like it'"),
        (["--dataset", "{data}", "--set", "tasks=[]"], "tasks must name at least one task text"),
        (
            [
                "--dataset",
                "{data}",
                "--policy",
                "vla",
                "--set",
                "policy.language=false",
                "--set",
                "policy.language_tokens=16",
            ],
            "policy.language_tokens needs policy.language: true",
        ),
        (["--dataset", "{data}", "--policy", "vla", "--set", "policy.language_tokens=65"], "in [0, 64], got 65"),
        (
            ["--dataset", "{data}", "--policy", "vla", "--set", "policy.language_subspace=false"],
            "policy.language_nearest needs policy.language_subspace (set policy.language_nearest=false to read the raw",
        ),
        (
            ["--dataset", "{data}", "--policy", "vla", "--set", "policy.image_film=true"],
            "policy.image_film conditions the image encoders on the instruction: it needs policy.language and "
            "policy.cameras",
        ),
        (
            [
                "--dataset",
                "{data}",
                "--policy",
                "vla",
                "--set",
                "policy.cameras=[wrist]",
                "--set",
                "policy.image_film=true",
                "--set",
                "policy.language_tokens=8",
            ],
            "policy.image_film reads the pooled instruction: set policy.language_tokens=0",
        ),
    ],
)
def test_train_bc_refuses_bad_input(dataset: Path, tmp_path: Path, args: list[str], message: str) -> None:
    names = {"missing": tmp_path / "nope", "data": dataset}
    result = robot_rl("train-bc", "--run-root", tmp_path / "runs", *(a.format(**names) for a in args))
    assert result.returncode == 2, result.stderr
    assert message.format(**names) in result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_student_of_some_instructions_reports_its_own_success_beside_the_pooled_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tasks=[...]`` trains on some of a dataset's instructions; the evaluation draws all of the task's, so the
    end summary and ``eval.yaml`` also give the success over the episodes given one of the student's own."""
    from robot_rl.cli import main
    from robot_rl.imitation.collect import collect

    with one_torch_thread():
        collect("panda-multitask", 6, tmp_path / "data", num_envs=6, quiet=True)
        own = sorted({e.task for e in load_dataset(tmp_path / "data").episodes if "red" in e.task})
        code = main(
            ["train-bc", "--policy", "mlp", "--dataset", str(tmp_path / "data"), "--run-root", str(tmp_path),
             "--quiet", "--max-steps", "5", "--set", "train.batch_size=16", "--set", "train.eval_episodes=9",
             "--set", f"tasks=[{', '.join(own)}]"]
        )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and "over 27 episodes, 3 seeds" in out, err
    (run,) = (tmp_path / "panda-multitask").iterdir()
    summary = yaml.safe_load((run / "eval.yaml").read_text())["tasks"]
    rows = [r for r in yaml.safe_load((run / "eval.yaml").read_text())["per_instruction"] if r["instruction"] in own]
    assert summary["instructions"] == own and summary["episodes"] == sum(r["episodes"] for r in rows)
    assert own and f"on its {len(own)} own instruction(s): success {summary['success_rate']:.1%}" in out


def test_firmware_export_refuses_a_chunk_policy_by_name(dataset: Path, tmp_path: Path) -> None:
    trained = robot_rl(
        "train-bc", "--policy", "mlp", "--dataset", dataset, "--run-root", tmp_path, "--quiet", "--max-steps", "2",
        "--set", "train.eval_episodes=1", "--set", "policy.mlp_hidden=[8]", "--set", "train.log_interval=1",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (run,) = (tmp_path / "panda-reach").iterdir()
    result = robot_rl("export", "firmware", run / "policy.onnx", "--out", tmp_path / "fw")
    assert result.returncode == 2 and "is an action-chunk policy" in result.stderr
    assert not (tmp_path / "fw").exists()


def test_collect_renders_camera_images_into_the_dataset(teacher: Path, tmp_path: Path) -> None:
    from robot_rl.imitation.dataset import decode_image, load_dataset

    out = tmp_path / "with-images"
    result = robot_rl(
        "collect", "panda-reach", "--teacher", teacher, "--episodes", "1", "--num-envs", "1", "--keep-failed",
        "--images", "front", "--image-size", "32", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["observation.images.front"]["shape"] == [32, 32, 3]
    (episode,) = load_dataset(out).episodes
    frames = [decode_image(png) for png in episode.images["front"]]
    assert len(frames) == 75 and frames[0].shape == (32, 32, 3)
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 0.1  # the arm moved in view
    wrong = robot_rl("collect", "panda-reach", "--teacher", teacher, "--episodes", "1", "--keep-failed",
                     "--images", "top", "--out", tmp_path / "x")  # fmt: skip
    assert wrong.returncode == 2 and "camera 'top' is not in the task's model (cameras: front, wrist)" in wrong.stderr


def test_a_student_that_sees_the_wrist_camera_trains_exports_and_tells_where_the_camera_was(tmp_path: Path) -> None:
    data = tmp_path / "lift-wrist"
    result = robot_rl(
        "collect", "panda-lift", "--teacher", "scripted", "--episodes", "2", "--num-envs", "2", "--keep-failed",
        "--images", "wrist", "--image-size", "16", "--visual-randomization", "--out", data, "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    meta = json.loads((data / "meta" / "info.json").read_text())["robot_rl"]
    mount = meta["cameras"]["wrist"]
    assert mount["body"] == "panda_hand" and mount["fovy_deg"] == 75.0 and mount["height"] == 16
    assert meta["visual_randomization"]["camera_tilt_deg"] == 2.0  # evaluation renders with the same draws
    blind = robot_rl("collect", "panda-lift", "--teacher", "scripted", "--episodes", "1", "--visual-randomization",
                     "--out", tmp_path / "blind")  # fmt: skip
    assert blind.returncode == 2 and "name the cameras with --images" in blind.stderr
    runs = tmp_path / "runs"
    sets = [a for s in ["policy.cameras=[wrist]", "policy.image_features=8", *TINY_TRAINING] for a in ("--set", s)]
    wrong = robot_rl("train-bc", "--policy", "mlp", "--dataset", data, "--set", "policy.cameras=[front]",
                     "--max-steps", "5", "--run-root", runs, "--quiet")  # fmt: skip
    assert wrong.returncode == 2
    assert "policy.cameras names ['front'], but the dataset has images of ['wrist']" in wrong.stderr
    other_kind = robot_rl("train-bc", "--policy", "mlp", "--dataset", data, "--set", "policy.down_dims=[8]",
                          "--max-steps", "5", "--run-root", runs, "--quiet")  # fmt: skip
    assert other_kind.returncode == 2
    assert "unknown config key 'policy.down_dims'; valid keys here: action_horizon" in other_kind.stderr
    assert not runs.exists()
    trained = robot_rl("train-bc", "--policy", "mlp", "--dataset", data, *sets, "--max-steps", "5",
                       "--run-root", runs, "--quiet")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (run,) = (runs / "panda-lift").iterdir()
    contract = yaml.safe_load((run / "contract.yaml").read_text())
    cam = contract["chunk"]["cameras"]["wrist"]
    assert cam["input"] == "image_wrist" and (cam["height"], cam["width"]) == (16, 16)
    assert cam["mount"]["body"] == "panda_hand"
    shown = robot_rl("inspect", run / "policy.onnx")
    assert shown.returncode == 0 and "camera 'wrist': input 'image_wrist' uint8 [B, 2, 16, 16, 3]" in shown.stdout
    policy = ChunkedOnnxPolicy(run / "policy.onnx")
    assert policy.self_test().shape == (1, 8)
    nominal = robot_rl("eval", run, "--episodes", "2", "--seeds", "1", "--visual", "nominal")
    assert nominal.returncode == 0 and "over 2 episodes, 1 seeds" in nominal.stdout, nominal.stderr
