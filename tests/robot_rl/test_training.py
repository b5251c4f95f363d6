"""The on-policy runner: seeded determinism, checkpoints and resume, Ctrl-C, asymmetric observation groups."""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import sim
from robot_rl.algorithms.ppo import PPO
from robot_rl.checkpoint import CheckpointError, load_checkpoint, read_checkpoint
from robot_rl.config import TrainConfig, load_config
from robot_rl.evaluate import CONFIRM_SEED_OFFSET, EVAL_SEED_OFFSET, SELECTION_SEED_OFFSET, EvalResult, pick
from robot_rl.logger import TrainingLogger
from robot_rl.runner import OnPolicyRunner, TrainResult, build_model
from robot_rl.runs.ppo import PPORun
from sim.randomization import edge_value
from sim.typed_config import ConfigError

MakeCfg = Callable[..., TrainConfig]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train(cfg: TrainConfig, run_dir: Path, resume: Path | None = None) -> tuple[OnPolicyRunner, TrainResult]:
    run_dir.mkdir(parents=True, exist_ok=True)
    runner = OnPolicyRunner(cfg, run_dir, resume=resume, quiet=True)
    return runner, runner.train()


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def without_timing(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


def leftovers(run_dir: Path) -> list[Path]:
    """Temporary files of atomic writes (``.<name>.<random>.tmp``) or any other hidden file."""
    return [p for p in run_dir.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".")]


# --------------------------------------------------------------------------------------------- determinism
def test_seeded_training_is_deterministic_on_cpu(make_cfg: MakeCfg, tmp_path: Path) -> None:
    # 3 iterations with an evaluation at the 3rd, so evaluation figures are compared too.
    cfg = make_cfg("runner.eval_interval=3")
    r1, res1 = train(cfg, tmp_path / "a")
    r2, res2 = train(make_cfg("runner.eval_interval=3"), tmp_path / "b")
    assert res1.iterations == res2.iterations == 3
    assert_same_state(r1.model.state_dict(), r2.model.state_dict())
    rows1, rows2 = read_rows(tmp_path / "a" / "metrics.csv"), read_rows(tmp_path / "b" / "metrics.csv")
    assert len(rows1) == 3
    assert "eval/success_rate" in rows1[-1]
    assert without_timing(rows1) == without_timing(rows2)
    assert any(k.startswith("perf/") for k in rows1[0])  # the excluded columns exist

    r3, _ = train(make_cfg("seed=1", "runner.eval_interval=3"), tmp_path / "c")
    s1, s3 = r1.model.state_dict(), r3.model.state_dict()
    assert any(not torch.equal(s1[k], s3[k]) for k in s1), "a different seed gave identical weights"


def test_training_changes_weights_and_logs_finite_losses(make_cfg: MakeCfg, tmp_path: Path) -> None:
    cfg = make_cfg("runner.max_iterations=2")
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    before = {k: v.clone() for k, v in runner.model.state_dict().items()}
    result = runner.train()
    after = runner.model.state_dict()
    assert result.iterations == 2 and result.env_steps == 2 * cfg.ppo.num_steps * cfg.num_envs
    assert not result.interrupted
    assert not torch.equal(before["actor.0.weight"], after["actor.0.weight"])
    assert not torch.equal(before["actor_normalizer.mean"], after["actor_normalizer.mean"])
    for row in read_rows(tmp_path / "metrics.csv"):
        for key in ("loss/surrogate", "loss/value", "policy/entropy", "policy/kl"):
            assert torch.isfinite(torch.tensor(float(row[key]))), (key, row[key])


def test_repeated_evaluation_of_the_same_policy_is_identical(make_cfg: MakeCfg, tmp_path: Path) -> None:
    runner = OnPolicyRunner(make_cfg("runner.eval_episodes=8"), tmp_path, quiet=True)
    last = runner.model.actor[-1]
    assert isinstance(last, torch.nn.Linear)
    with torch.no_grad():  # a policy that reacts to its observation history
        last.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(0))
    first, second = runner.evaluate(), runner.evaluate()
    for k in first.episodes:
        assert (first.episodes[k] == second.episodes[k]).all(), k


def test_eval_gate_skips_evaluations_while_training_episodes_fail(make_cfg: MakeCfg, tmp_path: Path) -> None:
    # An untrained policy's training episodes never succeed: a gate above 0 skips every scheduled evaluation and
    # logs it; without a gate the same schedule evaluates. Episodes of 0.1 s end inside every window.
    short = ("runner.max_iterations=4", "runner.eval_interval=2", "env.episode_length_s=0.1")
    gated = make_cfg(*short, "runner.eval_gate=0.5")
    runner, result = train(gated, tmp_path / "gated")
    rows = read_rows(tmp_path / "gated" / "metrics.csv")
    successes = [float(r["episode/success"]) for r in rows if r.get("episode/success")]
    assert successes and max(successes) < 0.5  # the premise: the training episodes fail
    assert [r["eval/skipped"] for r in rows] == ["", "1.0", "", "1.0"]
    assert all(not r.get("eval/success_rate") for r in rows)
    assert result.last_eval is None and not result.criterion_met
    assert runner._gate_open([])  # a window without finished episodes is evaluated
    assert (tmp_path / "gated" / "learning_curve.png").exists()  # the skip marker is not plotted as a figure

    _, open_result = train(make_cfg(*short, "runner.eval_gate=0"), tmp_path / "open")
    rows = read_rows(tmp_path / "open" / "metrics.csv")
    assert [bool(r.get("eval/success_rate")) for r in rows] == [False, True, False, True]
    assert not any(r.get("eval/skipped") for r in rows)
    assert open_result.last_eval is not None


