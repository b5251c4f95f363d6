"""Run action-chunk policies (diffusion, chunked behaviour cloning): numpy + onnxruntime only.

A chunk policy plans ``Tp`` actions from the last ``To`` observations; the robot executes ``Ta`` of them, one per
control period, then plans again (receding horizon)::

    step      0   1   2   3   4   5   6   7   8 ...
    plan      P0              P1              P2          (Ta = 4)
    executed  P0[0] P0[1] P0[2] P0[3] P1[0] ...

or, with temporal ensembling (``ensemble_decay`` = ``m``), plans every step and averages, for each step, the
actions every still-valid plan made for it, weighting each older plan ``exp(m)`` times more than the next newer
(``m > 0`` as in Zhao et al. 2023, ACT; ``m < 0`` favours the newest plans, which averages out a stochastic
sampler's draw-to-draw jitter while staying close to closed loop). Every action is mapped to a command *at the
step it is applied*, so a relative command (``action.reference``) uses the measurement of that step.

:class:`ChunkExecutor` is the scheduling alone (any sampler: the simulator's torch policy in evaluation, the
ONNX graph on the robot); :class:`ChunkedOnnxPolicy` is the exported file behind the same call interface as
:class:`~policies.runtime.onnx_policy.OnnxPolicy`::

    policy = ChunkedOnnxPolicy("runs/panda-reach/.../policy.onnx")
    policy.self_test()
    while running:
        command = policy({"joint_pos": q, "joint_vel": dq, ...})   # [1, A], one control period
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from policies.runtime.contract import ChunkSpec, ContractError
from policies.runtime.observation import ObservationBuilder
from policies.runtime.onnx_policy import PROBE_SCALES, PROBE_SEED, OnnxPolicy, UnsafeCommandError, load_contract
from policies.runtime.realtime import RealTime, Scheduler
from policies.runtime.text import TextError, check_instruction, printable

Sampler = Callable[..., np.ndarray]
"""``sample(window) -> actions``: ``obs window [N, To, D_o] -> [N, Tp, D_a]`` in normalised units; for a policy that
sees cameras, ``sample(window, images)`` with ``images`` camera -> ``uint8 [N, To, H, W, 3]`` windows; with
real-time chunking (``rtc``), also ``guide=(actions [N, Tp, D_a], weights [N, Tp])`` to inpaint."""


class _History:
    """The last ``length`` samples of each of ``N`` robots, oldest first; a fresh robot's history is its newest
    sample repeated (what the robot has right after a reset). Shapes: ``[N, ...] -> [N, length, ...]``."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.buffer: np.ndarray | None = None

    def push(self, x: np.ndarray, fresh: np.ndarray) -> np.ndarray:
        if self.buffer is None or self.buffer.shape[2:] != x.shape[1:] or self.buffer.dtype != x.dtype:
            self.buffer = np.repeat(x[:, None], self.length, axis=1)
        self.buffer[:, :-1] = self.buffer[:, 1:].copy()
        self.buffer[:, -1] = x
        self.buffer[fresh] = x[fresh, None]
        return self.buffer


