"""The ``robot-rl`` command line end to end: train -> export -> ONNX parity -> eval, and every user error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

import sim
from policies.runtime.contract import Contract
from policies.runtime.onnx_policy import OnnxPolicy
from robot_rl.algorithms.ppo import PPO
from robot_rl.checkpoint import read_checkpoint
from robot_rl.cli import main
from robot_rl.config import config_to_yaml, load_config
from robot_rl.runs import PPORun
from sim.tasks.base import BatchedTask

TASK = "quadrotor-hover"
RUN_FILES = [
    "config.yaml",
    "checkpoint.pt",
    "metrics.csv",
    "learning_curve.png",
    "eval.yaml",
    "eval.png",
    "policy.onnx",
    "contract.yaml",
]
FAST = [  # a cheap training for tests that only need *a* run
    "--num-envs", "16", "--set", "ppo.num_steps=4", "--set", "runner.eval_episodes=4",
    "--set", "runner.eval_interval=0", "--set", "env.episode_length_s=0.3", "--quiet",
]  # fmt: skip


def only_run_dir(root: Path) -> Path:
    runs = sorted((root / TASK).iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), hidden and temporary files included."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_error(capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("robot-rl: error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# ------------------------------------------------------------------------------------------ end to end
def test_train_export_eval_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    argv = [
        "train", TASK, "--num-envs", "16", "--max-iterations", "2", "--set", "ppo.num_steps=4",
        "--set", "runner.eval_episodes=8", "--set", "runner.eval_interval=1", "--set", "runner.eval_gate=0",
        "--run-root", str(root), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    run = only_run_dir(root)
    for name in RUN_FILES:
        assert (run / name).is_file(), name
        assert str(run / name) in out, f"{name} not listed in stdout"
    assert read_checkpoint(run / "checkpoint.pt")["iteration"] == 2
    assert not [p for p in run.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]
    cfg = load_config(None, run / "config.yaml")
    assert (cfg.task, cfg.num_envs, cfg.ppo.num_steps, cfg.runner.max_iterations) == (TASK, 16, 4, 2)

    # --- export to another folder
    out_dir = tmp_path / "export"
    assert main(["export", "onnx", str(run), "--out", str(out_dir)]) == 0
    assert str(out_dir / "policy.onnx") in capsys.readouterr().out
    assert sorted(p.name for p in out_dir.iterdir()) == ["contract.yaml", "policy.onnx"]
    check_onnx_matches_torch(run, out_dir / "policy.onnx")

    # --- evaluation with randomisation on and off
    assert main(["eval", str(run), "--episodes", "4"]) == 0
    assert "eval.yaml" in capsys.readouterr().out
    summary = yaml.safe_load((run / "eval.yaml").read_text())
    assert set(summary) == {"randomization_on", "randomization_off"}
    assert summary["randomization_on"]["randomization"] is True
    assert summary["randomization_off"]["randomization"] is False
    for s in summary.values():
        assert s["episodes"] == 4
        assert 0.0 <= s["success_rate"] <= 1.0 and np.isfinite(s["return_mean"])

    # --- evaluation at another control rate: its own files, eval.yaml untouched
    before = (run / "eval.yaml").read_bytes()
    assert main(["eval", str(run), "--episodes", "4", "--control-rate", "100"]) == 0
    out = capsys.readouterr().out
    assert "control rate 100 Hz (trained at 50 Hz)" in out and "eval_100hz.yaml" in out
    assert set(yaml.safe_load((run / "eval_100hz.yaml").read_text())) == {"randomization_on", "randomization_off"}
    assert (run / "eval_100hz.png").is_file() and (run / "eval.yaml").read_bytes() == before


def check_onnx_matches_torch(run_dir: Path, onnx_path: Path) -> None:
    """The ONNX policy equals ``clip(offset + scale * clip(action_mean, -1, 1), low, high)`` on sim observations."""
    run = PPORun.load(run_dir)
    n = 16
    policy = OnnxPolicy(onnx_path, num_envs=n)
    policy.self_test()
    c = policy.contract
    assert Contract.load_yaml(onnx_path.parent / "contract.yaml") == c
    assert c.task == TASK
    env = sim.make(TASK, n, "cpu", run.cfg.env, seed=5)
    assert c.obs_dim == env.obs_sizes["policy"] and c.control_period_s == env.dt

    # Observations from the simulator, along a short trajectory of the (noisy) policy itself.
    obs = env.reset(seed=5)
    batches = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):
        batches.append(obs["policy"].clone())
        with torch.inference_mode():
            act = run.model.action_mean(obs["policy"]) + 0.5 * torch.randn(n, env.num_actions, generator=gen)
        obs, *_ = env.step(act)
    x = torch.cat(batches)
    with torch.no_grad():
        a = run.model.action_mean(x).clamp(-1.0, 1.0).numpy()
    expected = np.clip(np.asarray(c.action.offset) + np.asarray(c.action.scale) * a, c.action.low, c.action.high)
    got = policy.run_obs(x.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=0)
    # Also in normalised units, where a tiny action is not swamped by the RPM offset.
    np.testing.assert_allclose(policy.normalized_action(got), a, rtol=0, atol=1e-5)
    # The copy exported into the run folder by `train` is the same policy.
    np.testing.assert_array_equal(OnnxPolicy(run_dir / "policy.onnx", num_envs=n).run_obs(x.numpy()), got)


def test_runtime_observation_builder_matches_the_simulator(tmp_path: Path) -> None:
    """Raw signals through the robot-side builder give the simulator's policy observation (noise off)."""
    from policies.nets import ActorCritic
    from policies.nets.export import export_onnx

    n = 4
    env = sim.make(TASK, n, "cpu", seed=2)
    assert isinstance(env, BatchedTask)
    env.set_randomization(False)
    model = ActorCritic(env.obs_sizes["policy"], env.obs_sizes["critic"], env.num_actions)
    policy = OnnxPolicy(export_onnx(model, env.contract(["policy"]), tmp_path), num_envs=n)
    obs = env.reset(seed=2)
    policy.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        signals = {k: v.numpy() for k, v in env._signals().items()}
        np.testing.assert_allclose(policy.observation(signals), obs["policy"].numpy(), rtol=0, atol=1e-6)
        obs, _, terminated, truncated, _ = env.step(0.3 * torch.randn(n, env.num_actions, generator=gen))
        assert not bool((terminated | truncated).any())


