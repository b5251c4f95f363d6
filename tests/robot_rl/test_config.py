"""Typed training config: defaults, YAML + ``--set`` overrides, and every bad input refused with a useful message."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
import yaml

import sim
from robot_rl.algorithms.ppo import PPOConfig
from robot_rl.cli import main
from robot_rl.config import PolicyConfig, RunnerConfig, TrainConfig, config_to_yaml, from_plain, load_config
from robot_rl.runner import build_model
from sim.randomization import RandomizationError, RandomizationTerm
from sim.registry import get_task
from sim.tasks.base import BatchedTask
from sim.typed_config import ConfigError
from sim.vec_env import TaskConfigError

TASK = "quadrotor-hover"
QUAD_PARAMS = [
    "action_latency",
    "disturbance_force",
    "inertia",
    "mass",
    "motor_time_constant_down",
    "motor_time_constant_up",
    "thrust_curve_linear",
    "thrust_to_weight",
    "torque_ratio",
]


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def assert_lists(message: str, names: list[str]) -> None:
    """The message lists every valid choice."""
    missing = [n for n in names if n not in message]
    assert not missing, f"message does not list {missing}: {message}"


# ------------------------------------------------------------------------------------------------ defaults
@pytest.mark.parametrize("task", sim.task_names())
def test_defaults_load_for_every_registered_task(task: str) -> None:
    cfg = load_config(task)
    assert cfg.task == task
    assert isinstance(cfg.env, get_task(task).config_cls)
    env = sim.make(task, 2, "cpu", cfg.env)
    try:
        model = build_model(cfg, env)  # the default observation groups exist in every task
        assert model.log_std.numel() == env.num_actions
    finally:
        env.close()


# ------------------------------------------------------------------------------------------- file + --set
CONFIG_FILE = """\
task: quadrotor-hover
seed: 7
num_envs: 64
ppo:
  learning_rate: 1e-3   # YAML 1.1 reads this as a string; the loader turns it into a float
  num_steps: 8
env:
  episode_length_s: 2.0
  randomization:
    - {param: mass, range: [0.9, 1.1]}
    - {param: inertia, range: [0.9, 1.1]}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(CONFIG_FILE)
    return path


def test_yaml_file_applies(config_file: Path) -> None:
    cfg = load_config(TASK, config_file)
    assert (cfg.seed, cfg.num_envs, cfg.ppo.num_steps) == (7, 64, 8)
    assert cfg.ppo.learning_rate == 1e-3 and isinstance(cfg.ppo.learning_rate, float)
    assert cfg.env.episode_length_s == 2.0
    assert [t.param for t in cfg.env.randomization] == ["mass", "inertia"]
    assert cfg.env.randomization[0].range == (0.9, 1.1)


def test_task_is_taken_from_the_file(config_file: Path) -> None:
    assert load_config(None, config_file).task == TASK


def test_overrides_apply_over_the_file(config_file: Path) -> None:
    cfg = load_config(
        TASK,
        config_file,
        [
            "ppo.learning_rate=3e-4",
            "policy.actor_hidden=[32,32]",
            "env.dt=0.02",
            "num_envs=16",
            "runner.max_time_s=12.5",
            "ppo.value_clip=null",
            "env.randomization=[{param: mass, distribution: log_uniform, range: [0.8, 1.25], timing: startup}]",
        ],
    )
    assert cfg.ppo.learning_rate == 3e-4 and isinstance(cfg.ppo.learning_rate, float)
    assert cfg.ppo.num_steps == 8  # the file's value survives an override of a sibling key
    assert cfg.policy.actor_hidden == [32, 32]
    assert cfg.env.dt == 0.02 and cfg.env.episode_length_s == 2.0  # nested keys merge, they do not replace
    assert cfg.num_envs == 16 and cfg.seed == 7
    assert cfg.runner.max_time_s == 12.5 and cfg.ppo.value_clip is None
    # A list is replaced as a whole.
    assert cfg.env.randomization == [RandomizationTerm("mass", "log_uniform", (0.8, 1.25), timing="startup")]