def test_a_log_file_shows_each_evaluations_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # stderr is not a terminal under pytest: one plain line per evaluation, with the figure the selection keeps
    log = TrainingLogger(tmp_path, None, tensorboard=False)
    log.log({"eval/criterion_met": 0.0, "eval/success_rate": 0.21875}, 1)
    log.log({"eval/skipped": 1.0}, 2)
    log.log({"train/loss": 0.5, "eval/success_rate": 0.5}, 3)  # behaviour cloning: no criterion
    met = {"eval/criterion_met": 1.0, "eval/success_rate": 1.0, "eval/quality_met": 1.0}
    log.log({**met, "corners/success_rate": 0.5, "corners/quality_met": 0.0}, 4)  # runner.selection_corner_episodes
    log.log({**met, "corners/success_rate": 1.0, "corners/quality_met": 1.0}, 5)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" | ")[-1] for line in lines] == [
        "eval 21.9% (not met)", "eval skipped (runner.eval_gate)", "eval 50.0%",
        "eval 100.0% (met), corners 50.0%, quality met over the ranges, not at the corners",
        "eval 100.0% (met), corners 100.0%, quality met",
    ]  # fmt: skip
    log.close()


def test_the_quality_bar_counts_only_when_a_second_evaluation_confirms_it(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every selection evaluation "meets the quality bar", scored 0.9, 0.5, 0.4, 0.7. The confirmation over 8 more
    # episodes on their own seeds fails at iteration 1 and passes at 2, so the bar counts from iteration 2 and best.pt
    # holds it although iteration 1 scored better; iteration 3 could not beat it and is not confirmed; 4 is and does.
    cfg = make_cfg(
        "runner.max_iterations=4", "runner.eval_interval=1", "runner.stop_on_success=false",
        "runner.stop_on_quality=true", "runner.quality_confirm_episodes=8",
    )  # fmt: skip
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    scores, confirmations, calls, kept = iter([0.9, 0.5, 0.4, 0.7]), iter([False, True, True]), [], []
    real = runner.evaluate

    def scripted(
        randomize: bool = True,
        episodes: int | None = None,
        seed_offset: int = EVAL_SEED_OFFSET,
        corner_share: float = 0.0,
    ) -> EvalResult:
        calls.append((runner.iteration, seed_offset, episodes))
        result = real(randomize, episodes, seed_offset, corner_share)
        if seed_offset == CONFIRM_SEED_OFFSET:
            result.quality_met = next(confirmations)
        else:
            kept.append(None if runner.best is None else runner.best["iteration"])
            result.met, result.quality_met, result.score = True, True, next(scores)
        return result

    monkeypatch.setattr(runner, "evaluate", scripted)
    result = runner.train()
    select, confirm = SELECTION_SEED_OFFSET, CONFIRM_SEED_OFFSET
    assert calls == [(1, select, None), (1, confirm, 8), (2, select, None), (2, confirm, 8), (3, select, None),
                     (4, select, None), (4, confirm, 8)]  # fmt: skip
    assert len({SELECTION_SEED_OFFSET, CONFIRM_SEED_OFFSET, EVAL_SEED_OFFSET}) == 3
    assert kept == [None, 1, 2, 2] and result.time_to_quality_s is not None
    assert result.best is not None and (result.best["iteration"], result.best["score"]) == (4, 0.7)
    assert result.best["quality_met"]
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r.get("confirm/quality_met") for r in rows] == ["0.0", "1.0", "", "1.0"]
    assert rows[0]["confirm/episodes"] == "8.0"
    with pytest.raises(ValueError, match=re.escape("runner.quality_confirm_episodes must be >= 0 (0: no confirm")):
        make_cfg("runner.quality_confirm_episodes=-1")