def test_tasks_lists_every_registered_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in sim.task_names():
        assert name in out


# ------------------------------------------------------------------------------------------- bad input
TRAIN_BAD = [
    pytest.param(["quadrotor-hoover"], ["unknown task 'quadrotor-hoover'", "registered tasks", TASK], id="task"),
    pytest.param([TASK, "--set", "nope=1"], ["unknown config key 'nope'", "valid keys here", "num_envs"], id="key"),
    pytest.param(
        [TASK, "--set", "ppo.learning_rate=abc"], ["'ppo.learning_rate' must be a number", "'abc'"], id="type"
    ),
    pytest.param([TASK, "--num-envs", "0"], [r"num_envs must be in [1, 16777216], got 0"], id="num-envs-0"),
    pytest.param([TASK, "--set", "ppo.num_steps=0"], ["ppo.num_steps must be >= 1"], id="num-steps-0"),
    pytest.param(
        [TASK, "--resume", "runs/a", "--init-from", "runs/b"],
        ["--resume continues a run", "pass one"],
        id="resume-init",
    ),
    pytest.param([TASK, "--init-from", "no/such/run"], ["policy.init_from: 'no/such/run' is neither"], id="init-from"),
]


@pytest.mark.parametrize(("args", "fragments"), TRAIN_BAD)
def test_train_bad_input_exits_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]
) -> None:
    root = tmp_path / "runs"
    assert main(["train", *args, "--run-root", str(root), "--quiet"]) == 2
    assert_error(capsys, *fragments)
    assert not root.exists()


def test_resume_without_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "old-run"
    folder.mkdir()
    (folder / "config.yaml").write_text("task: quadrotor-hover\n")
    root = tmp_path / "runs"
    assert main(["train", TASK, "--resume", str(folder), "--run-root", str(root), "--quiet"]) == 2
    assert_error(capsys, "cannot resume", str(folder), "no checkpoint.pt")
    assert not root.exists()
    assert snapshot(folder) == {"config.yaml": b"task: quadrotor-hover\n"}


def test_eval_missing_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-run"
    assert main(["eval", str(missing), "--episodes", "4"]) == 2
    assert_error(capsys, f"run folder '{missing}' does not exist")
    assert not missing.exists()


def test_eval_folder_without_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.yaml").write_text("task: quadrotor-hover\n")
    assert main(["eval", str(tmp_path), "--episodes", "4"]) == 2
    assert_error(capsys, str(tmp_path), "not a run folder (no checkpoint.pt)")
    assert snapshot(tmp_path) == {"config.yaml": b"task: quadrotor-hover\n"}