def test_randomization_can_be_emptied() -> None:
    cfg = load_config(TASK, None, ["env.randomization=[]"])
    assert cfg.env.randomization == []
    env = sim.make(TASK, 2, "cpu", cfg.env)
    assert isinstance(env, BatchedTask)
    assert env.randomizer.terms == []


def test_a_randomisation_term_is_changed_or_dropped_by_name() -> None:
    """``env.randomization.<param>.<key>=value`` changes one term of the task's list and keeps the rest in order;
    ``env.randomization.<param>=null`` drops one; over a saved config (``eval --set``, ``--resume``) alike."""
    default = [(t.param, t.range) for t in load_config(TASK, None, []).env.randomization]
    sets = ["env.randomization.mass.range=[1.0, 1.1]", "env.randomization.action_latency=null"]
    cfg = load_config(TASK, None, sets)
    expected = [(n, (1.0, 1.1) if n == "mass" else r) for n, r in default if n != "action_latency"]
    assert [(t.param, t.range) for t in cfg.env.randomization] == expected
    saved = dataclasses.asdict(load_config(TASK, None, []))
    again = load_config(None, None, sets, base=saved, base_name="a saved run")
    assert again.env.randomization == cfg.env.randomization
    whole = load_config(TASK, None, [*sets, "env.randomization=[]"])  # a whole list after them replaces all
    assert whole.env.randomization == []


