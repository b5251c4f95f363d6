"""Panda reach learning, its sim-to-sim evaluation in PyBullet, robustness sweeps and corners of the randomisation
(``robot-rl eval --sim`` / ``--sweep`` / ``--corner``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from robot_rl.evaluate import EvalResult
from robot_rl.runs.ppo import PPORun
from robot_rl.transfer.corners import Corner, CornerError, pin_terms, randomised_params
from robot_rl.transfer.harness import TransferError, plug, run_episodes
from robot_rl.transfer.sweep import Sweep, SweepError, failure_factors, sweep_terms, training_range
from sim.randomization import RandomizationTerm, edge_value
from sim.tasks.panda.reach import PandaReach
from tests.conftest import robot_rl


@pytest.mark.slow
def test_ppo_learns_panda_reach_and_the_policy_transfers_to_pybullet(trained_reach: Any) -> None:
    """PPO reaches >= 90 % success with randomisation on within the budget of ``tests/conftest.py``; the exported
    policy, run through policies.runtime on pybullet_data's own Panda URDF in PyBullet, is scored by the same
    criterion (the measured rates are in docs/benchmarks.md; here the transfer must at least clearly work)."""
    before, after = trained_reach.before, trained_reach.after
    assert before["success_rate"] < 0.05
    assert after["criterion_met"], after
    result = run_episodes(trained_reach.onnx, "pybullet", 24, 0, True, PandaReach.criterion, progress=False)
    assert set(result.episodes) == {"success", "final_position_error", "final_orientation_error"}
    assert len(result.episodes["success"]) == 24
    assert result.figures["final_position_error_m"] < 0.1  # untrained: ~0.3 m
    assert result.episodes["success"].mean() >= 0.25


def test_cli_sim_to_sim_and_sweep_on_a_trained_run(trained_reach: Any) -> None:
    out = robot_rl("eval", trained_reach.run_dir, "--sim", "pybullet", "--episodes", "4")
    assert out.returncode == 0, out.stderr
    assert "pybullet, randomisation on : criterion" in out.stdout
    summary = yaml.safe_load((trained_reach.run_dir / "sim2sim_pybullet.yaml").read_text())
    assert summary["randomization_on"]["episodes"] == 4 and summary["randomization_on"]["simulator"] == "pybullet"

    out = robot_rl("eval", trained_reach.run_dir, "--sweep", "link_mass=0.5:1.5", "--points", "3", "--episodes", "8")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((trained_reach.run_dir / "sweep_link_mass.csv").open()))
    assert [float(r["value"]) for r in rows] == [0.5, 1.0, 1.5]
    assert {"success_rate", "final_position_error_m", "criterion_met"} <= set(rows[0])
    assert (trained_reach.run_dir / "sweep_link_mass.png").stat().st_size > 10_000

    out = robot_rl("eval", trained_reach.run_dir, "--sweep", "external_force=0.5:1.5", "--episodes", "2")
    assert out.returncode == 2 and "'external_force' is zero at nominal" in out.stderr, out.stderr


def test_sim_to_sim_reads_the_training_simulators_success_in_the_runs_setting(tmp_path: Path) -> None:
    """The MuJoCo figure a PyBullet success is compared with comes from ``eval.yaml`` in the run's own tank setting,
    and, for the measured command delay PyBullet's Panda draws, from that setting's ``measured_delay`` entry."""
    from types import SimpleNamespace

    from robot_rl.cli.evaluate import _training_engine_success

    saved = {
        "randomization_on_tank_40J": {"success_rate": 0.68},
        "randomization_off_tank_40J": {"success_rate": 1.0},
        "randomization_on": {"success_rate": 0.53},
        "randomization_on_tank_40J_measured_delay": {"success_rate": 0.91},
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(saved))
    env = SimpleNamespace(passivity=SimpleNamespace(tank_max_j=40.0))
    run = SimpleNamespace(run_dir=tmp_path, cfg=SimpleNamespace(env=env))
    assert _training_engine_success(run) == {True: 0.68, False: 1.0}
    assert _training_engine_success(run, "measured_delay") == {True: 0.91}
    run.cfg.env.passivity.tank_max_j = None
    assert _training_engine_success(run, "measured_delay") == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "link_mass"], "--sweep must look like PARAM=LO:HI"),
        (["--sweep", "link_mass=1.5:0.5"], "need 0 < LO < HI"),
        (["--sweep", "link_mass=a:b"], "LO and HI must be numbers"),
        (["--sweep", "link_mass=0.5:1.5", "--points", "1"], "--points must be in [2, 101]"),
        (
            ["--sweep", "link_mass=0.5:1.5", "--sim", "pybullet"],
            "--sim, --sweep, --corner, --control-rate and --trajectory are separate",
        ),
        (["--corner", "mass=top"], "--corner must look like PARAM=lo|hi[,PARAM=lo|hi...] or 'worst'"),
        (["--corner", "mass=hi,,tau=lo"], "--corner must look like PARAM=lo|hi"),
        (["--corner", "mass=hi,mass=lo"], "--corner names 'mass' twice"),
        (["--corner", "mass=hi", "--corner-depth", "4"], "--corner-depth applies to --corner worst"),
        (["--corner", "worst", "--corner-depth", "1"], "--corner-depth must be in [2, 8]"),
        (["--corner", "mass=hi", "--corner-beam", "2"], "--corner-beam applies to --corner worst"),
        (["--corner", "worst", "--corner-beam", "0"], "--corner-beam must be in [1, 8]"),
        (["--corner", "worst", "--sweep", "mass=0.5:1.5"], "--sim, --sweep, --corner, --control-rate"),
        (["--sweep", "link_mass=0.5:1.5", "--sweep-others", "x"], "--sweep-others must be one of randomised, nominal"),
        (["--sweep-others", "nominal"], "--sweep-others applies to a --sweep"),
        (["--sim", "gazebo"], "invalid choice: 'gazebo'"),
    ],
)
def test_cli_bad_sweep_and_sim_arguments_fail_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    out = robot_rl("eval", tmp_path, *args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_hover_sweep_past_the_training_range_and_an_unknown_parameter(trained_hover: Any) -> None:
    out = robot_rl("eval", trained_hover.run_dir, "--sweep", "thrust_to_weight=0.6:1.4", "--points", "3",
                   "--episodes", "16")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((trained_hover.run_dir / "sweep_thrust_to_weight.csv").open()))
    assert [float(r["value"]) for r in rows] == pytest.approx([0.6, 1.0, 1.4])
    assert {"crash_free_rate", "tail_position_error_m", "criterion_met", "failures_go_with"} <= set(rows[0])
    # nominal thrust, inside the range, the other parameters randomised: the fixture's policy is crash-free in 99.6 %
    # of 256 such episodes, so one crash in 16 happens now and then; too few failures to name a parameter
    assert float(rows[1]["crash_free_rate"]) >= 15 / 16
    assert rows[1]["failures_go_with"] == ""
    out = robot_rl("eval", trained_hover.run_dir, "--sweep", "mass=0.7:1.5", "--points", "2", "--episodes", "8",
                   "--sweep-others", "nominal")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((trained_hover.run_dir / "sweep_mass_others-nominal.csv").open()))
    assert [float(r["value"]) for r in rows] == pytest.approx([0.7, 1.5])
    assert (trained_hover.run_dir / "sweep_mass_others-nominal.png").is_file()
    out = robot_rl("eval", trained_hover.run_dir, "--sweep", "link_mass=0.5:1.5", "--episodes", "2")
    assert out.returncode == 2
    assert "task 'quadrotor-hover' has no physical parameter 'link_mass'; sweepable: " in out.stderr


def test_hover_corners_of_the_randomisation(trained_hover: Any) -> None:
    """``--corner worst`` evaluates every randomised parameter at both edges, then adds to the worst of them the
    parameter and edge that make it worst together; ``--corner P=EDGE,...`` one corner (a parameter the run did not
    randomise: the test below)."""
    run = trained_hover.run_dir
    out = robot_rl("eval", run, "--corner", "worst", "--corner-depth", "2", "--episodes", "8")
    assert out.returncode == 0, out.stderr
    saved = yaml.safe_load((run / "corners.yaml").read_text())
    params = randomised_params(list(PPORun.load(run).cfg.env.randomization))  # the fixture's folder has no config.yaml
    rows = saved["rows"]
    n = len(params)
    assert saved["episodes"] == 8 and len(rows) == 1 + 2 * n + 2 * (n - 1)
    assert rows[0]["corner"] == "as trained" and rows[1]["corner"] == f"{params[0]}=lo"
    singles, pairs = rows[1 : 1 + 2 * n], rows[1 + 2 * n :]
    first = min(singles, key=lambda r: r["score"])["corner"]
    assert all(r["corner"].startswith(first + ",") for r in pairs)
    assert {"success_rate", "crash_free_rate", "tail_position_error_m", "criterion_met", "score"} <= set(rows[0])
    worst = min(rows, key=lambda r: r["score"])["corner"]
    assert f"worst setting found: {worst} " in out.stdout and (run / "corners.png").stat().st_size > 10_000
    out = robot_rl("eval", run, "--corner", "mass=hi,action_latency=hi", "--episodes", "8")
    assert out.returncode == 0, out.stderr
    one = yaml.safe_load((run / "corner_mass-hi_action_latency-hi.yaml").read_text())
    assert one["corner"] == "mass=hi,action_latency=hi" and one["episodes"] == 8


def test_a_beam_finds_the_worst_corner_the_greedy_search_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two parameters that do little alone and much together: the greedy search grows the worst single edge and
    misses them; a beam of 3 grows the three worst single edges, finds the pair, and evaluates it once although two
    frontier corners reach it."""
    import robot_rl.transfer.corners as corners

    terms = [RandomizationTerm(p, "uniform", (0.9, 1.1), "scale") for p in ("mass", "inertia", "thrust_to_weight")]
    run = type("Run", (), {"cfg": type("Cfg", (), {"env": type("Env", (), {"randomization": terms})})})()

    def edges(text: str) -> frozenset[tuple[str, str]]:
        return frozenset(Corner.parse(text).edges)

    scores = {edges(c): v for c, v in (("mass=lo", -0.3), ("inertia=hi", -0.2), ("thrust_to_weight=hi", -0.2),
                                       ("inertia=hi,thrust_to_weight=hi", -0.9))}  # fmt: skip

    def fake(_run: Any, corner: Corner, episodes: int) -> EvalResult:
        score = scores.get(frozenset(corner.edges), -0.1)
        episodes_ = {"return": np.zeros(episodes), "success": np.full(episodes, score > -0.5)}
        return EvalResult(episodes_, met=score > -0.5, figures={}, score=score)

    monkeypatch.setattr(corners, "evaluate_corner", fake)
    greedy = corners.search_worst(run, 4, depth=2)  # type: ignore[arg-type]
    assert len(greedy) == 1 + 6 + 4 and min(r["score"] for r in greedy) == -0.3
    beam = corners.search_worst(run, 4, depth=2, beam=3)  # type: ignore[arg-type]
    names = [str(r["corner"]) for r in beam]
    assert len(names) == len(set(names)) == 1 + 6 + 4 + 3 + 2  # three frontiers of 4 pairs; 3 pairs reached twice
    assert edges(str(min(beam, key=lambda r: r["score"])["corner"])) == edges("inertia=hi,thrust_to_weight=hi")