class ChunkExecutor:
    """Receding-horizon (or temporally ensembled) execution of action chunks for ``N`` robots.

    Args:
        num_envs: Robots ``N`` (each keeps its own history and plan).
        spec: Horizons and ensembling (the contract's ``chunk`` section).
        action_dim: ``D_a``.
        sample: The planner (see :data:`Sampler`); called with all ``N`` windows when any robot needs a plan.
        timing: How receding-horizon plans are timed against the loop (:mod:`policies.runtime.realtime`: sync,
            async or real-time chunking, a simulated or a threaded planner); ``None``: sync without delay. With
            temporal ensembling only ``async`` applies: simulated, each period's plan joins the average
            ``delay_steps`` periods later; threaded, a worker plans from the newest observations whenever it is
            free and each plan joins the average when it arrives (the loop waits only for a robot none of whose
            plans still covers this step). A new episode's first plan is made at once.

    Shapes: ``obs [N, D_o]`` (and camera images ``uint8 [N, H, W, 3]`` each) ``-> action [N, D_a]`` per control
    period.
    """

    def __init__(
        self, num_envs: int, spec: ChunkSpec, action_dim: int, sample: Sampler, timing: RealTime | None = None
    ) -> None:
        self.num_envs = num_envs
        self.spec = spec
        self.action_dim = action_dim
        self.sample = sample
        self._ensemble_plans = 0
        n, tp = num_envs, spec.pred_horizon
        self._lag = 0
        """Ensembling under a simulated delay: each period's plan is used from this many periods later."""
        self._pool: ThreadPoolExecutor | None = None
        """Ensembling with a threaded planner: the worker."""
        self._future: Future[np.ndarray] | None = None
        self._future_rows = np.zeros(n, bool)  # the robots the plan in flight is for ...
        self._future_made = np.zeros(n, np.int64)  # ... and the step it was started at
        self._ensemble_idle_s = 0.0
        self._ensemble_delays: list[int] = []
        if spec.ensemble_decay is not None and timing not in (None, RealTime()):
            assert timing is not None
            if timing.mode != "async" or (not timing.threaded and timing.delay_steps >= tp):
                raise ValueError(
                    "temporal ensembling plans every step: of the schedules only async applies to it, simulated with a "
                    "delay shorter than the chunk or threaded (sync and real-time chunking need it off)"
                )
            if timing.threaded:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="robot-rl-ensemble")
            else:
                self._lag = timing.delay_steps
        self.scheduler = Scheduler(n, tp, spec.action_horizon, action_dim, self._plan_all, timing or RealTime())
        """Receding-horizon execution (its counters: idle steps and seconds, delays)."""
        self._hist = _History(spec.obs_horizon)
        self._image_hist: dict[str, _History] = {}
        self._fresh = np.ones(n, dtype=bool)
        self._rows = np.arange(n)
        self._step = np.zeros(n, dtype=np.int64)
        self._ring = np.zeros((n, tp, tp, action_dim), dtype=np.float32)  # [robot, plan slot, k, action]
        self._made = np.full((n, tp), -(1 << 40), dtype=np.int64)  # step at which each slot's plan was made
        self._due = np.zeros((n, tp), dtype=np.int64)  # step from which each slot's plan may be used

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start new episodes for robots in ``mask`` (all if ``None``): history refilled, plans dropped."""
        self._fresh[slice(None) if mask is None else np.asarray(mask, dtype=bool)] = True

    @property
    def plans(self) -> int:
        """Plans made so far."""
        return self._ensemble_plans + self.scheduler.plans

    @property
    def idle_s(self) -> float:
        """Seconds the control loop waited for a threaded planner."""
        return self._ensemble_idle_s + self.scheduler.idle_s

    @property
    def delays(self) -> list[int]:
        """Each released plan's delay, control periods (timed schedules)."""
        return self._ensemble_delays + self.scheduler.delays

    def close(self) -> None:
        """Stop a threaded planner, dropping a plan in flight."""
        self.scheduler.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _plan_all(
        self,
        window: np.ndarray,
        images: dict[str, np.ndarray] | None,
        guide: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        args = (window,) if images is None else (window, images)
        plan = np.asarray(self.sample(*args) if guide is None else self.sample(*args, guide=guide), dtype=np.float32)
        want = (self.num_envs, self.spec.pred_horizon, self.action_dim)
        if plan.shape != want:
            raise UnsafeCommandError(f"the planner returned {list(plan.shape)}, expected {list(want)}")
        return plan

    def __call__(self, obs: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """The action ``[N, D_a]`` of this control period for the newest observations ``[N, D_o]`` (and, for a
        policy that sees cameras, the newest images ``uint8 [N, H, W, 3]`` per camera)."""
        window = self._hist.push(np.asarray(obs, dtype=np.float32), self._fresh)
        image_windows = None
        if images is not None:
            image_windows = {
                c: self._image_hist.setdefault(c, _History(self.spec.obs_horizon)).push(np.asarray(x), self._fresh)
                for c, x in images.items()
            }
        fresh = self._fresh.copy()
        self.fresh = fresh
        """Robots whose episode began at this call ``[N]``."""
        self._fresh[:] = False
        self._step[fresh] = 0
        if self.spec.ensemble_decay is None:
            return self.scheduler.step(window, image_windows, fresh)
        self._made[fresh] = -(1 << 40)
        try:
            if self._pool is None:
                self._ensemble_plans += 1
                lag = np.where(fresh, 0, self._lag)  # a new episode's first plan at once
                self._insert(np.ones(self.num_envs, bool), self._plan_all(window, image_windows), self._step, lag)
            else:
                self._threaded_plans(window, image_windows, fresh)
            return self._ensembled()
        finally:  # a period passes even when a planner's error is raised: the kept plans stay on the clock
            self._step += 1

    # ------------------------------------------------------------------------------------ temporal ensembling
    def _insert(self, rows: np.ndarray, plan: np.ndarray, made: np.ndarray, lag: np.ndarray | int = 0) -> None:
        """Keep ``rows``' plans ``[N, Tp, D_a]`` made at steps ``made [N]``, usable from ``lag`` steps after that (a
        threaded plan that arrives later is usable at once)."""
        r = self._rows[rows]
        slot = made[r] % self.spec.pred_horizon
        self._ring[r, slot] = plan[r]
        self._made[r, slot] = made[r]
        self._due[r, slot] = (made + lag)[r]

    def _valid(self) -> np.ndarray:
        """``[N, slots]``: the kept plans that cover this step and may be used."""
        offset = self._step[:, None] - self._made
        return (offset >= 0) & (offset < self.spec.pred_horizon) & (self._step[:, None] >= self._due)

    def _ensembled(self) -> np.ndarray:
        """This step's action ``[N, D_a]``: the weighted mean of what every valid plan made for it."""
        tp = self.spec.pred_horizon
        offset = self._step[:, None] - self._made  # [N, slots]: how many steps ago each plan was made
        k = np.clip(offset, 0, tp - 1)
        actions = self._ring[self._rows[:, None], np.arange(tp)[None, :], k]  # [N, slots, D_a]
        logit = np.where(self._valid(), self.spec.ensemble_decay * k, -np.inf)
        weight = np.exp(logit - logit.max(1, keepdims=True))  # one plan always valid: no 0/0, no overflow
        return (np.einsum("ns,nsa->na", weight, actions) / weight.sum(1, keepdims=True)).astype(np.float32)

    def _threaded_plans(self, window: np.ndarray, images: dict[str, np.ndarray] | None, fresh: np.ndarray) -> None:
        """Threaded ensembling: plan new episodes at once, take in the plan that arrived, start the next one when
        the worker is free, and wait only for robots that no kept plan covers at this step."""
        self._future_rows &= ~fresh  # a new episode drops the plan in flight for its robot
        if fresh.any():
            self._ensemble_plans += 1
            self._insert(fresh, self._plan_all(window, images), self._step)
        self._collect(wait=False)
        if self._future is None and (~fresh).any():
            assert self._pool is not None
            frozen = {c: x.copy() for c, x in images.items()} if images is not None else None  # the loop refills
            self._future = self._pool.submit(self._plan_all, window.copy(), frozen)
            self._future_rows, self._future_made = ~fresh, self._step.copy()
            self._ensemble_plans += 1
        starving = np.logical_not(self._valid().any(1))
        if starving.any():  # a plan slower than a whole chunk: the loop waits for it
            self._collect(wait=True)
            starving = np.logical_not(self._valid().any(1))
        if starving.any():  # nothing in flight for them either (it was dropped): plan at once
            self._ensemble_plans += 1
            self._insert(starving, self._plan_all(window, images), self._step)

    def _collect(self, wait: bool) -> None:
        """Keep the plan in flight if it is ready (``wait``: block until it is; the wait is idle time). A planner's
        error reaches the loop here, once; the next step starts a new plan."""
        if self._future is None or not (wait or self._future.done()):
            return
        future, self._future, t0 = self._future, None, time.perf_counter()
        try:
            plan = future.result()
        finally:
            self._ensemble_idle_s += time.perf_counter() - t0 if wait else 0.0
        rows = self._future_rows
        self._insert(rows, plan, self._future_made)
        self._ensemble_delays.extend(int(d) for d in (self._step - self._future_made)[rows])


class ChunkedOnnxPolicy(OnnxPolicy):
    """An exported action-chunk policy, verified against its contract, mapping robot signals to commands.

    Same interface as :class:`~policies.runtime.onnx_policy.OnnxPolicy` (``reset``, ``__call__``,
    ``check_signals``, ``normalized_action``, ``self_test``); one call is one control period.

    Args:
        path: ONNX file written by ``robot-rl export onnx`` for a chunk policy.
        num_envs: Robots ``N``.
        seed: Seed of the sampler's noise (numpy ``default_rng``).
        providers, intra_op_threads: As for :class:`OnnxPolicy`.
        ensemble_decay: Override of the contract's temporal ensembling (``None``: the contract's).
        control_period_s: As for :class:`OnnxPolicy`.
        timing: Schedule (:class:`~policies.runtime.realtime.RealTime`; e.g. ``RealTime("rtc", threaded=True)``:
            the next chunk computed on a worker thread while the current one executes, inpainted to join it). A
            contract that ensembles keeps ensembling with ``async`` (a worker plans from the newest observations
            whenever it is free; each plan joins the average when it arrives), or ensembles with ``ensemble_decay``;
            ``sync`` and ``rtc`` turn it off and take no ``ensemble_decay``.

    Raises:
        FileNotFoundError, PolicyFileError, ContractError: As for :class:`OnnxPolicy`; also a contract without
            a ``chunk`` section, a graph whose inputs and output do not match it, or real-time chunking asked of
            a graph that does not inpaint (no ``chunk.guide``).
    """

    def __init__(
        self,
        path: str | Path,
        num_envs: int = 1,
        seed: int = 0,
        providers: Sequence[str] | None = None,
        intra_op_threads: int = 1,
        ensemble_decay: float | None = None,
        control_period_s: float | None = None,
        timing: RealTime | None = None,
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._rng_lock = threading.Lock()  # the loop's and a threaded planner's draws
        super().__init__(path, num_envs, providers, intra_op_threads, control_period_s)
        spec = self.chunk
        dim = int(spec.language.get("dim", 0))
        self._instruction = np.zeros((num_envs, dim), np.float32)
        """Each robot's instruction embedding ``[N, D_l]`` (a language-conditioned policy)."""
        self._instructed = np.zeros(num_envs, bool)
        self.instructions: list[str] = [""] * num_envs
        """Each robot's current instruction text (``""``: none yet)."""
        if timing is not None:
            if ensemble_decay is not None and timing.mode != "async":
                raise ContractError(f"{timing.mode} executes receding-horizon chunks: no temporal ensembling")
            if timing.mode == "rtc" and not spec.guide:
                raise ContractError(f"{self.path}: real-time chunking needs a sampler that inpaints (no chunk.guide)")
            if timing.mode != "async":  # async keeps the contract's ensembling (each plan averaged in on arrival)
                spec = ChunkSpec(**{**spec.__dict__, "ensemble_decay": None})
        if ensemble_decay is not None:
            spec = ChunkSpec(**{**spec.__dict__, "ensemble_decay": ensemble_decay})
        self.executor = ChunkExecutor(num_envs, spec, self.num_actions, self.sample, timing)

    @property
    def chunk(self) -> ChunkSpec:
        """The contract's chunk section."""
        assert self.contract.chunk is not None
        return self.contract.chunk

    def _verify_graph(self) -> None:
        c = self.contract.chunk
        if c is None:
            raise ContractError(f"{self.path} is not an action-chunk policy (no contract section 'chunk')")
        want_in = {self.contract.input_name: [c.obs_horizon, self.contract.obs_dim]}
        if c.noise_input:
            want_in[c.noise_input] = [c.pred_horizon, self.contract.action.size]
        images = {cam["input"]: [c.obs_horizon, *c.image_shape(name)] for name, cam in c.cameras.items()}
        want_in.update(images)
        if c.language:
            want_in[c.language["input"]] = [int(c.language["dim"])]
        if c.guide:
            want_in[c.guide["actions"]] = [c.pred_horizon, self.contract.action.size]
            want_in[c.guide["weights"]] = [c.pred_horizon]
        ports = {p.name: p for p in self._session.get_inputs()}
        if set(ports) != set(want_in):
            raise ContractError(f"model inputs are {sorted(ports)}, the contract expects {sorted(want_in)}")
        outputs = self._session.get_outputs()
        if [p.name for p in outputs] != [self.contract.output_name]:
            raise ContractError(
                f"model outputs are {[p.name for p in outputs]}, the contract expects '{self.contract.output_name}'"
            )
        want = {**want_in, self.contract.output_name: [c.pred_horizon, self.contract.action.size]}
        for port in [*ports.values(), outputs[0]]:
            shape = list(port.shape)
            dtype = "uint8" if port.name in images else "float"
            if (
                port.type != f"tensor({dtype})"
                or len(shape) != 1 + len(want[port.name])
                or any(isinstance(d, int) and d != w for d, w in zip(shape[1:], want[port.name], strict=True))
            ):
                raise ContractError(
                    f"model port '{port.name}' is {port.type} {shape}, the contract expects {dtype} [batch, "
                    f"{', '.join(map(str, want[port.name]))}]"
                )

    def sample(
        self,
        window: np.ndarray,
        images: Mapping[str, np.ndarray] | None = None,
        guide: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """One plan per row: ``window [B, To, obs_dim]`` (and each camera's ``uint8 [B, To, H, W, 3]`` images) ->
        normalised actions ``[B, Tp, A]`` (checked); ``guide``: actions ``[B, Tp, A]`` and weights ``[B, Tp]`` to
        inpaint (a graph with ``chunk.guide``; none: zero weights).

        Raises:
            UnsafeCommandError: The graph returned non-finite actions or actions outside ``[-1, 1]``.
        """
        c = self.chunk
        feed = {self.contract.input_name: np.ascontiguousarray(window, dtype=np.float32)}
        for name, cam in c.cameras.items():
            feed[cam["input"]] = np.ascontiguousarray((images or {})[name], dtype=np.uint8)
        shape = (window.shape[0], c.pred_horizon, self.num_actions)
        if c.noise_input:
            with self._rng_lock:
                feed[c.noise_input] = self._rng.standard_normal(shape, dtype=np.float32) * np.float32(c.noise_scale)
        if c.guide:
            actions, weights = guide if guide is not None else (np.zeros(shape), np.zeros(shape[:2]))
            feed[c.guide["actions"]] = np.ascontiguousarray(actions, dtype=np.float32)
            feed[c.guide["weights"]] = np.ascontiguousarray(weights, dtype=np.float32)
        elif guide is not None:
            raise ContractError("this policy's graph does not inpaint (no chunk.guide)")
        if c.language:
            rows = window.shape[0]
            if rows == self.num_envs:
                feed[c.language["input"]] = self._instruction
            else:  # a probe: every known instruction in turn
                table = np.asarray(list(c.language["instructions"].values()) or [[0.0] * self._instruction.shape[1]])
                feed[c.language["input"]] = table[np.arange(rows) % len(table)].astype(np.float32)
        (plan,) = self._session.run([self.contract.output_name], feed)
        plan = np.asarray(plan, dtype=np.float32)
        if not np.isfinite(plan).all() or np.abs(plan).max(initial=0.0) > 1.0 + 1e-6:
            raise UnsafeCommandError("the graph returned a non-finite or out-of-range action chunk; nothing was sent")
        return plan

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start new episodes for robots in ``mask``: observation histories and plans are dropped."""
        super().reset(mask)
        self.executor.reset(mask)

    def __call__(self, signals: Mapping[str, Any], images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Commands ``[N, A]`` for named robot signals (and, for a policy that sees cameras, each camera's newest
        ``uint8 [N, H, W, 3]`` RGB image by camera name).

        Raises:
            ContractError: A signal or image is invalid or missing; nothing was run.
            UnsafeCommandError: The graph produced a non-finite or out-of-range plan (never executed).
        """
        return self.run_obs(self.observation(signals), images)

    def set_instruction(self, text: str, robots: np.ndarray | None = None) -> None:
        """Give ``robots`` (a bool mask ``[N]``; all if ``None``) the instruction ``text``; it takes effect at each
        robot's next plan (a chunk being executed is finished first).

        Raises:
            ContractError: The policy reads no instruction, ``text`` is not instruction text, or it is not one of
                the contract's instructions (``chunk.language.instructions``: a new phrasing needs the encoder,
                :meth:`set_instruction_embedding`).
        """
        lang = self.chunk.language
        if not lang:
            raise ContractError("this policy reads no language instruction")
        try:
            check_instruction(text)
        except TextError as exc:
            raise ContractError(str(exc)) from None
        table = lang["instructions"]
        if text not in table:
            known = "; ".join(f"'{t}'" for t in list(table)[:6]) + (" ..." if len(table) > 6 else "")
            raise ContractError(
                f"instruction '{printable(text[:80])}' is not in the policy's table ({len(table)} known: {known}); "
                "embed it with the policy's encoder (chunk.language.encoder) and call set_instruction_embedding"
            )
        self._assign(robots, np.asarray(table[text], np.float32), text)

    def set_instruction_embedding(self, embedding: np.ndarray, robots: np.ndarray | None = None) -> None:
        """Give ``robots`` an instruction by its embedding ``[D_l]`` (computed with the contract's encoder).

        Raises:
            ContractError: The policy reads no instruction, or the embedding has another width or is not finite.
        """
        dim = self._instruction.shape[1]
        if not dim:
            raise ContractError("this policy reads no language instruction")
        e = np.asarray(embedding, np.float32)
        if e.shape != (dim,) or not np.isfinite(e).all():
            raise ContractError(f"an instruction embedding must be {dim} finite values, got shape {list(e.shape)}")
        self._assign(robots, e, "(embedding)")

    def nearest_instruction(self, embedding: np.ndarray) -> tuple[str, float]:
        """The contract's instruction text nearest to ``embedding [D_l]`` and its Euclidean distance (in the
        encoder's space, float64): how far an embedded text lies from everything the policy was trained on.

        Raises:
            ContractError: The policy reads no instruction, its table is empty, or the embedding has another width.
        """
        table = self.chunk.language.get("instructions") if self.chunk.language else None
        if not table:
            raise ContractError("this policy has no instruction table to compare an embedding with")
        texts = list(table)
        rows = np.asarray([table[t] for t in texts], np.float64).reshape(len(texts), -1)
        e = np.asarray(embedding, np.float64).reshape(-1)
        if e.shape[0] != rows.shape[1]:
            raise ContractError(f"an instruction embedding must be {rows.shape[1]} values, got {e.shape[0]}")
        distances = np.linalg.norm(rows - e, axis=1)
        i = int(distances.argmin())
        return texts[i], float(distances[i])

    def _assign(self, robots: np.ndarray | None, embedding: np.ndarray, text: str) -> None:
        mask = np.ones(self.num_envs, bool) if robots is None else np.asarray(robots, bool)
        instruction = self._instruction.copy()  # swapped whole: a threaded planner never reads half an update
        instruction[mask] = embedding
        self._instruction = instruction
        self._instructed[mask] = True
        for i in np.nonzero(mask)[0]:
            self.instructions[i] = text

    def check_images(self, images: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """The images of every camera the contract names, checked: ``uint8 [N, H, W, 3]`` each.

        Raises:
            ContractError: A camera's image is missing, has another shape or type, or an unknown camera is given.
        """
        cams = self.chunk.cameras
        given = dict(images or {})
        if not cams:
            if given:
                raise ContractError(f"this policy sees no cameras, got images of {sorted(given)}")
            return None
        if set(given) != set(cams):
            raise ContractError(f"this policy needs images of cameras {sorted(cams)}, got {sorted(given)}")
        out = {}
        for name in cams:
            x = np.asarray(given[name])
            want = (self.num_envs, *self.chunk.image_shape(name))
            if x.dtype != np.uint8 or x.shape != want:
                raise ContractError(
                    f"camera '{name}' images must be uint8 {list(want)} RGB, got {x.dtype} {list(x.shape)}"
                )
            out[name] = x
        return out

    def run_obs(self, obs: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Commands ``[N, A]`` for this control period from the newest policy inputs ``[N, obs_dim]`` (and images,
        see :meth:`__call__`)."""
        x = np.ascontiguousarray(np.asarray(obs, dtype=np.float32))
        if x.shape != (self.num_envs, self.obs_dim):
            raise ContractError(f"policy input must have shape [{self.num_envs}, {self.obs_dim}], got {x.shape}")
        if not np.isfinite(x).all():
            raise ContractError("policy input holds a non-finite value; nothing was run")
        if self.chunk.language and not self._instructed.all():
            missing = np.nonzero(~self._instructed)[0].tolist()
            raise ContractError(f"no instruction for robot(s) {missing[:8]}: call set_instruction first")
        return self.command(self.executor(x, self.check_images(images)), x)

    def grey_images(self, batch: int) -> dict[str, np.ndarray] | None:
        """Mid-grey images ``uint8 [batch, H, W, 3]`` of every camera (``None`` for a policy without cameras), for
        probes, self-tests and warm-ups."""
        c = self.chunk
        if not c.cameras:
            return None
        return {name: np.full((batch, *c.image_shape(name)), 128, np.uint8) for name in c.cameras}

    def command(self, action: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Contract mapping of normalised actions ``[N, A]`` with the reference read from ``obs [N, obs_dim]``."""
        ref = self.reference(obs)
        command = np.clip(self._offset + ref + self._scale * np.clip(action, -1.0, 1.0), self._low, self._high)
        self._last_reference = ref
        return self._check_command(command.astype(np.float32))

    def self_test(self) -> np.ndarray:
        """Plan once on all-zero signals with a fresh builder and executor (the policy's state is untouched)."""
        signals = {t.source: np.zeros((self.num_envs, t.size), dtype=np.float32) for t in self.contract.observation}
        try:
            obs = np.asarray(ObservationBuilder.for_contract(self.contract, self.num_envs)(signals))
            executor = ChunkExecutor(self.num_envs, self.chunk, self.num_actions, self.sample)
            action = executor(obs, self.grey_images(self.num_envs))
            return self.command(action, obs)
        except ContractError as exc:
            raise RuntimeError(f"self-test failed: {exc}") from exc

    def _verify_action_mapping(self) -> None:
        """Probe the sampler with random windows of growing magnitude: every plan finite and in ``[-1, 1]``."""
        rng = np.random.default_rng(PROBE_SEED)
        to = self.chunk.obs_horizon
        shape = (4, to, self.obs_dim)
        images = {
            name: rng.integers(0, 256, (4, to, *self.chunk.image_shape(name)), np.uint8) for name in self.chunk.cameras
        }
        for magnitude in PROBE_SCALES:
            try:
                self.sample((magnitude * rng.standard_normal(shape)).astype(np.float32), images)
            except UnsafeCommandError as exc:
                raise ContractError(f"the graph does not honour the contract: {exc}") from None


def open_policy(path: str | Path, num_envs: int = 1, **kwargs: object) -> OnnxPolicy:
    """The right runner for an exported policy: :class:`ChunkedOnnxPolicy` when its contract has a ``chunk``
    section, :class:`~policies.runtime.onnx_policy.OnnxPolicy` otherwise (same call interface).

    Raises:
        FileNotFoundError, PolicyFileError, ContractError: As the runners do; also a chunk schedule (``timing``)
            asked of a policy that plans no chunks.
    """
    if load_contract(path).chunk is not None:
        return ChunkedOnnxPolicy(path, num_envs, **kwargs)  # type: ignore[arg-type]
    if kwargs.pop("timing", None) is not None:
        raise ContractError(f"{path}: a chunk schedule applies to action-chunk policies; this model plans no chunks")
    return OnnxPolicy(path, num_envs, **kwargs)  # type: ignore[arg-type]