def test_eval_zero_episodes_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path), "--episodes", "0"]) == 2
    assert_error(capsys, "--episodes must be in [1, 65536], got 0")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ensemble-decay", "nan"], "--ensemble-decay must be a finite number, got nan"),
        (
            ["--chunking", "sync", "--ensemble-decay", "-0.6"],
            "--chunking sync executes receding-horizon plans; it takes no --ensemble-decay",
        ),
        (["--chunking", "rtc", "--ensemble-decay", "-0.6"], "--chunking rtc executes receding-horizon plans"),
    ],
)
def test_eval_execution_flags_no_student_takes_are_refused_before_any_loading(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder is no run at all: the flags are refused first, before a run or a student is loaded."""
    assert main(["eval", str(tmp_path), *flags]) == 2
    assert_error(capsys, message)


@pytest.fixture
def corrupt_run(tmp_path: Path) -> Path:
    """A run folder with a valid config, a garbage checkpoint and an earlier export that must survive."""
    run = tmp_path / "runs" / TASK / "20250101-000000-0"
    run.mkdir(parents=True)
    cfg = load_config(TASK, None, ["num_envs=16", f"run_root={tmp_path / 'runs'}"])
    (run / "config.yaml").write_text(config_to_yaml(cfg))
    (run / "checkpoint.pt").write_bytes(b"PK\x03\x04 definitely not a checkpoint \x00\xff" * 7)
    (run / "policy.onnx").write_bytes(b"previous export")
    (run / "contract.yaml").write_text("previous: contract\n")
    (run / "eval.yaml").write_text("previous: eval\n")
    return run


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["export", "onnx", "{run}"], id="export"),
        pytest.param(["export", "onnx", "{run}", "--out", "{run}"], id="export-out-same"),
        pytest.param(["eval", "{run}", "--episodes", "4"], id="eval"),
    ],
)
def test_corrupt_checkpoint_exits_2_and_touches_nothing(
    corrupt_run: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    before = snapshot(corrupt_run)
    assert main([c.format(run=corrupt_run) for c in command]) == 2
    assert_error(capsys, f"checkpoint '{corrupt_run / 'checkpoint.pt'}' could not be read")
    assert snapshot(corrupt_run) == before  # nothing modified, deleted or added (no stray temp files)


def test_argparse_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["train"], [], ["export"], ["export", "onnx"], ["train", TASK, "--num-envs", "abc"], ["fly"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("robot-rl") and ": error: " in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["train"])
    assert "the following arguments are required: task" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- Ctrl-C and resume
def test_ctrl_c_then_resume(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    interrupt_on_call: Callable[[int, Callable[..., Any]], Callable[..., Any]],
) -> None:
    root = tmp_path / "runs"
    with monkeypatch.context() as m:
        m.setattr(PPO, "update", interrupt_on_call(3, PPO.update))
        assert main(["train", TASK, "--max-iterations", "4", "--run-root", str(root), *FAST]) == 130
    run = only_run_dir(root)
    out = capsys.readouterr().out
    assert "interrupted after 2 iterations" in out
    assert f"robot-rl train {TASK} --resume {run}" in out
    assert read_checkpoint(run / "checkpoint.pt")["iteration"] == 2
    assert not (run / "policy.onnx").exists()  # an interrupted run is not exported

    before = snapshot(run)
    root2 = tmp_path / "resumed"
    argv = ["train", TASK, "--resume", str(run), "--max-iterations", "4", "--run-root", str(root2), "--no-export"]
    assert main([*argv, *FAST]) == 0
    new = only_run_dir(root2)
    state = read_checkpoint(new / "checkpoint.pt")
    assert (state["iteration"], state["env_steps"]) == (4, 4 * 4 * 16)
    assert len((new / "metrics.csv").read_text().strip().splitlines()) == 1 + 2
    assert snapshot(run) == before  # resuming never writes into the old run


def test_a_moved_run_continues_beside_itself(tmp_path: Path) -> None:
    """A run folder copied elsewhere (from a GPU machine, say) and resumed without ``--run-root`` continues in a new
    run folder beside it, not under the root it was trained in; ``--run-root`` still wins."""
    root = tmp_path / "trained-here"
    assert main(["train", TASK, "--max-iterations", "1", "--run-root", str(root), "--no-export", *FAST]) == 0
    moved = tmp_path / "copied" / TASK / only_run_dir(root).name
    moved.parent.mkdir(parents=True)
    only_run_dir(root).rename(moved)
    assert main(["train", TASK, "--resume", str(moved), "--max-iterations", "2", "--no-export", *FAST]) == 0
    (new,) = [p for p in moved.parent.iterdir() if p != moved]
    assert read_checkpoint(new / "checkpoint.pt")["iteration"] == 2
    assert not (root / TASK).exists() or not any((root / TASK).iterdir())
    argv = ["train", TASK, "--resume", str(new), "--max-iterations", "3", "--set", f"run_root={root}", "--no-export"]
    assert main([*argv, *FAST]) == 0
    assert read_checkpoint(only_run_dir(root) / "checkpoint.pt")["iteration"] == 3


def test_resume_that_would_train_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert main(["train", TASK, "--max-iterations", "1", "--run-root", str(root), "--no-export", *FAST]) == 0
    run = only_run_dir(root)
    capsys.readouterr()
    root2 = tmp_path / "resumed"
    argv = ["train", TASK, "--resume", str(run), "--max-iterations", "1", "--run-root", str(root2), "--no-export"]
    assert main([*argv, *FAST]) == 2
    assert_error(capsys, "max_iterations")
    assert not root2.exists()


def test_every_listed_artifact_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert main(["train", TASK, "--max-iterations", "1", "--run-root", str(root), "--no-export", *FAST]) == 0
    listed = capsys.readouterr().out.split("artifacts:", 1)[1].splitlines()
    paths = [Path(line.split()[0]) for line in listed if line.strip()]
    assert paths
    missing = [p for p in paths if not p.exists()]
    assert not missing, missing


# ------------------------------------------------------------------------ errors that escape as tracebacks
def test_unknown_observation_group_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    argv = ["train", TASK, "--set", "policy.critic_obs=[policy, privileged]", "--run-root", str(root), *FAST]
    assert main(argv) == 2
    assert_error(capsys, "policy.critic_obs", "'privileged'", "policy, critic")
    assert not root.exists()


def test_undeployable_actor_groups_are_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    argv = ["train", TASK, "--max-iterations", "1", "--set", "policy.actor_obs=[policy, critic]"]
    assert main([*argv, "--run-root", str(root), *FAST]) == 2
    assert_error(capsys, "policy.actor_obs", "--no-export")
    assert not root.exists()


# ------------------------------------------------------------------ every user error: status 2, one line, no files
@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained and exported run (shared, read-only for the tests below)."""
    root = tmp_path_factory.mktemp("good") / "runs"
    assert main(["train", TASK, "--max-iterations", "1", "--run-root", str(root), *FAST]) == 0
    return only_run_dir(root)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cart") / "runs"
    assert (
        main(["train", "cartpole-balance", "--max-iterations", "1", "--run-root", str(root), "--no-export", *FAST]) == 0
    )
    return next((root / "cartpole-balance").iterdir())


def _nan_run(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose checkpoint holds a NaN weight (as an old, unguarded trainer could have written)."""
    import shutil

    shutil.copytree(src, dst)
    state = torch.load(dst / "checkpoint.pt", weights_only=True)
    state["model"]["actor.0.weight"][0, 0] = float("nan")
    torch.save(state, dst / "checkpoint.pt")
    return dst


USER_ERRORS: list[Any] = [
    # train
    (["train", TASK, "--config", "{tmp}"], "is a folder, not a file"),
    (["train", TASK, "--config", "{tmp}/binary.yaml"], "cannot be read"),
    (["train", TASK, "--resume", "{tmp}/binary.yaml"], "is a file; pass the run folder"),
    (["train", TASK, "--resume", "{cart}"], "is for task 'cartpole-balance', not 'quadrotor-hover'"),
    (["train", TASK, "--seed", "-1"], "seed must be in [0, 4294967295], got -1"),
    (["train", TASK, "--seed", str(2**70)], "seed must be in [0, 4294967295]"),
    (["train", TASK, "--num-envs", str(10**12)], "num_envs must be in [1, 16777216]"),
    (["train", TASK, "--max-time", "nan"], "runner.max_time_s must be finite and > 0"),
    (["train", TASK, "--max-iterations", "0"], "runner.max_iterations must be >= 1"),
    (["train", TASK, "--device", "cuda:7"], "device 'cuda:7'"),
    (["train", TASK, "--device", "tpu"], "device 'tpu'"),
    (["train", TASK, "--run-root", "{tmp}/binary.yaml"], "run root '{tmp}/binary.yaml' is a file, not a folder"),
    (["train", TASK, "--run-root", "{tmp}/binary.yaml/runs"], "cannot be created: '{tmp}/binary.yaml' is a file"),
    (["train", TASK, "--run-root", "{tmp}/readonly/runs"], "cannot be written: '{tmp}/readonly' is read-only"),
    (["train", TASK, "--set", "env.robot.max_rpm=.nan"], "robot.max_rpm must be finite and positive"),
    (["train", TASK, "--set", "env.reward_scales.position=.nan"], "reward_scales.position must be finite"),
    (["train", TASK, "--num-envs", "abc"], "invalid int value: 'abc'"),
    (["train", TASK, "--set", "task=cartpole-balance"], "changes the task to 'cartpole-balance'"),
    (["train", TASK, "--config", "{tmp}/twice.yaml"], "key 'seed' is given twice (first on line 2)"),
    (["train", TASK, "--set", "env.episode_length_s=0.001"], "env.episode_length_s (0.001 s) must be at least one"),
    # eval
    (["eval", "{tmp}/binary.yaml"], "is a file, not a run folder"),
    (["eval", "{run}", "--episodes", str(10**9)], "--episodes must be in [1, 65536]"),
    (["eval", "{run}", "--device", "cuda:7"], "device 'cuda:7'"),
    (["eval", "{run}", "--device", "foo"], "device 'foo'"),
    (["eval", "{nan}"], "holds non-finite values in 'actor.0.weight'"),
    (["eval", "{readonly_run}"], "run folder '{readonly_run}' cannot be written"),
    (["eval", "{run}", "--control-rate", "0"], "--control-rate must be a positive rate in Hz, got 0.0"),
    (["eval", "{run}", "--control-rate", "nan"], "--control-rate must be a positive rate in Hz, got nan"),
    (["eval", "{run}", "--control-rate", "250", "--sweep", "mass=1:2"], "separate evaluations; give one of them"),
    (["eval", "{run}", "--set", "ppo.learning_rate=1"], "'ppo.learning_rate' is not an env setting"),
    (["eval", "{run}", "--set", "env.no_such_key=1"], "no_such_key"),
    (["eval", "{run}", "--set", "env.dt=.nan"], "env.dt"),
    (["eval", "{run}", "--set", "env.state_history=4"], "changes what the policy reads or commands (observation"),
    (["eval", "{run}", "--set", "env.robot.max_rpm=30000"], "changes what the policy reads or commands (the action's"),
    (["eval", "{run}", "--set", "env.dt=0.01", "--corner", "worst"], "--set applies to the plain evaluation"),
    (["eval", "{cart}", "--set", "env.dt"], "must look like key.subkey=value"),
    # a student's flags, given for a PPO run, are refused by name instead of ignored
    (["eval", "{run}", "--instructions", "heldout"], "--instructions applies to train-bc runs; '{run}' is a PPO run"),
    (["eval", "{run}", "--seeds", "2"], "--seeds applies to train-bc runs; '{run}' is a PPO run (a PPO run is"),
    (["eval", "{run}", "--action-horizon", "1"], "--action-horizon applies to train-bc runs"),
    (["eval", "{run}", "--visual", "nominal"], "--visual applies to train-bc runs"),
    (["eval", "{run}", "--task", "quadrotor-hover"], "--task quadrotor-hover is the run's own task"),
    # export
    (["export", "onnx", "{run}", "--out", "{tmp}/binary.yaml"], "output folder '{tmp}/binary.yaml' is a file"),
    (["export", "onnx", "{run}", "--out", "{tmp}/binary.yaml/deploy"], "'{tmp}/binary.yaml' is a file"),
    (["export", "onnx", "{run}", "--out", "{tmp}/readonly/deploy"], "'{tmp}/readonly' is read-only"),
    (["export", "onnx", "{nan}", "--out", "{tmp}/deploy"], "holds non-finite values in 'actor.0.weight'"),
    (["export", "onnx", "{tmp}/nowhere"], "run folder '{tmp}/nowhere' does not exist"),
    (["export", "tflite", "{run}"], "invalid choice: 'tflite'"),
    (["export", "firmware", "{tmp}/nowhere"], "'{tmp}/nowhere' does not exist"),
    (["export", "firmware", "{run}", "--target", "z80"], "invalid choice: 'z80'"),
    (["export", "firmware", "{run}", "--vectors", "0"], "--vectors must be in [1, 100000], got 0"),
    (["export", "firmware", "{run}", "--out", "{tmp}/binary.yaml"], "output folder '{tmp}/binary.yaml' is a file"),
    (["export", "firmware", "{tmp}/binary.yaml"], "is not a valid ONNX model"),
    (["export", "firmware", "{nan}", "--out", "{tmp}/fw"], "holds non-finite values in 'actor.0.weight'"),
    (["export", "ros2-node", "{run}", "--rate", "0"], "--rate must be a rate in (0, 10000] Hz, got 0.0"),
    (["export", "ros2-node", "{run}", "--rate", "1e9"], "--rate must be a rate in (0, 10000] Hz, got 1000000000.0"),
    (["eval", "{run}", "--control-rate", "1e9"], "control period must be within [0.0001, "),
    (["export", "ros2-node", "{tmp}/nowhere"], "'{tmp}/nowhere' does not exist"),
    (["export", "ros2-node", "{run}", "--out", "{tmp}/binary.yaml"], "output folder '{tmp}/binary.yaml' is a file"),
    # --out never deletes what it did not write: a run folder, a folder of the user's, the model's own folder
    (["export", "firmware", "{run}", "--out", "{run}"], "holds the export's source '{run}'"),
    (["export", "firmware", "{run}/policy.onnx", "--out", "{run}"], "holds the export's source"),
    (["export", "firmware", "{run}", "--out", "{tmp}/mine"], "already holds files that no robot-rl firmware export"),
    (["export", "ros2-node", "{run}", "--out", "{run}"], "holds the export's source '{run}'"),
    (["export", "ros2-node", "{run}", "--out", "{tmp}/mine"], "already holds files that no robot-rl ros2-node export"),
    # bench
    (["bench", "--num-envs", "0"], "--num-envs must be in [1, 16777216], got 0"),
    (["bench", "--seconds", "-1"], "--seconds must be in"),
    (["bench", "--device", "cuda:7"], "device 'cuda:7'"),
    (["bench", "--task", "nope"], "unknown task 'nope'"),
    # deploy
    (["deploy", "--params", "{tmp}/nowhere.yaml"], "parameter file '{tmp}/nowhere.yaml' does not exist"),
    (["deploy", "--params", "{tmp}/binary.yaml"], "cannot be read: 'utf-8' codec can't decode"),
    (["deploy", "--params", "{tmp}/typo.yaml"], "policy_node: unknown parameter 'watchdg_s'; did you mean watchdog_s?"),
    (["deploy", "--params", "{tmp}/text.yaml"], "parameter 'watchdog_s' is str '0.1 s'; expected a number"),
    (["deploy", "--params", "{tmp}/twice.yaml"], "key 'seed' is given twice"),
    (["deploy", "--params", "{tmp}/othernode.yaml"], "unknown node 'camera_node'"),
    (
        ["deploy", "--params", "{tmp}/listtype.yaml"],
        "parameter 'safe_command' is list ['a']; expected a non-empty list",
    ),
    (["deploy", "--params", "{tmp}/ok.yaml", "--namespace", "bad ns!"], "namespace 'bad ns!' is not a valid ROS"),
    (["deploy", "--params", "{tmp}/ok.yaml", "--record", "{tmp}/binary.yaml"], "already exists; recordings are never"),
    (["deploy", "--params", "{tmp}/nopolicy.yaml"], "has no 'policy_node' section"),
    (["deploy", "--params", "{tmp}/nopolicy.yaml", "--duration", "0"], "--duration must be in [0.1, 86400]"),
    (["deploy", "--params", "{tmp}/ok.yaml", "--sim-time"], "--sim-time runs on the simulated robot's clock; add"),
    # inspect
    (["inspect", "{tmp}/missing.onnx"], "policy file not found"),
    (["inspect", "{tmp}/binary.yaml"], "is not a valid ONNX model"),
    (["inspect", "{nan}"], "holds non-finite values in 'actor.0.weight'"),
    # top level
    (["fly"], "invalid choice: 'fly'"),
]


@pytest.mark.parametrize(("argv", "fragment"), USER_ERRORS, ids=[" ".join(a[:3]) for a, _ in USER_ERRORS])
def test_every_user_error_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path,
    good_run: Path,
    cartpole_run: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fragment: str,
) -> None:
    import os

    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "nopolicy.yaml").write_text("sim_robot_node:\n  ros__parameters: {seed: 1}\n")
    policy = "policy_node:\n  ros__parameters:\n    model_path: none.onnx\n"
    (tmp_path / "ok.yaml").write_text(policy)
    (tmp_path / "typo.yaml").write_text(policy + "    watchdg_s: 0.1\n")
    (tmp_path / "text.yaml").write_text(policy + "    watchdog_s: 0.1 s\n")
    (tmp_path / "listtype.yaml").write_text(policy + "    safe_command: [a]\n")
    (tmp_path / "othernode.yaml").write_text(policy + "camera_node:\n  ros__parameters: {fps: 30}\n")
    (tmp_path / "twice.yaml").write_text("task: quadrotor-hover\nseed: 1\nnum_envs: 8\nseed: 2\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's own file\n")
    (tmp_path / "readonly").mkdir()
    readonly_run = tmp_path / "readonly_run"
    import shutil

    shutil.copytree(good_run, readonly_run)
    nan_run = _nan_run(good_run, tmp_path / "nan_run")
    # Root ignores permission bits, so read-only folders are simulated where the CLI asks: os.access.
    ro = (str(tmp_path / "readonly"), str(readonly_run))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: str(p) not in ro and real_access(p, mode, **kw))
    names = {"tmp": tmp_path, "run": good_run, "cart": cartpole_run, "nan": nan_run, "readonly_run": readonly_run}
    argv = [a.format(**names) for a in argv]
    before, before_run = snapshot(tmp_path), snapshot(good_run)
    dirs_before = sorted(p for p in tmp_path.rglob("*") if p.is_dir())
    if argv[0] == "train":
        argv += ["--quiet"] + (["--run-root", str(tmp_path / "runs")] if "--run-root" not in argv else [])
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err, err
    assert fragment.format(**names) in err, err
    assert snapshot(tmp_path) == before and snapshot(good_run) == before_run
    assert sorted(p for p in tmp_path.rglob("*") if p.is_dir()) == dirs_before


def test_inspect_prints_the_contract_of_a_policy_and_of_a_run(
    good_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for source in (good_run / "policy.onnx", good_run):
        assert main(["inspect", str(source)]) == 0
        out = capsys.readouterr().out
        assert "task quadrotor-hover" in out and "[18:34]    last_action          4 x 4 steps" in out
        assert "m1_front_right   at [0.0325269, -0.0325269, 0] m, spins ccw seen from above" in out
        assert "kind rpm" in out and "20 ms = 50 Hz" in out


def test_eval_set_evaluates_in_another_world_and_keeps_the_trained_evaluation(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval --set env.KEY=VALUE`` evaluates the trained policy under the changed setting into its own file (named
    after the setting, which it records), and leaves ``eval.yaml`` and the checkpoint's config as they were."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    before = snapshot(run)
    argv = ["eval", str(run), "--episodes", "4", "--set", "env.position_integral_band=0.25"]
    assert main([*argv, "--set", "env.episode_length_s=0.2"]) == 0
    out = capsys.readouterr().out
    assert "another world than the trained one: env.position_integral_band=0.25 env.episode_length_s=0.2" in out
    stem = "eval_set-position_integral_band-0.25_episode_length_s-0.2"
    saved = yaml.safe_load((run / f"{stem}.yaml").read_text())
    assert saved["env_overrides"] == ["env.position_integral_band=0.25", "env.episode_length_s=0.2"]
    assert {"randomization_on", "randomization_off"} <= set(saved)
    assert (run / f"{stem}.png").is_file()
    after = snapshot(run)
    assert {k: v for k, v in after.items() if not k.startswith("eval_set-")} == before


def test_an_edited_config_yaml_is_named_and_ignored(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The config saved with the policy is what loads; a hand edit of ``config.yaml`` is named on stderr, once, as a
    note (the command still succeeds, with the saved config)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    assert PPORun.load(run).config_edits == []
    shown = yaml.safe_load((run / "config.yaml").read_text())
    shown["env"]["episode_length_s"] = 99.0
    shown["ppo"]["learning_rate"] = 1.0
    shown["my_note"] = "tuned"
    shown["x" * 5000] = 1
    (run / "config.yaml").write_text(yaml.safe_dump(shown, sort_keys=False))
    loaded = PPORun.load(run)
    assert loaded.config_edits == ["env.episode_length_s", "ppo.learning_rate", "my_note", "x" * 5000]
    assert loaded.cfg.env.episode_length_s == 0.3  # the saved config (FAST's)
    assert main(["inspect", str(run)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("robot-rl: note: "), err
    assert "saved with the policy at env.episode_length_s, ppo.learning_rate, my_note, " + "x" * 77 + "...;" in err
    assert len(err.replace(str(run), "")) < 400  # a key of 5,000 characters is cut (the run's path is the caller's)


def test_max_time_on_a_resumed_run_is_a_budget_for_this_call(tmp_path: Path) -> None:
    """A run that already trained for a long time is resumed with --max-time: it trains on (here to its iteration
    cap) instead of stopping after one iteration because the budget had been spent by the earlier call."""
    root = tmp_path / "runs"
    assert main(["train", TASK, "--max-iterations", "1", "--run-root", str(root), "--no-export", *FAST]) == 0
    run = only_run_dir(root)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    state["elapsed_s"] = 1000.0  # as after a long first call
    torch.save(state, run / "checkpoint.pt")
    root2 = tmp_path / "resumed"
    argv = ["train", TASK, "--resume", str(run), "--max-iterations", "4", "--max-time", "600"]
    assert main([*argv, "--run-root", str(root2), "--no-export", *FAST]) == 0
    assert read_checkpoint(only_run_dir(root2) / "checkpoint.pt")["iteration"] == 4


def test_inspect_prints_text_from_the_file_with_its_terminal_escapes_defused(
    good_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A contract whose free text (extra) holds terminal escape sequences and a right-to-left override is printed
    with them as visible escapes: a file cannot clear the screen, recolour it or reorder what the integrator reads."""
    import onnx

    from policies.runtime.contract import METADATA_KEY, Contract

    model = onnx.load(str(good_run / "policy.onnx"))
    props = {p.key: p.value for p in model.metadata_props}
    contract = Contract.from_json(props[METADATA_KEY])
    contract.extra["note"] = "\x1b[2J\x1b[31mall checks passed\u202e"
    onnx.helper.set_model_props(model, {METADATA_KEY: contract.to_json()})
    path = tmp_path / "policy.onnx"
    onnx.save(model, str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "note: \\x1b[2J\\x1b[31mall checks passed\\u202e" in out


def test_a_privileged_teacher_behind_the_tank_is_not_evaluated_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An actor that reads the critic's state (a privileged teacher, recorded, never deployed) reads the tank's level
    too: without the tank its input is a value shorter, so that evaluation is skipped and said so, in the summary
    and in ``eval.yaml``, and the run ends as every run does (it crashed after training before)."""
    root = tmp_path / "runs"
    argv = [
        "train", "panda-reach", "--num-envs", "8", "--max-iterations", "1", "--set", "ppo.num_steps=4",
        "--set", "runner.eval_episodes=3", "--set", "runner.eval_interval=0", "--set", "env.passivity.tank_max_j=20",
        "--set", "policy.actor_obs=[critic]", "--run-root", str(root), "--quiet", "--no-export",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    (run,) = (root / "panda-reach").iterdir()
    assert "not evaluated without the tank: there the policy's interface changes (observation 'critic' " in out, out
    summary = yaml.safe_load((run / "eval.yaml").read_text())
    assert "randomization_on" not in summary and summary["skipped"][0].startswith("not evaluated without the tank")
    assert "randomization_on_tank_20J" in summary


def test_a_run_trained_behind_the_tank_reports_it_and_shows_its_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """panda-reach with ``env.passivity``: the summary gives randomisation on and off behind the tank and on without
    it, and behind it with the ROS 2 node's measured command delay in place of whole periods; ``eval.yaml`` keys them
    apart, the contract carries the tank it trained with (start and refill included), and ``episodes.gif`` is
    listed."""
    root = tmp_path / "runs"
    argv = [
        "train", "panda-reach", "--num-envs", "8", "--max-iterations", "1", "--set", "ppo.num_steps=4",
        "--set", "runner.eval_episodes=3", "--set", "runner.eval_interval=0", "--set", "env.passivity.tank_max_j=20",
        "--set", "env.passivity.tank_init_j=20", "--set", "env.passivity.tank_power_w=2",
        "--run-root", str(root), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    (run,) = (root / "panda-reach").iterdir()
    delay = "on, energy tank 20 J, measured command delay 0-12 ms, no whole periods: criterion"
    for line in ("eval, randomisation on, energy tank 20 J:", "randomisation off, energy tank 20 J:", "on: criterion"):
        assert line in out, (line, out)
    assert delay in out, out
    summary = yaml.safe_load((run / "eval.yaml").read_text())
    assert list(summary) == [
        "randomization_on_tank_20J", "randomization_off_tank_20J", "randomization_on",
        "randomization_on_tank_20J_measured_delay",
    ]  # fmt: skip
    assert summary["randomization_on_tank_20J"]["lowest_tank_j"] >= 0.1 - 1e-9
    contract = Contract.load_yaml(run / "contract.yaml")
    assert contract.filter["trained_with_tank_j"] == 20.0 and contract.filter["tank_max_j"] == 20.0
    assert (contract.filter["tank_init_j"], contract.filter["tank_power_w"]) == (20.0, 2.0)
    assert (run / "episodes.gif").is_file() and str(run / "episodes.gif") in out