# ----------------------------------------------------------------------------------------------- bad input
BAD_OVERRIDES = [
    pytest.param(["nope=1"], ["'nope'", *field_names(TrainConfig)], id="unknown-top-level-key"),
    pytest.param(["ppo.learning_rat=1e-3"], ["'ppo.learning_rat'", *field_names(PPOConfig)], id="unknown-ppo-key"),
    pytest.param(["runner.max_iter=3"], ["'runner.max_iter'", *field_names(RunnerConfig)], id="unknown-runner-key"),
    pytest.param(["policy.hidden=[3]"], ["'policy.hidden'", *field_names(PolicyConfig)], id="unknown-policy-key"),
    pytest.param(["env.dtt=0.1"], ["'env.dtt'", "dt", "episode_length_s", "randomization"], id="unknown-env-key"),
    pytest.param(
        ["env.randomization=[{param: mass, rnage: [1, 2]}]"],
        ["'env.randomization[0].rnage'", *field_names(RandomizationTerm)],
        id="unknown-randomization-key",
    ),
    pytest.param(["num_envs=abc"], ["'num_envs' must be an integer", "abc"], id="int-from-string"),
    pytest.param(["num_envs=true"], ["'num_envs' must be an integer", "bool"], id="bool-for-int"),
    pytest.param(["ppo.num_steps=4.5"], ["'ppo.num_steps' must be an integer"], id="float-for-int"),
    pytest.param(["ppo.learning_rate=[1]"], ["'ppo.learning_rate' must be a number", "list"], id="list-for-float"),
    pytest.param(["ppo.learning_rate=abc"], ["'ppo.learning_rate' must be a number", "abc"], id="str-for-float"),
    pytest.param(["runner.stop_on_success=1"], ["'runner.stop_on_success' must be true or false"], id="int-for-bool"),
    pytest.param(["policy.actor_hidden=64"], ["'policy.actor_hidden' must be a list"], id="scalar-for-list"),
    pytest.param(["policy.actor_hidden=[64, x]"], ["'policy.actor_hidden[1]' must be an integer"], id="list-item"),
    pytest.param(["ppo=3"], ["'ppo' must be a mapping"], id="scalar-for-section"),
    pytest.param(["env.reward_scales.alive=abc"], ["'env.reward_scales.alive' must be a number"], id="dict-value"),
    pytest.param(
        ["policy.activation=sigmoid"],
        ["'policy.activation' must be one of", "'elu'", "'tanh'", "'relu'", "'silu'", "'sigmoid'"],
        id="literal",
    ),
    pytest.param(["ppo.schedule=linear"], ["'ppo.schedule'", "'adaptive'", "'fixed'"], id="literal-ppo"),
    pytest.param(
        ["env.randomization=[{param: mass, distribution: normal}]"],
        ["'env.randomization[0].distribution' must be one of", "'uniform'", "'log_uniform'", "'gaussian'"],
        id="literal-nested-in-list",
    ),
    pytest.param(
        ["env.randomization=[{param: mass, range: [1, 2, 3]}]"],
        ["'env.randomization[0].range' must have 2 entries"],
        id="tuple-length",
    ),
    pytest.param(
        ["env.randomization.wind.range=[0, 1]"],
        ["'env.randomization' has no entry 'wind'", "its entries: mass, inertia"],
        id="unknown-randomization-name",
    ),
    pytest.param(
        ["env.randomization.mass=3"],
        ["'env.randomization.mass' must be a mapping of the entry's keys, or null to drop it"],
        id="randomization-name-scalar",
    ),
    pytest.param(
        ["env.randomization.mass.rnage=[1, 2]"], ["'env.randomization[0].rnage'", "range"], id="randomization-name-key"
    ),
    pytest.param(
        ["policy.actor_hidden.first=3"], ["'policy.actor_hidden' is a list; set it whole"], id="unnamed-list-entry"
    ),
    pytest.param(["ppo.num_steps=0"], ["ppo.num_steps must be >= 1", "0"], id="ppo-num-steps-0"),
    pytest.param(["ppo.num_minibatches=0"], ["ppo.num_minibatches must be >= 1"], id="ppo-minibatches-0"),
    pytest.param(["ppo.gamma=1.5"], ["ppo.gamma"], id="ppo-gamma"),
    pytest.param(["ppo.learning_rate=-1e-3"], ["ppo.learning_rate must be finite and > 0"], id="ppo-negative-lr"),
    pytest.param(["ppo.max_std=0"], ["ppo.max_std must be finite and > 0"], id="ppo-max-std-0"),
    pytest.param(["ppo.max_std=0.005"], ["ppo.max_std (0.005) must be >= ppo.min_std (0.01)"], id="ppo-max-below-min"),
    pytest.param(
        ["env.position_integral_band=-0.1"], ["env.position_integral_band must be >= 0, got -0.1"], id="hover-band"
    ),
    pytest.param(
        ["runner.quality_confirm_episodes=-1"], ["runner.quality_confirm_episodes must be >= 0"], id="confirm-episodes"
    ),
    pytest.param(
        ["runner.selection_corner_episodes=-2"], ["runner.selection_corner_episodes must be >= 0", "-2"], id="corners"
    ),
    pytest.param(
        ["runner.selection_corner_episodes=99999999"],
        ["runner.selection_corner_episodes must be <= 16777216", "99999999"],
        id="corners-too-many",
    ),
    pytest.param(
        ["runner.quality_confirm_episodes=99999999"],
        ["runner.quality_confirm_episodes must be <= 16777216"],
        id="confirm-episodes-too-many",
    ),
    pytest.param(["num_envs=0"], ["num_envs must be in [1, 16777216], got 0"], id="num-envs-0"),
    pytest.param(["ppo.learning_rate"], ["'ppo.learning_rate'", "key.subkey=value"], id="override-without-equals"),
    pytest.param(["=3"], ["key.subkey=value"], id="override-without-key"),
    pytest.param(["policy.actor_hidden=[1, 2"], ["'policy.actor_hidden=[1, 2'", "not valid YAML"], id="bad-yaml-value"),
    pytest.param(["device=foo"], ["device 'foo'", "cpu", "cuda"], id="unknown-device"),
    pytest.param(["device=mps"], ["device 'mps' is not supported", "cpu", "cuda"], id="unsupported-device"),
]