def test_corner_edges_are_the_extreme_draws_of_each_term() -> None:
    """The high edge of a uniform term is its largest draw (below ``hi``: a latency of [0, 2) periods floors to
    1); a gaussian's edges are its clip; every term of a pinned parameter is pinned, the others are kept."""
    latency = RandomizationTerm("action_latency", "uniform", (0.0, 2.0), "add")
    mass = RandomizationTerm("mass", "uniform", (0.95, 1.3), "scale")
    wind = RandomizationTerm("disturbance_force", "gaussian", (0.0, 0.005), "add", clip=(-0.015, 0.015),
                             per_element=True)  # fmt: skip
    fixed = RandomizationTerm("gravity", "uniform", (1.0, 1.0))
    assert edge_value(latency, "lo") == 0.0 and math.floor(edge_value(latency, "hi")) == 1
    assert edge_value(mass, "hi") == pytest.approx(1.3) and edge_value(mass, "hi") < 1.3
    assert edge_value(wind, "hi") == 0.015 and edge_value(wind, "lo") == -0.015
    assert randomised_params([mass, fixed, latency, wind, mass]) == ["mass", "action_latency", "disturbance_force"]
    pinned = pin_terms([mass, latency, wind], Corner.parse("disturbance_force=lo,mass=hi"))
    assert pinned[1] == latency
    assert pinned[0].range[0] == pinned[0].range[1] == edge_value(mass, "hi") and pinned[0].operation == "scale"
    assert pinned[2].distribution == "uniform" and pinned[2].clip is None and pinned[2].per_element
    assert pinned[2].range == (-0.015, -0.015)
    with pytest.raises(CornerError, match="'gravity' was not randomised over a range in this run; randomised: mass"):
        pin_terms([mass, fixed], Corner.parse("gravity=hi"))
    assert Corner.parse(" mass=hi, action_latency=lo").stem == "corner_mass-hi_action_latency-lo"
    many = Corner(tuple((f"parameter_number_{i}", "hi") for i in range(12)))
    assert len(many.stem) < 30 and many.stem.startswith("corner_")


