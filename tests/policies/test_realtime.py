"""Receding-horizon schedules against the clock (policies/runtime/realtime.py): sync waits, async keeps moving and
skips the actions that are already past, real-time chunking inpaints the overlap; threaded planning on a robot;
the flow sampler's inpainting and its exported graph."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.runtime.chunking import ChunkedOnnxPolicy, ChunkExecutor
from policies.runtime.contract import ChunkSpec, ContractError
from policies.runtime.realtime import RealTime, Scheduler, rtc_weights
from tests.policies.test_vla import H, _export, _language, _policy

TP, TA = 8, 4


class Ramp:
    """A planner whose chunk made at step ``t`` (read from the window) is ``t + i + offset`` for action ``i``: a
    consistent plan when ``offset`` is 0 (each chunk continues the last), a disagreeing one otherwise. With a guide
    it honours the weights exactly (what an ideal inpainting sampler does)."""

    def __init__(self, offsets: list[float] | None = None) -> None:
        self.offsets = offsets or []
        self.guides: list[tuple[np.ndarray, np.ndarray] | None] = []

    def __call__(
        self, window: np.ndarray, images: object = None, guide: tuple[np.ndarray, np.ndarray] | None = None
    ) -> np.ndarray:
        self.guides.append(guide)
        offset = self.offsets[len(self.guides) - 1] if len(self.guides) <= len(self.offsets) else 0.0
        t = window[:, -1, :1]  # [N, 1]
        plan = (t[:, None, :] + np.arange(TP)[None, :, None] + offset).astype(np.float32)  # [N, Tp, 1]
        if guide is not None:
            actions, weights = guide
            plan = weights[..., None] * actions + (1 - weights[..., None]) * plan
        return plan


def _run(timing: RealTime, planner: Ramp, steps: int = 24, n: int = 1) -> tuple[np.ndarray, Scheduler, np.ndarray]:
    """Drive a scheduler whose observation is the step number: the actions ``[steps, N]``, the scheduler and which
    steps switched to a new chunk ``[steps, N]``."""
    sched = Scheduler(n, TP, TA, 1, planner, timing)
    out, joined = [], []
    for t in range(steps):
        window = np.full((n, 1, 1), float(t), np.float32)
        out.append(sched.step(window, None, np.full(n, t == 0)))
        joined.append(sched.joined.copy())
    return np.asarray(out)[..., 0], sched, np.asarray(joined)


def test_rtc_weights_are_papers_eq5() -> None:
    w = rtc_weights(16, 8, 3)
    assert list(w[:3]) == [1.0, 1.0, 1.0] and list(w[8:]) == [0.0] * 8
    assert np.all(np.diff(w[3:9]) < 0) and 0 < w[7] < w[3] < 1
    c = (16 - 8 - 4) / (16 - 8 - 3 + 1)
    assert w[4] == pytest.approx(c * math.expm1(c) / math.expm1(1.0))
    assert rtc_weights(16, 8, 20)[:8].tolist() == [1.0] * 8  # a delay past the overlap freezes all of it


def test_sync_without_delay_is_the_receding_horizon() -> None:
    actions, sched, _ = _run(RealTime(), Ramp())
    assert actions[:, 0].tolist() == list(range(24))  # the consistent planner's ramp, no step held
    assert sched.plans == 24 // TA and sched.idle_steps == 0


def test_sync_holds_the_last_command_while_it_waits() -> None:
    actions, sched, _ = _run(RealTime("sync", delay_steps=2), Ramp())
    a = actions[:, 0]
    assert a[:TA].tolist() == [0, 1, 2, 3]
    assert a[TA : TA + 2].tolist() == [3, 3]  # idle: held
    assert a[TA + 2] == TA  # the plan made at step 4 starts from its first action, two steps late
    assert sched.plans == 5 and sched.idle_steps == 2 * (sched.plans - 1)  # every plan after the first waited 2
    assert set(sched.delays) == {2}


def test_async_keeps_moving_and_skips_the_past_actions() -> None:
    actions, sched, _ = _run(RealTime("async", delay_steps=2), Ramp())
    assert actions[:, 0].tolist() == list(range(24))  # the consistent planner joins seamlessly, nothing held
    assert sched.idle_steps == 0 and set(sched.delays) == {2}


def test_rtc_freezes_what_executes_meanwhile_and_smooths_the_join() -> None:
    offsets = [0.0] + [5.0, 0.0] * 5  # every new chunk disagrees with the last by 5
    naive, _, joins = _run(RealTime("async", delay_steps=2), Ramp(offsets))
    planner = Ramp(offsets)
    rtc, _, rtc_joins = _run(RealTime("rtc", delay_steps=2), planner)
    at = np.nonzero(joins[1:, 0])[0]  # steps (after the first) that switched chunks
    assert len(at) >= 4 and (rtc_joins == joins).all()
    assert np.diff(naive[:, 0])[at].tolist() == [6.0, -4.0] * (len(at) // 2) + [6.0] * (
        len(at) % 2
    )  # naive: the new chunk's own action, a jump
    # rtc: the executed action is pulled toward the old chunk by its weight (0.37 at d = 2 of 4 overlapping); a
    # trained sampler, unlike this one, also bends its free actions toward the frozen ones
    assert np.abs(np.diff(rtc[:, 0])).max() == pytest.approx(1.0 + (1 - rtc_weights(TP, TA, 2)[2]) * 5.0, abs=1e-5)
    guide = next(g for g in planner.guides if g is not None)
    actions, weights = guide
    assert weights[0, :2].tolist() == [1.0, 1.0] and weights[0, TP - TA :].tolist() == [0.0] * TA
    assert actions[0, :TA, 0].tolist() == [4.0, 5.0, 6.0, 7.0]  # the current chunk's remaining actions


def test_a_new_episode_plans_at_once_and_drops_the_plan_in_flight() -> None:
    planner = Ramp()
    sched = Scheduler(2, TP, TA, 1, planner, RealTime("async", delay_steps=3))
    for t in range(TA + 1):  # both robots start a plan at step TA
        sched.step(np.full((2, 1, 1), float(t), np.float32), None, np.array([t == 0, t == 0]))
    a = sched.step(np.full((2, 1, 1), 100.0, np.float32), None, np.array([True, False]))
    assert a[0, 0] == 100.0 and a[1, 0] == TA + 1  # robot 0 restarted from its new observation at once
    for t in range(3):
        sched.step(np.full((2, 1, 1), 101.0 + t, np.float32), None, np.array([False, False]))
    assert sched.delays == [3]  # only robot 1's plan was released


def test_temporal_ensembling_under_a_simulated_delay_averages_the_plans_that_have_arrived() -> None:
    def constant(window: np.ndarray, images: object = None) -> np.ndarray:  # the plan made at step t: all t
        return np.repeat(window[:, -1:, :1], TP, axis=1)

    ex = ChunkExecutor(1, ChunkSpec(1, TP, TA, ensemble_decay=0.0), 1, constant, RealTime("async", 2))
    got = [float(ex(np.array([[float(t)]], np.float32))[0, 0]) for t in range(6)]
    assert got == [0.0, 0.0, 0.0, 0.5, 1.0, 1.5]  # step t averages the plans of steps 0 .. t - 2 (0 from the start)


def test_temporal_ensembling_takes_no_other_schedule() -> None:
    spec = ChunkSpec(1, TP, TA, ensemble_decay=0.0)
    for timing in (RealTime("rtc", 1), RealTime("sync", 1), RealTime("sync", threaded=True), RealTime("async", TP)):
        with pytest.raises(ValueError, match="temporal ensembling"):
            ChunkExecutor(1, spec, 1, Ramp(), timing)
    with pytest.raises(ValueError, match="one of sync, async, rtc"):
        RealTime("later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole number"):
        RealTime("sync", delay_steps=-1)


class SlowRamp(Ramp):
    """A planner that finishes only when the test lets it (a robot's inference, deterministic)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def __call__(self, window: np.ndarray, images: object = None, guide: object = None) -> np.ndarray:
        if len(self.guides) > 0:  # the first (a new episode's) plan is made at once
            assert self.go.wait(5.0)
            self.go.clear()
        return super().__call__(window, images, guide)  # type: ignore[arg-type]


def test_a_threaded_planner_runs_beside_the_loop_and_its_delay_is_measured() -> None:
    planner = SlowRamp()
    sched = Scheduler(1, TP, TA, 1, planner, RealTime("async", delay_steps=1, threaded=True))
    actions = []
    for t in range(TA + 3):
        actions.append(float(sched.step(np.full((1, 1, 1), float(t), np.float32), None, np.array([t == 0]))[0, 0]))
        if t == TA + 1:
            planner.go.set()  # the plan started at step TA is done during step TA + 1
            time.sleep(0.05)
    assert actions == list(map(float, range(TA + 3)))  # the loop never waited and the join is seamless
    assert sched.delays == [2] and sched.delay == 2 and sched.idle_steps == 0
    sched.close()


def test_a_threaded_sync_loop_waits_for_its_plan() -> None:
    planner = SlowRamp()
    sched = Scheduler(1, TP, TA, 1, planner, RealTime("sync", threaded=True))
    for t in range(TA):
        sched.step(np.full((1, 1, 1), float(t), np.float32), None, np.array([t == 0]))
    threading.Timer(0.02, planner.go.set).start()
    a = sched.step(np.full((1, 1, 1), float(TA), np.float32), None, np.array([False]))
    assert a[0, 0] == TA and sched.idle_s > 0.0  # blocked until the plan came, then its first action
    sched.close()


def _ensembled(planner: Ramp, steps: int, n: int = 1, period_s: float = 0.0) -> tuple[list[list[float]], ChunkExecutor]:
    """Drive a threaded, ensembling executor whose observation is the step number (one loop period ``period_s``
    of sleep after each step): the actions ``[steps][N]`` and the executor."""
    ex = ChunkExecutor(n, ChunkSpec(1, TP, TA, ensemble_decay=-0.3), 1, planner, RealTime("async", threaded=True))
    out = []
    for t in range(steps):
        out.append([float(a) for a in ex(np.full((n, 1), float(t), np.float32))[:, 0]])
        time.sleep(period_s)
    return out, ex


def test_threaded_ensembling_averages_each_plan_in_when_it_arrives() -> None:
    """Every plan of the ramp agrees on the action of each step (the step number), whichever plans have arrived:
    the ensembled action is the step, so each plan is indexed by the step it was started at, not the one it
    arrived at. The worker planned while the loop ran, and the loop never waited."""
    actions, ex = _ensembled(Ramp(), 40, n=2, period_s=0.002)
    assert actions == [[float(t)] * 2 for t in range(40)]
    assert ex.plans >= 2 and len(ex.delays) >= 1 and ex.idle_s < 0.05  # ~0 on an idle machine; a loaded one waits
    ex.close()


def test_threaded_ensembling_waits_for_a_plan_only_when_no_kept_plan_covers_the_step() -> None:
    planner = SlowRamp()  # the first plan at once, then one only when the test lets it
    ex = ChunkExecutor(1, ChunkSpec(1, TP, TA, ensemble_decay=-0.3), 1, planner, RealTime("async", threaded=True))
    got = [float(ex(np.full((1, 1), float(t), np.float32))[0, 0]) for t in range(TP)]  # the first plan covers TP
    assert got == list(map(float, range(TP))) and ex.idle_s == 0.0
    threading.Timer(0.05, planner.go.set).start()
    assert float(ex(np.full((1, 1), float(TP), np.float32))[0, 0]) == TP  # nothing covers step TP: it waited
    assert ex.idle_s > 0.0 and ex.delays == [TP - 1]  # the plan started at step 1 came at step TP
    planner.go.set()
    ex.close()


def test_a_threaded_ensembling_planner_error_reaches_the_loop_once() -> None:
    planner = FailsOnce()
    ex = ChunkExecutor(1, ChunkSpec(1, TP, TA, ensemble_decay=-0.3), 1, planner, RealTime("async", threaded=True))
    errors, actions = 0, {}
    for t in range(3 * TP):
        try:
            actions[t] = float(ex(np.full((1, 1), float(t), np.float32))[0, 0])
        except RuntimeError:
            errors += 1
        time.sleep(0.002)  # let the worker finish (order only; nothing timed)
    assert errors == 1 and len(actions) == 3 * TP - 1  # the failed plan's step raised, once
    assert all(a == t for t, a in actions.items()) and ex.plans >= 4  # planning resumed, each plan kept its place
    ex.close()


def test_the_flow_inpaints_its_guide_and_the_graph_agrees(tmp_path: Path) -> None:
    policy = _policy(cameras=False).eval()
    rng = np.random.default_rng(1)
    obs = torch.from_numpy(rng.standard_normal((2, H.obs, policy.obs_dim)).astype(np.float32))
    noise = torch.from_numpy(rng.standard_normal((2, H.pred, policy.action_dim)).astype(np.float32))
    instruction = torch.zeros(2, policy.language_dim)
    guide = torch.from_numpy(rng.uniform(-0.5, 0.5, (2, H.pred, policy.action_dim)).astype(np.float32))
    w = torch.from_numpy(rtc_weights(H.pred, H.action, 2)).expand(2, -1).contiguous()
    with torch.no_grad():
        free = policy.predict_action_chunk(obs, noise, instruction=instruction)
        unguided = policy.predict_action_chunk(obs, noise, instruction=instruction, guide=(guide, torch.zeros_like(w)))
        guided = policy.predict_action_chunk(obs, noise, instruction=instruction, guide=(guide, w))
    assert torch.allclose(free, unguided)
    assert torch.allclose(guided[:, :2], guide[:, :2], atol=1e-5)  # frozen where the weight is 1
    assert torch.allclose(guided[:, H.pred - H.action :], free[:, H.pred - H.action :], atol=0.5)
    path = _export(policy, tmp_path, _language(["lift the red cube"]))
    spec = ChunkedOnnxPolicy(path).chunk
    assert spec.guide == {"actions": "guide", "weights": "guide_weight"}
    runtime = ChunkedOnnxPolicy(path, num_envs=2, timing=RealTime("rtc", 1, threaded=True), ensemble_decay=None)
    runtime.set_instruction("lift the red cube")
    runtime._rng = np.random.default_rng(7)
    plan = runtime.sample(obs.numpy(), None, (guide.numpy(), w.numpy()))
    eps = np.random.default_rng(7).standard_normal((2, H.pred, policy.action_dim), dtype=np.float32)
    table = _language(["lift the red cube"])["instructions"]
    assert isinstance(table, dict)
    emb = torch.tensor([table["lift the red cube"]] * 2, dtype=torch.float32)
    with torch.no_grad():
        ref = policy.predict_action_chunk(obs, torch.from_numpy(eps), instruction=emb, guide=(guide, w)).numpy()
    assert np.abs(plan - ref).max() <= 1e-4
    runtime.executor.close()


def test_rtc_is_refused_for_a_graph_that_does_not_inpaint(tmp_path: Path) -> None:
    from policies.nets.export import chunk_to_onnx_model, write_onnx
    from tests.policies.test_chunk_policies import _chunk_contract
    from tests.policies.test_chunk_policies import _policy as _diffusion

    policy = _diffusion("transformer").eval()
    contract = _chunk_contract(policy)
    path = write_onnx(chunk_to_onnx_model(policy, contract), contract, tmp_path)
    ChunkedOnnxPolicy(path, timing=RealTime("async", 2))  # any sampler runs async
    with pytest.raises(ContractError, match="real-time chunking needs a sampler that inpaints"):
        ChunkedOnnxPolicy(path, timing=RealTime("rtc", 2))
    with pytest.raises(ContractError, match="sync executes receding-horizon chunks: no temporal ensembling"):
        ChunkedOnnxPolicy(path, timing=RealTime("sync", 2), ensemble_decay=0.0)
    asked = ChunkedOnnxPolicy(path, timing=RealTime("async", 2), ensemble_decay=0.0)  # ensembled under the delay
    assert asked.executor.spec.ensemble_decay == 0.0
    ensembled = dataclasses.replace(contract, chunk=dataclasses.replace(contract.chunk, ensemble_decay=-0.3))
    path = write_onnx(chunk_to_onnx_model(policy, ensembled), ensembled, tmp_path / "ensembled")
    assert ChunkedOnnxPolicy(path).executor.spec.ensemble_decay == -0.3
    assert ChunkedOnnxPolicy(path, timing=RealTime("sync", 2)).executor.spec.ensemble_decay is None  # receding
    kept = ChunkedOnnxPolicy(path, timing=RealTime("async", threaded=True))  # averaged in as each plan arrives
    assert kept.executor.spec.ensemble_decay == -0.3
    kept.executor.close()


class FailsOnce(Ramp):
    """A planner whose second plan fails (the graph returned a bad chunk)."""

    def __call__(self, window: np.ndarray, images: object = None, guide: object = None) -> np.ndarray:
        plan = super().__call__(window, images, guide)  # type: ignore[arg-type]
        if len(self.guides) == 2:
            raise RuntimeError("bad chunk")
        return plan


@pytest.mark.parametrize("threaded", [False, True], ids=["simulated", "threaded"])
def test_a_planner_error_reaches_the_loop_and_the_next_step_plans_again(threaded: bool) -> None:
    sched = Scheduler(1, TP, TA, 1, FailsOnce(), RealTime("async", 1, threaded=threaded))
    errors, actions = 0, []
    for t in range(3 * TP):
        try:
            actions.append(float(sched.step(np.full((1, 1, 1), float(t), np.float32), None, np.array([t == 0]))[0, 0]))
        except RuntimeError:
            errors += 1
        time.sleep(0.002 if threaded else 0.0)  # let the worker finish (order only; nothing timed)
    assert errors == 1 and len(actions) == 3 * TP - 1
    assert len(sched.delays) >= 2 and sched.idle_steps < TP  # planning resumed; the chunks kept the robot moving
    sched.close()