@pytest.mark.parametrize(("overrides", "fragments"), BAD_OVERRIDES)
def test_bad_override_is_refused_with_message(overrides: list[str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TASK, None, overrides)
    assert_lists(str(info.value), fragments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available on this machine")
def test_cuda_without_cuda_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"device 'cuda'.*CUDA is not available"):
        load_config(TASK, None, ["device=cuda"])


def test_unknown_task_lists_registered_tasks() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("quadrotor-hoover")
    assert_lists(str(info.value), ["unknown task 'quadrotor-hoover'", "registered tasks", *sim.task_names()])


def test_config_file_for_another_task_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("task: cartpole-balance\nnum_envs: 8\n")
    with pytest.raises(ConfigError, match=r"is for task 'cartpole-balance', not 'quadrotor-hover'"):
        load_config(TASK, path)


def test_config_file_without_task_and_no_task_given(tmp_path: Path) -> None:
    path = tmp_path / "notask.yaml"
    path.write_text("num_envs: 8\n")
    with pytest.raises(ConfigError, match="names no task"):
        load_config(None, path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(None, "does not exist", id="missing"),
        pytest.param("ppo: [1, 2\n", "is not valid YAML", id="invalid-yaml"),
        pytest.param("- 1\n- 2\n", "must hold a mapping", id="not-a-mapping"),
    ],
)
def test_bad_config_file_is_named(tmp_path: Path, text: str | None, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(TASK, path)
    assert f"config file '{path}' {fragment}" in str(info.value)


def test_bad_key_in_config_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("ppo:\n  learning_rat: 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_config(TASK, path)
    assert_lists(str(info.value), ["unknown config key 'ppo.learning_rat'", *field_names(PPOConfig)])


# ----------------------------------------------------------------------- randomisation refused at env build
BAD_ENV = [
    pytest.param(
        "env.randomization=[{param: mass, range: [-1, 1], operation: scale}]",
        RandomizationError,
        ["randomization[0] (mass)", "must stay above 0"],
        id="negative-mass",
    ),
    pytest.param(
        "env.randomization=[{param: wind, range: [0, 1]}]",
        RandomizationError,
        ["parameter 'wind'", "supported parameters", *QUAD_PARAMS],
        id="unknown-param",
    ),
    pytest.param(
        "env.randomization=[{param: disturbance_force, distribution: gaussian, range: [0, 0.01], operation: add}]",
        RandomizationError,
        ["disturbance_force", "gaussian term needs 'clip"],
        id="gaussian-without-clip",
    ),
    pytest.param(
        "env.randomization=[{param: inertia, range: [0.2, 3.0], per_element: true}]",
        RandomizationError,
        ["(inertia)", "I_a + I_b >= I_c"],
        id="unphysical-inertia",
    ),
    pytest.param(
        "env.randomization=[{param: mass, range: [1.2, 0.9]}]",
        RandomizationError,
        ["(mass)", "range low 1.2 exceeds high 0.9"],
        id="reversed-range",
    ),
    pytest.param(
        "env.randomization=[{param: mass, distribution: log_uniform, range: [0, 2]}]",
        RandomizationError,
        ["(mass)", "log_uniform needs a positive range"],
        id="log-uniform-zero",
    ),
    pytest.param(
        "env.randomization=[{param: mass, range: [0.9, 1.1], timing: interval}]",
        RandomizationError,
        ["(mass)", "interval_s > 0"],
        id="interval-without-period",
    ),
    pytest.param(
        "env.reward_scales.nope=1.0",
        TaskConfigError,
        ["reward_scales", "'nope'", "alive", "position", "crash"],
        id="unknown-reward-term",
    ),
    pytest.param(
        "env.noise.std.gps=0.1",
        TaskConfigError,
        ["noise.std", "'gps'", "pos_w", "ang_vel_b"],
        id="unknown-noise-signal",
    ),
]


BAD_ENV += [
    pytest.param("env.robot.max_rpm=.nan", ConfigError, ["robot.max_rpm must be finite and positive"], id="nan-rpm"),
    pytest.param("env.robot.mass=-0.03", ConfigError, ["robot.mass must be finite and positive"], id="neg-mass"),
    pytest.param("env.robot.thrust_to_weight=0.9", ConfigError, ["thrust_to_weight must exceed 1"], id="tw-below-1"),
    pytest.param("env.robot.thrust_to_weight=0", ConfigError, ["thrust_to_weight must be finite and pos"], id="tw-0"),
    pytest.param("env.robot.inertia=[1e-5, 1e-5, 3e-5]", ConfigError, ["triangle inequality"], id="inertia"),
    pytest.param("env.robot.inertia=[1e-5, .inf, 3e-5]", ConfigError, ["robot.inertia must be finite"], id="inf-I"),
    pytest.param("env.reward_scales.position=.nan", ConfigError, ["reward_scales.position must be finite"], id="nan-r"),
    pytest.param("env.noise.std.pos_w=.nan", ConfigError, ["noise.std.pos_w must be finite and >= 0"], id="nan-n"),
    pytest.param("env.noise.bias_std.pos_w=-1", ConfigError, ["noise.bias_std.pos_w must be finite"], id="neg-bias"),
    pytest.param("env.dt=.nan", ConfigError, ["env.dt must be finite and positive"], id="nan-dt"),
    pytest.param("env.init_lin_vel=.inf", ConfigError, ["env.init_lin_vel must be finite"], id="inf-init"),
    pytest.param(
        "env.randomization=[{param: mass, range: [.nan, 1]}]", ConfigError, ["range must be finite"], id="nan-range"
    ),
    pytest.param(
        "env.randomization=[{param: disturbance_force, distribution: gaussian, range: [0, 0.1], clip: [-1, .inf],"
        " operation: add}]",
        ConfigError,
        ["clip must be finite"],
        id="inf-clip",
    ),
    pytest.param(
        "env.robot.thrust_to_weight=1.3",
        ConfigError,
        ["thrust_to_weight 1.1", "below 1.25 x (weight + disturbance)", "narrow the ranges"],
        id="cannot-hover-at-a-corner",
    ),
    pytest.param(
        "env.randomization=[{param: disturbance_force, range: [-0.2, 0.2], operation: add, per_element: true}]",
        ConfigError,
        ["disturbance 0.346 N", "below 1.25 x"],
        id="disturbance-beyond-thrust",
    ),
]


@pytest.mark.parametrize(("override", "error", "fragments"), BAD_ENV)
def test_invalid_env_config_is_refused_before_any_simulation(
    override: str, error: type[Exception], fragments: list[str]
) -> None:
    """Values are judged when the config is loaded (names of rewards and signals when the env is built)."""
    with pytest.raises((ConfigError, error)) as info:
        cfg = load_config(TASK, None, [override])
        sim.make(TASK, 4, "cpu", cfg.env)
    assert_lists(str(info.value), fragments)


# ------------------------------------------------------------------ CLI: refused before anything is written
CLI_BAD = [
    pytest.param(["--set", "ppo.learning_rat=1e-3"], "unknown config key 'ppo.learning_rat'", id="unknown-key"),
    pytest.param(["--set", "ppo.num_steps=abc"], "'ppo.num_steps' must be an integer", id="wrong-type"),
    pytest.param(["--set", "policy.activation=sigmoid"], "'policy.activation' must be one of", id="literal"),
    pytest.param(["--set", "ppo.num_steps=0"], "ppo.num_steps must be >= 1", id="ppo-value"),
    pytest.param(["--set", "ppo.learning_rate"], "key.subkey=value", id="no-equals"),
    pytest.param(["--device", "foo"], "device 'foo'", id="device"),
    pytest.param(
        ["--set", "env.randomization=[{param: mass, range: [-1, 1], operation: scale}]"],
        "randomization[0] (mass)",
        id="randomization",
    ),
    pytest.param(["--set", "env.randomization=[{param: wind}]"], "supported parameters", id="randomization-param"),
    pytest.param(["--config", "does-not-exist.yaml"], "does-not-exist.yaml' does not exist", id="missing-file"),
]


@pytest.mark.parametrize(("args", "fragment"), CLI_BAD)
def test_cli_refuses_bad_config_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    root = tmp_path / "runs"
    argv = ["train", TASK, "--num-envs", "8", "--max-iterations", "1", "--run-root", str(root), "--quiet", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("robot-rl: error: ") and fragment in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not root.exists()  # no run folder, no config.yaml


# ------------------------------------------------------------------------------------------- round trip
ROUND_TRIP_OVERRIDES = [
    "seed=3",
    "ppo.learning_rate=3e-4",
    "ppo.value_clip=null",
    "runner.max_time_s=30.5",
    "policy.critic_obs=[policy, critic]",
    "env.randomization=[{param: disturbance_force, distribution: gaussian, range: [0.0, 0.01], "
    "clip: [-0.02, 0.02], operation: add, timing: interval, interval_s: 0.5, per_element: true}]",
]


@pytest.mark.parametrize("task", sim.task_names())
def test_config_round_trips_through_yaml(task: str) -> None:
    cfg = load_config(task)
    assert from_plain(yaml.safe_load(config_to_yaml(cfg))) == cfg


def test_config_with_overrides_round_trips_through_yaml() -> None:
    cfg = load_config(TASK, None, ROUND_TRIP_OVERRIDES)
    text = config_to_yaml(cfg)
    again = from_plain(yaml.safe_load(text))
    assert again == cfg
    assert again.env.randomization[0].clip == (-0.02, 0.02)
    assert config_to_yaml(again) == text
    assert re.search(r"^task: quadrotor-hover$", text, re.MULTILINE)


def test_cli_set_overrides_win_over_shorthands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import robot_rl.config

    seen: list[TrainConfig] = []
    real = robot_rl.config.load_config

    def capture(*args: object, **kwargs: object) -> TrainConfig:
        seen.append(real(*args, **kwargs))  # type: ignore[arg-type]
        raise ConfigError("stop here")  # no training

    monkeypatch.setattr(robot_rl.config, "load_config", capture)
    argv = ["train", TASK, "--num-envs", "8", "--seed", "1", "--set", "num_envs=16", "--set", "seed=2"]
    assert main([*argv, "--run-root", str(tmp_path), "--quiet"]) == 2
    assert (seen[0].num_envs, seen[0].seed) == (16, 2)


OUT_OF_RANGE = [
    pytest.param(
        ["runner.save_interval=0"],
        "runner.save_interval",
        id="save-interval-0",
    ),
    pytest.param(
        ["runner.eval_episodes=0"],
        "runner.eval_episodes",
        id="eval-episodes-0",
    ),
    pytest.param(
        ["runner.max_iterations=0"],
        "runner.max_iterations",
        id="max-iterations-0",
    ),
    pytest.param(
        ["runner.eval_interval=-1"],
        "runner.eval_interval",
        id="eval-interval-negative",
    ),
    pytest.param(
        ["runner.eval_gate=1.5"],
        "runner.eval_gate",
        id="eval-gate-above-1",
    ),
    pytest.param(
        ["policy.init_noise_std=0"],
        "policy.init_noise_std",
        id="init-noise-std-0",
    ),
    pytest.param(
        ["ppo.clip_param=-0.2"],
        "ppo.clip_param",
        id="clip-param-negative",
    ),
    pytest.param(
        ["ppo.learning_rate=nan"],
        "ppo.learning_rate",
        id="learning-rate-nan",
    ),
    pytest.param(
        ["ppo.learning_rate=inf"],
        "ppo.learning_rate",
        id="learning-rate-inf",
    ),
    pytest.param(
        ["num_envs=4", "ppo.num_steps=2", "ppo.num_minibatches=16"],
        "ppo.num_minibatches",
        id="more-minibatches-than-samples",
    ),
]


@pytest.mark.parametrize(("overrides", "key"), OUT_OF_RANGE)
def test_out_of_range_values_are_refused_at_load_time(overrides: list[str], key: str) -> None:
    try:
        load_config(TASK, None, overrides)
    except ConfigError as exc:
        assert key in str(exc), str(exc)
    else:
        pytest.fail(f"{overrides} was accepted")