@pytest.mark.slow
def test_exported_hover_policy_meets_the_criterion_in_pybullet(trained_hover: Any) -> None:
    """The exported hover policy flies a Crazyflie rebuilt in PyBullet from the contract's airframe alone (Bullet's
    integrator, rotor forces at the rotor positions, rotor drag the training model lacks), with parameters drawn
    across the contract's training ranges, sensor noise and latency, and meets the hover criterion."""
    from sim.tasks.quadrotor.hover import QuadrotorHover

    result = run_episodes(trained_hover.onnx, "pybullet", 24, 1, True, QuadrotorHover.criterion, progress=False)
    assert result.met, result.figures
    out = robot_rl("eval", trained_hover.run_dir, "--sim", "pybullet", "--episodes", "4")
    assert out.returncode == 0, out.stderr
    assert "pybullet, randomisation on : criterion" in out.stdout
    summary = yaml.safe_load((trained_hover.run_dir / "sim2sim_pybullet.yaml").read_text())
    assert summary["randomization_off"]["episodes"] == 4


def test_plug_errors_name_what_exists() -> None:
    with pytest.raises(TransferError, match="unknown simulator 'ode'; choose one of: pybullet"):
        plug("ode", "panda-reach")
    have = "panda-lift, panda-push, panda-reach, quadrotor-hover, quadruped-velocity"
    exists = rf"no pybullet model of task 'cartpole-balance' \(sim-to-sim exists for: {have}\)"
    with pytest.raises(TransferError, match=exists):
        plug("pybullet", "cartpole-balance")