def test_selection_evaluations_run_their_corner_episodes_at_edges_and_rank_by_both(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # runner.selection_corner_episodes=8: each selection evaluation (over the ranges) is followed by 8 episodes on the
    # same seeds with every world at a corner (the rotor time constant recognised by its exact float32 edge, a value
    # a draw never hits). Scripted: the ranges meet the bar at both iterations, the corners only at the second. The
    # bar counts from iteration 2, whose confirmation (over the ranges) runs; best.pt ranks by the mean score; the
    # held-out evaluation draws from the ranges alone.
    cfg = make_cfg(
        "runner.max_iterations=2", "runner.eval_interval=1", "runner.stop_on_success=false",
        "runner.quality_confirm_episodes=8", "runner.selection_corner_episodes=8",
    )  # fmt: skip
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    (term,) = [t for t in cfg.env.randomization if t.param == "motor_time_constant_up"]
    edges = np.array([edge_value(term, "lo"), edge_value(term, "hi")], dtype=np.float32)

    def at_corner(result: EvalResult) -> np.ndarray:
        return np.isin(result.start_params["motor_time_constant_up"][:, 0], edges)

    calls, real = [], runner.evaluate
    corner_quality, corner_score = iter([False, True]), iter([-0.5, -0.3])

    def scripted(*args: Any, **kwargs: Any) -> EvalResult:
        result = real(*args, **kwargs)
        share = kwargs.get("corner_share", 0.0)
        calls.append((runner.iteration, kwargs["seed_offset"], kwargs.get("episodes"), share, at_corner(result).mean()))
        result.met, result.quality_met, result.score = True, True, -0.1
        if share:
            result.quality_met, result.score = next(corner_quality), next(corner_score)
        return result

    monkeypatch.setattr(runner, "evaluate", scripted)
    result = runner.train()
    select, confirm = SELECTION_SEED_OFFSET, CONFIRM_SEED_OFFSET
    assert calls == [(1, select, None, 0.0, 0.0), (1, select, 8, 1.0, 1.0), (2, select, None, 0.0, 0.0),
                     (2, select, 8, 1.0, 1.0), (2, confirm, 8, 0.0, 0.0)]  # fmt: skip
    assert result.best is not None and result.best["quality_met"] and result.best["iteration"] == 2
    assert result.best["score"] == pytest.approx(-0.2)
    assert [r.get("corners/success_rate", "") != "" for r in read_rows(tmp_path / "metrics.csv")] == [True, True]
    assert not at_corner(real()).any()
    flat = make_cfg("env.randomization=[]", "runner.selection_corner_episodes=8")
    with pytest.raises(ConfigError, match="task 'quadrotor-hover' randomises no parameter: it has no corners"):
        OnPolicyRunner(flat, tmp_path / "flat", quiet=True)


def test_the_kept_policy_is_the_best_on_selection_seeds_not_the_last(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four evaluations scored 0.2, 0.9, 0.5, 0.1 (all "meeting the criterion"): best.pt holds iteration 2's policy,
    # checkpoint.pt iteration 4's; every evaluation during training ran on the selection seeds, and the KL target
    # switched to ppo.refine_kl at the first one that met the criterion.
    cfg = make_cfg(
        "runner.max_iterations=4", "runner.eval_interval=1", "runner.stop_on_success=false", "ppo.refine_kl=0.002"
    )
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    scores, offsets, weights = iter([0.2, 0.9, 0.5, 0.1]), [], {}
    real = runner.evaluate

    def scripted(
        randomize: bool = True, episodes: int | None = None, seed_offset: int = EVAL_SEED_OFFSET
    ) -> EvalResult:
        assert runner.ppo.desired_kl == (cfg.ppo.desired_kl if not offsets else 0.002)
        offsets.append(seed_offset)
        result = real(randomize, episodes, seed_offset)
        result.met, result.score = True, next(scores)
        weights[runner.iteration] = {k: v.clone() for k, v in runner.model.state_dict().items()}
        return result

    monkeypatch.setattr(runner, "evaluate", scripted)
    result = runner.train()
    assert offsets == [SELECTION_SEED_OFFSET] * 4 and SELECTION_SEED_OFFSET != EVAL_SEED_OFFSET
    assert result.best is not None and result.best["iteration"] == 2 and result.best["score"] == 0.9
    assert read_checkpoint(tmp_path / "checkpoint.pt")["iteration"] == 4
    kept = PPORun.load(tmp_path)  # what eval and export use
    assert kept.checkpoint["iteration"] == 2 and "best of its evaluations" in kept.describe()
    assert_same_state(kept.model.state_dict(), weights[2])

    # A resumed run (into a new folder, as `robot-rl train --resume` does) keeps the best unless a later evaluation
    # beats it: hover scores are minus a tail error in metres, never above the scripted 0.9.
    cfg = make_cfg("runner.max_iterations=5", "runner.eval_interval=1", "runner.stop_on_success=false")
    resumed = OnPolicyRunner(cfg, tmp_path, resume=tmp_path / "checkpoint.pt", quiet=True)
    assert resumed.best is not None and resumed.best["score"] == 0.9
    resumed.run_dir = tmp_path / "resumed"
    resumed.run_dir.mkdir()
    resumed.train()
    carried = PPORun.load(resumed.run_dir)
    damaged = read_checkpoint(tmp_path / "best.pt")
    damaged["selection"]["score"] = float("nan")
    torch.save(damaged, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match="is damaged: its 'selection' record holds no finite score"):
        OnPolicyRunner(cfg, tmp_path, resume=tmp_path / "checkpoint.pt", quiet=True)
    damaged["selection"].update(score=0.9, iteration="2")
    torch.save(damaged, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"record's iteration, quality_met and met are \('2', False, True\)"):
        OnPolicyRunner(cfg, tmp_path, resume=tmp_path / "checkpoint.pt", quiet=True)
    assert carried.checkpoint["iteration"] == 2 and read_checkpoint(resumed.run_dir / "checkpoint.pt")["iteration"] == 5
    assert_same_state(carried.model.state_dict(), weights[2])


def test_a_run_below_its_criterion_keeps_its_best_evaluation_and_one_that_meets_it_outranks_any(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scripted selection evaluations (criterion met, score): none meets the criterion in the first run, so best.pt
    # holds the best score (iteration 2, not the last); a score that is not finite is never kept. In the second
    # run the one evaluation that meets the criterion outranks every better-scored one that does not.
    def run(folder: Path, scripted: list[tuple[bool, float]]) -> tuple[TrainResult, dict[int, dict[str, torch.Tensor]]]:
        cfg = make_cfg(
            f"runner.max_iterations={len(scripted)}", "runner.eval_interval=1", "runner.stop_on_success=false"
        )
        folder.mkdir()
        runner = OnPolicyRunner(cfg, folder, quiet=True)
        draws, weights, real = iter(scripted), {}, runner.evaluate

        def scripted_eval(
            randomize: bool = True, episodes: int | None = None, seed_offset: int = EVAL_SEED_OFFSET
        ) -> EvalResult:
            result = real(randomize, episodes, seed_offset)
            (result.met, result.score), result.quality_met = next(draws), False
            weights[runner.iteration] = {k: v.clone() for k, v in runner.model.state_dict().items()}
            return result

        monkeypatch.setattr(runner, "evaluate", scripted_eval)
        return runner.train(), weights

    below, weights = run(tmp_path / "below", [(False, 0.3), (False, 0.6), (False, float("nan")), (False, 0.4)])
    assert below.best is not None and (below.best["iteration"], below.best["met"]) == (2, False)
    kept = PPORun.load(tmp_path / "below")
    assert kept.checkpoint["iteration"] == 2
    assert_same_state(kept.model.state_dict(), weights[2])

    met, _ = run(tmp_path / "met", [(False, 0.8), (True, 0.2), (False, 0.9)])
    assert met.best is not None and (met.best["iteration"], met.best["met"], met.best["score"]) == (2, True, 0.2)


# ---------------------------------------------------------------------------------------- checkpoint/resume
def test_checkpoint_and_resume_continue_the_counters(make_cfg: MakeCfg, tmp_path: Path) -> None:
    cfg = make_cfg("runner.max_iterations=2")
    steps_per_it = cfg.ppo.num_steps * cfg.num_envs
    first, _ = train(cfg, tmp_path / "first")
    ckpt = tmp_path / "first" / "checkpoint.pt"
    state = read_checkpoint(ckpt)
    assert (state["iteration"], state["env_steps"]) == (2, 2 * steps_per_it)
    assert state["config"]["num_envs"] == cfg.num_envs

    # runner.max_iterations is the total: 2 done + 2 more.
    resumed = OnPolicyRunner(make_cfg("runner.max_iterations=4"), tmp_path / "second", resume=ckpt, quiet=True)
    assert (resumed.iteration, resumed.env_steps) == (2, 2 * steps_per_it)
    assert_same_state(resumed.model.state_dict(), first.model.state_dict())
    assert resumed.ppo.learning_rate == first.ppo.learning_rate
    opt_a, opt_b = resumed.ppo.optimizer.state_dict()["state"], first.ppo.optimizer.state_dict()["state"]
    assert opt_a.keys() == opt_b.keys() and all(torch.equal(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"]) for k in opt_a)

    (tmp_path / "second").mkdir()
    res2 = resumed.train()
    assert (res2.iterations, res2.env_steps) == (4, 4 * steps_per_it)
    rows = read_rows(tmp_path / "second" / "metrics.csv")
    assert [float(r["env_steps"]) for r in rows] == [3 * steps_per_it, 4 * steps_per_it]
    assert read_checkpoint(tmp_path / "second" / "checkpoint.pt")["iteration"] == 4
    assert read_checkpoint(ckpt)["iteration"] == 2  # the original run is untouched


def judged(
    monkeypatch: pytest.MonkeyPatch, runner: OnPolicyRunner, flies: bool, scores: list[float] | None = None
) -> None:
    """Every evaluation of ``runner`` meets (``flies``) or misses both its success criterion and its quality bar;
    ``scores``: the evaluations' scores, in order (default: as evaluated)."""
    real, scripted = runner.evaluate, iter(scores or [])

    def evaluate(*a: Any, **k: Any) -> EvalResult:
        result = real(*a, **k)
        return dataclasses.replace(result, met=flies, quality_met=flies, score=next(scripted, result.score))

    monkeypatch.setattr(runner, "evaluate", evaluate)


def test_a_resume_goes_on_at_the_refined_kl_target(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first evaluation "meets the criterion", so PPO switches to ppo.refine_kl; the checkpoint of that very
    # iteration (its snapshot taken before the evaluation) says so, and a resume of it starts at refine_kl, not back
    # at ppo.desired_kl until an evaluation meets the criterion again; a fresh run starts at desired_kl; a checkpoint
    # whose flag is not a bool is refused as damaged.
    kl = ("ppo.desired_kl=0.05", "ppo.refine_kl=0.002")
    cfg = make_cfg("runner.max_iterations=1", "runner.eval_interval=1", "runner.stop_on_success=false", *kl)
    (tmp_path / "first").mkdir()
    runner = OnPolicyRunner(cfg, tmp_path / "first", quiet=True)
    judged(monkeypatch, runner, flies=True)
    runner.train()
    ckpt = tmp_path / "first" / "checkpoint.pt"
    assert read_checkpoint(ckpt)["kl_refined"] is True
    resumed = OnPolicyRunner(make_cfg("runner.max_iterations=3", *kl), tmp_path / "second", resume=ckpt, quiet=True)
    assert resumed.ppo.desired_kl == 0.002
    assert OnPolicyRunner(cfg, tmp_path / "third", quiet=True).ppo.desired_kl == 0.05
    state = read_checkpoint(ckpt)
    torch.save({**state, "kl_refined": "yes"}, tmp_path / "damaged.pt")
    with pytest.raises(CheckpointError, match="is damaged: kl_refined is 'yes', not true or false"):
        OnPolicyRunner(make_cfg("runner.max_iterations=3", *kl), tmp_path / "fourth", resume=tmp_path / "damaged.pt")


def test_the_kl_target_drops_again_once_the_kept_policy_stops_improving(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every evaluation meets the criterion and none beats the first: ppo.refine_kl from the first, ppo.plateau_kl
    # once two more have passed without a better policy; the plain log says so; the checkpoint keeps the switch, a
    # resume goes on at plateau_kl; a damaged flag, or a plateau_kl without plateau_evaluations, is refused.
    kl = ("ppo.desired_kl=0.05", "ppo.refine_kl=0.01", "ppo.plateau_kl=0.002", "runner.plateau_evaluations=2")
    one = ("runner.eval_interval=1", "runner.stop_on_success=false", "runner.quality_confirm_episodes=0")
    (tmp_path / "first").mkdir()
    runner = OnPolicyRunner(make_cfg("runner.max_iterations=4", *one, *kl), tmp_path / "first")
    judged(monkeypatch, runner, flies=True, scores=[-1.0, -2.0, -3.0, -4.0])
    switches = runner.train().kl_switches
    assert switches == [(1, 0.01, "the success criterion met"), (3, 0.002, "no better policy in 2 evaluations")]
    with open(tmp_path / "first" / "metrics.csv") as f:
        assert [float(r["policy/desired_kl"]) for r in csv.DictReader(f)] == [0.01, 0.01, 0.002, 0.002]
    err = capsys.readouterr().err
    assert "KL target 0.05 -> 0.01" not in err  # the first row has no earlier target to differ from
    assert "iteration 3 |" in err and "KL target 0.01 -> 0.002" in err
    ckpt = tmp_path / "first" / "checkpoint.pt"
    assert read_checkpoint(ckpt)["kl_settled"] is True
    more = make_cfg("runner.max_iterations=5", *one, *kl)
    resumed = OnPolicyRunner(more, tmp_path / "second", resume=ckpt, quiet=True)
    assert resumed.ppo.desired_kl == 0.002
    state = read_checkpoint(ckpt)
    torch.save({**state, "kl_refined": False}, tmp_path / "damaged.pt")
    with pytest.raises(CheckpointError, match="is damaged: kl_settled is True with kl_refined False"):
        OnPolicyRunner(more, tmp_path / "third", resume=tmp_path / "damaged.pt")
    with pytest.raises(ConfigError, match=r"runner\.plateau_evaluations \(> 0\) and ppo\.plateau_kl go together"):
        make_cfg("ppo.plateau_kl=0.002")


def test_a_resume_keeps_the_runs_first_times_and_counts_on(
    make_cfg: MakeCfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The run met its criterion and quality bar at its first evaluation; a resume reports those times (training
    # seconds of the whole run), not the resumed session's meetings, still trains until this session meets them
    # again (stop_on_success), and its plain log counts the run's iterations; a damaged time is refused.
    cfg = make_cfg("runner.max_iterations=2", "runner.eval_interval=1", "runner.stop_on_success=false")
    (tmp_path / "first").mkdir()
    runner = OnPolicyRunner(cfg, tmp_path / "first", quiet=True)
    judged(monkeypatch, runner, flies=True)
    first = runner.train()
    assert first.time_to_criterion_s is not None and first.time_to_quality_s is not None
    ckpt = tmp_path / "first" / "checkpoint.pt"
    state = read_checkpoint(ckpt)
    assert (state["time_to_criterion_s"], state["time_to_quality_s"]) == (
        first.time_to_criterion_s,
        first.time_to_quality_s,
    )
    more = make_cfg("runner.max_iterations=4", "runner.eval_interval=1")
    resumed = OnPolicyRunner(more, tmp_path / "second", resume=ckpt)
    judged(monkeypatch, resumed, flies=False)
    second = resumed.train()
    assert second.iterations == 4 and not second.criterion_met  # stop_on_success waits for this session's meeting
    assert (second.time_to_criterion_s, second.time_to_quality_s) == (
        first.time_to_criterion_s,
        first.time_to_quality_s,
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("iteration ")]
    assert [line.split(" | ")[0] for line in lines] == ["iteration 3", "iteration 4"]
    for damage, message in (
        ({"time_to_quality_s": -1.0}, "time_to_quality_s is -1.0"),
        ({"elapsed_s": float("nan")}, "iteration, env_steps, elapsed_s are (2, "),
        ({"iteration": -3}, "iteration, env_steps, elapsed_s are (-3, "),
    ):
        torch.save({**state, **damage}, tmp_path / "damaged.pt")
        with pytest.raises(CheckpointError, match=re.escape(f"is damaged: {message}")):
            OnPolicyRunner(more, tmp_path / "third", resume=tmp_path / "damaged.pt")
    # a checkpoint written before the times were kept, of a run that had met its criterion: the times are unknown,
    # so a resumed run's meetings are not reported as the run's first, and its checkpoints keep them unknown
    old = {k: v for k, v in state.items() if k not in ("time_to_criterion_s", "time_to_quality_s")}
    torch.save(old, tmp_path / "old.pt")
    (tmp_path / "fourth").mkdir()
    older = OnPolicyRunner(
        make_cfg("runner.max_iterations=3", "runner.eval_interval=1"),
        tmp_path / "fourth",
        resume=tmp_path / "old.pt",
        quiet=True,
    )
    judged(monkeypatch, older, flies=True)
    third = older.train()
    assert third.criterion_met and (third.time_to_criterion_s, third.time_to_quality_s) == (None, None)
    assert "time_to_criterion_s" not in read_checkpoint(tmp_path / "fourth" / "checkpoint.pt")


@pytest.fixture
def fresh_model(make_cfg: MakeCfg) -> torch.nn.Module:
    cfg = make_cfg("num_envs=2")
    return build_model(cfg, sim.make(cfg.task, 2, "cpu", cfg.env))


def test_missing_checkpoint_is_named(tmp_path: Path, fresh_model: torch.nn.Module) -> None:
    path = tmp_path / "nowhere" / "checkpoint.pt"
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint '{path}' does not exist")):
        load_checkpoint(path, fresh_model, None, "cpu")


def test_corrupt_checkpoint_is_named(tmp_path: Path, fresh_model: torch.nn.Module) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"\x00garbage, not a zip archive\xff" * 10)
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint '{path}' could not be read")):
        load_checkpoint(path, fresh_model, None, "cpu")


def test_truncated_checkpoint_is_named(make_cfg: MakeCfg, tmp_path: Path, fresh_model: torch.nn.Module) -> None:
    runner = OnPolicyRunner(make_cfg("num_envs=2"), tmp_path, quiet=True)
    full = runner.save(0.0).read_bytes()
    path = tmp_path / "half.pt"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint '{path}' could not be read")):
        load_checkpoint(path, fresh_model, None, "cpu")


def test_foreign_torch_file_is_not_a_checkpoint(tmp_path: Path, fresh_model: torch.nn.Module) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"model": {}}, path)
    with pytest.raises(CheckpointError, match=re.escape(f"'{path}' is not a robot-rl checkpoint")):
        load_checkpoint(path, fresh_model, None, "cpu")


def test_checkpoint_of_another_architecture_does_not_fit(make_cfg: MakeCfg, tmp_path: Path) -> None:
    small = OnPolicyRunner(make_cfg("num_envs=2", "policy.actor_hidden=[8]"), tmp_path, quiet=True)
    path = small.save(0.0)
    with pytest.raises(
        CheckpointError, match=re.escape(f"checkpoint '{path}' was trained with policy.actor_hidden=[8]")
    ):
        OnPolicyRunner(make_cfg("num_envs=2"), tmp_path / "other", resume=path, quiet=True)
    fresh = build_model(make_cfg("num_envs=2"), small.env)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, fresh, None, "cpu")
    message = str(err.value)  # one line naming the parameter, not torch's header "Error(s) in loading ..."
    assert message.startswith(f"checkpoint '{path}' does not fit this model: Missing key(s) in state_dict: ")
    assert "size mismatch for actor.0.weight: copying a param with shape [8, " in message
    assert "\n" not in message and "Error(s)" not in message and "torch.Size" not in message


# ------------------------------------------------------------------------------------------------ init_from
def test_a_new_run_starts_from_another_runs_networks(make_cfg: MakeCfg, tmp_path: Path) -> None:
    """``policy.init_from`` copies the actor (normaliser and std too) and a critic that fits; the optimiser and the
    counters start anew, and the source run is untouched."""
    source, _ = train(make_cfg("runner.max_iterations=2"), tmp_path / "source")
    before = (tmp_path / "source" / "checkpoint.pt").read_bytes()
    new = OnPolicyRunner(make_cfg("seed=1", f"policy.init_from={tmp_path / 'source'}"), tmp_path / "new", quiet=True)
    assert_same_state(new.model.state_dict(), source.model.state_dict())
    assert (new.iteration, new.env_steps) == (0, 0) and not new.ppo.optimizer.state_dict()["state"]
    assert new.init_note is not None and new.init_note.endswith("(iteration 2): actor and critic")
    assert (tmp_path / "source" / "checkpoint.pt").read_bytes() == before


def test_a_critic_that_does_not_fit_starts_fresh(make_cfg: MakeCfg, tmp_path: Path) -> None:
    source, _ = train(make_cfg("runner.max_iterations=1", "policy.critic_hidden=[16,16]"), tmp_path / "source")
    new = OnPolicyRunner(make_cfg(f"policy.init_from={tmp_path / 'source'}"), tmp_path / "new", quiet=True)
    mine, theirs = new.model.state_dict(), source.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine if k.startswith(("actor", "log_std")))
    assert new.model.critic[0].weight.shape[0] == new.cfg.policy.critic_hidden[0] != 16
    assert new.init_note is not None and "the critic starts fresh (critic.0.weight is [16, " in new.init_note


def test_the_critic_warms_up_alone_then_the_actor_trains(make_cfg: MakeCfg, tmp_path: Path) -> None:
    """``ppo.critic_warmup_iterations``: the first iterations move the critic only (actor, std and learning rate
    held); after them PPO trains both."""
    (tmp_path / "a").mkdir()
    start = OnPolicyRunner(make_cfg(), tmp_path / "a", quiet=True).model.state_dict()  # the same seed's networks
    warm, _ = train(make_cfg("runner.max_iterations=2", "ppo.critic_warmup_iterations=2"), tmp_path / "b")
    after = warm.model.state_dict()
    assert all(torch.equal(after[k], start[k]) for k in start if k.startswith(("actor.", "log_std")))
    assert not torch.equal(after["critic.0.weight"], start["critic.0.weight"])
    assert warm.ppo.learning_rate == warm.cfg.ppo.learning_rate
    both, _ = train(make_cfg("runner.max_iterations=3", "ppo.critic_warmup_iterations=2"), tmp_path / "c")
    assert not torch.equal(both.model.state_dict()["actor.0.weight"], start["actor.0.weight"])
    with pytest.raises(ConfigError, match=r"ppo\.critic_warmup_iterations must be >= 0, got -1"):
        make_cfg("ppo.critic_warmup_iterations=-1")


@pytest.mark.parametrize(
    ("source_overrides", "fragments"),
    [(["policy.actor_hidden=[8]"], ["does not fit this one: actor.0.weight is [8, ", "there, [64, "]),
     (["policy.activation=elu"], ["was trained with policy.activation=elu, not tanh"])],
)  # fmt: skip
def test_an_actor_that_does_not_fit_is_refused_by_name(
    make_cfg: MakeCfg, tmp_path: Path, source_overrides: list[str], fragments: list[str]
) -> None:
    (tmp_path / "source").mkdir()
    OnPolicyRunner(make_cfg("num_envs=2", *source_overrides), tmp_path / "source", quiet=True).save(0.0)
    with pytest.raises(CheckpointError, match=r"^policy\.init_from: ") as err:
        OnPolicyRunner(make_cfg("num_envs=2", f"policy.init_from={tmp_path / 'source'}"), tmp_path / "new", quiet=True)
    assert all(f in str(err.value) for f in fragments), str(err.value)


def test_init_from_refuses_a_checkpoint_whose_weights_are_not_tensors(make_cfg: MakeCfg, tmp_path: Path) -> None:
    """A hostile file that passes the checkpoint's layout check but holds text where a weight should be."""
    (tmp_path / "source").mkdir()
    path = OnPolicyRunner(make_cfg("num_envs=2"), tmp_path / "source", quiet=True).save(0.0)
    state = torch.load(path, weights_only=True)
    state["model"]["actor.0.weight"] = "import os"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"does not fit this one: actor\.0\.weight is a str, not a tensor$"):
        OnPolicyRunner(make_cfg("num_envs=2", f"policy.init_from={path}"), tmp_path / "new", quiet=True)


def test_init_from_refuses_another_task_and_a_folder_without_a_checkpoint(make_cfg: MakeCfg, tmp_path: Path) -> None:
    other = load_config("cartpole-balance", None, ["num_envs=2", f"run_root={tmp_path}"])
    (tmp_path / "cartpole").mkdir()
    path = OnPolicyRunner(other, tmp_path / "cartpole", quiet=True).save(0.0)
    with pytest.raises(CheckpointError, match=re.escape(f"'{path}' holds a 'cartpole-balance' policy, not")):
        OnPolicyRunner(make_cfg("num_envs=2", f"policy.init_from={path}"), tmp_path / "a", quiet=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"run folder '.*empty' has no best\.pt or checkpoint\.pt"):
        OnPolicyRunner(make_cfg("num_envs=2", f"policy.init_from={tmp_path / 'empty'}"), tmp_path / "b", quiet=True)


# -------------------------------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("where", ["update", "env_step"])
def test_ctrl_c_saves_a_loadable_checkpoint(
    make_cfg: MakeCfg,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    interrupt_on_call: Callable[[int, Callable[..., Any]], Callable[..., Any]],
) -> None:
    cfg = make_cfg("runner.max_iterations=10", "runner.save_interval=100")
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    if where == "update":  # Ctrl-C at the start of the 3rd update
        monkeypatch.setattr(PPO, "update", interrupt_on_call(3, PPO.update))
    else:  # Ctrl-C in the middle of the 3rd rollout (inside torch.inference_mode)
        monkeypatch.setattr(runner.env, "step", interrupt_on_call(2 * cfg.ppo.num_steps + 2, runner.env.step))
    result = runner.train()

    assert result.interrupted and result.iterations == 2
    ckpt = tmp_path / "checkpoint.pt"
    assert ckpt.is_file()
    fresh = build_model(cfg, sim.make(cfg.task, 2, "cpu", cfg.env))
    state = load_checkpoint(ckpt, fresh, None, "cpu")
    assert state["iteration"] == 2 and state["env_steps"] == 2 * cfg.ppo.num_steps * cfg.num_envs
    # The checkpoint is the state after exactly two whole iterations (not the half-done third one).
    monkeypatch.undo()
    two, _ = train(make_cfg("runner.max_iterations=2", "runner.save_interval=100"), tmp_path / "two")
    assert_same_state(fresh.state_dict(), two.model.state_dict())
    assert not leftovers(tmp_path), leftovers(tmp_path)
    assert len(read_rows(tmp_path / "metrics.csv")) == 2
    assert (tmp_path / "learning_curve.png").read_bytes().startswith(PNG_MAGIC)


# -------------------------------------------------------------------------------------- observation groups
def test_asymmetric_critic_groups_size_the_critic(make_cfg: MakeCfg, tmp_path: Path) -> None:
    cfg = make_cfg("policy.critic_obs=[policy, critic]", "runner.max_iterations=2")
    runner = OnPolicyRunner(cfg, tmp_path, quiet=True)
    sizes = runner.env.obs_sizes
    critic_dim = sizes["policy"] + sizes["critic"]
    assert runner.model.critic_normalizer.mean.numel() == critic_dim
    assert runner.model.critic[0].in_features == critic_dim
    assert runner.model.actor_normalizer.mean.numel() == sizes["policy"]
    assert runner.ppo.storage.critic_obs.shape == (cfg.ppo.num_steps, cfg.num_envs, critic_dim)
    result = runner.train()
    assert result.iterations == 2
    row = read_rows(tmp_path / "metrics.csv")[-1]
    assert torch.isfinite(torch.tensor(float(row["loss/value"])))
    # The critic really reads both groups, in the configured order.
    stored = runner.ppo.storage.critic_obs[0]
    assert stored[:, : sizes["policy"]].abs().sum() > 0 and stored[:, sizes["policy"] :].abs().sum() > 0


def test_pick_concatenates_groups_in_configured_order() -> None:
    obs = {"policy": torch.ones(2, 3), "critic": torch.zeros(2, 2)}
    assert torch.equal(pick(obs, ["policy"]), obs["policy"])
    assert pick(obs, ["critic", "policy"]).tolist() == [[0, 0, 1, 1, 1]] * 2


@pytest.mark.parametrize("role", ["actor_obs", "critic_obs"])
def test_unknown_observation_group_lists_the_tasks_groups(make_cfg: MakeCfg, tmp_path: Path, role: str) -> None:
    cfg = make_cfg("num_envs=2", f"policy.{role}=[policy, privileged]")
    with pytest.raises(ValueError, match=rf"policy\.{role}.*'privileged'.*provides: policy, critic"):
        OnPolicyRunner(cfg, tmp_path, quiet=True)
    assert not any(tmp_path.iterdir())


def test_empty_observation_group_list_is_refused(make_cfg: MakeCfg, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"policy\.actor_obs"):
        OnPolicyRunner(make_cfg("num_envs=2", "policy.actor_obs=[]"), tmp_path, quiet=True)