def test_sweep_parsing_and_training_range() -> None:
    sweep = Sweep.parse("link_mass=0.5:1.5", 5)
    np.testing.assert_allclose(sweep.values(), [0.5, 0.75, 1.0, 1.25, 1.5])
    with pytest.raises(SweepError):
        Sweep.parse("=0.5:1.5", 5)
    terms = [RandomizationTerm("link_mass", "uniform", (0.9, 1.1), "scale"), RandomizationTerm("gravity", "uniform")]
    assert training_range(terms, "link_mass") == (0.9, 1.1)
    assert training_range(terms, "com_offset") is None


def test_sweep_others_randomised_or_nominal() -> None:
    """``nominal`` drops every other physical term and keeps the timing (latency); the swept term is pinned."""
    terms = [
        RandomizationTerm("mass", "uniform", (0.95, 1.3), "scale"),
        RandomizationTerm("thrust_to_weight", "uniform", (0.85, 1.15), "scale"),
        RandomizationTerm("action_latency", "uniform", (0.0, 2.0), "add"),
    ]
    randomised = sweep_terms(terms, Sweep.parse("mass=0.5:2", 3), 0.7)
    assert [t.param for t in randomised] == ["thrust_to_weight", "action_latency", "mass"]
    assert randomised[-1].range == (0.7, 0.7) and randomised[-1].operation == "scale"
    nominal = Sweep.parse("mass=0.5:2", 3, "nominal")
    assert [t.param for t in sweep_terms(terms, nominal, 1.6)] == ["action_latency", "mass"]
    assert nominal.stem == "sweep_mass_others-nominal" and Sweep.parse("mass=0.5:2", 3).stem == "sweep_mass"
    with pytest.raises(SweepError, match="--sweep-others must be one of randomised, nominal, got 'none'"):
        Sweep.parse("mass=0.5:2", 3, "none")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"low": [2], "high": [0]}, r"training_ranges\.action_latency: low \[2\.0\] exceeds high \[0\.0\]"),
        ({"low": [0]}, r"training_ranges\.action_latency needs 'low' and 'high'"),
        ({"low": [0, 1], "high": [1]}, r"action_latency: low has 2 values, high 1"),
        ({"low": [], "high": []}, r"action_latency: low has 0 values, high 0 \(one or more each\)"),
        ({"low": ["x"], "high": [1]}, r"action_latency\.low\[0\] must be a number"),
        ({"low": [float("nan")], "high": [1]}, r"action_latency\.low\[0\] must be finite"),
    ],
)
def test_a_hand_edited_training_range_is_refused_by_name(entry: dict[str, Any], message: str) -> None:
    """Refused when the contract is read (policy file, sim-to-sim plug, ROS node), before any simulator draws."""
    import torch

    import sim
    from policies.runtime.contract import Contract, ContractError

    env = sim.make("quadrotor-hover", 1, torch.device("cpu"))
    good = env.contract(["policy"]).to_dict()
    env.close()
    Contract.from_dict(good)
    good["extra"]["training_ranges"]["action_latency"] = entry
    with pytest.raises(ContractError, match=message):
        Contract.from_dict(good)


def test_failure_factors_name_the_parameters_the_failures_go_with() -> None:
    """Crashes that come with slow rotors and latency name those two, strongest first; a constant (swept) parameter
    and one unrelated to the crashes are not named; too few failures name nothing."""
    rng = np.random.default_rng(0)
    n = 400
    tau = rng.uniform(0.02, 0.16, (n, 1))
    latency = rng.uniform(0.0, 2.0, (n, 1))
    crashed = (tau[:, 0] > 0.13) & (latency[:, 0] > 1.0)
    params = {
        "mass": np.full((n, 1), 0.0189),
        "inertia": rng.uniform(0.7, 1.2, (n, 3)),
        "motor_time_constant_down": tau,
        "action_latency": latency,
    }
    result = EvalResult({"crashed": crashed.astype(float), "success": (~crashed).astype(float)}, False, {},
                        start_params=params)  # fmt: skip
    factors = failure_factors(result)
    assert [name for name, _, _ in factors] == ["motor_time_constant_down", "action_latency"]
    _, failed_mean, all_mean = factors[0]
    assert failed_mean == pytest.approx(tau[crashed].mean()) and all_mean == pytest.approx(tau.mean())
    few = crashed & (np.cumsum(crashed) <= 4)
    assert failure_factors(EvalResult({"crashed": few.astype(float)}, False, {}, start_params=params)) == []
    # tasks without crashes: failures are the unsuccessful episodes
    assert failure_factors(EvalResult({"success": (~crashed).astype(float)}, False, {}, start_params=params))
