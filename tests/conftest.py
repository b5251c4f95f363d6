"""Fixtures shared by the whole suite: one trained quadrotor hover policy and one trained Panda reach policy,
each trained once per test session.

Training takes minutes on 2 cores, so each run is made once and shared by every test (and every pytest-xdist worker)
that needs a *working* policy: the learning tests, the exported-ONNX closed loop, the firmware closed loop, the
ROS 2 node and the PyBullet sim-to-sim evaluation.
A file lock in pytest's shared temporary folder makes the first worker train and the others wait for its result.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# The suite runs torch.compile'd code eagerly (this process and every subprocess it starts): configs that ship
# `compile: true` would otherwise compile anew for each test's world count (seconds to tens of seconds apiece).
# tests/robot_rl/test_compile.py switches it back on and checks the compiled code against the eager code.
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

import pytest
import torch
import torch._dynamo
from filelock import FileLock

torch._dynamo.config.disable = os.environ["TORCH_COMPILE_DISABLE"] == "1"

HOVER_OVERRIDES = [
    "num_envs=4096",
    "runner.max_iterations=230",
    "runner.max_time_s=null",
    "runner.eval_interval=10",
    "runner.stop_on_success=false",
]
"""A fixed 230 iterations of 8 steps in 4,096 worlds (7.5 M steps), not "until the quality bar" and not the config's
300 s wall-clock budget: under that budget the policy depended on the machine's load (a loaded CI worker stopped
after 294 iterations, a quieter run went on to 385; their metrics agreed row for row up to 294, so the training
itself is deterministic). Measured 2026-11-27 with the position integral's band: the criterion is first met after
160 iterations, the KL target then drops to the config's ``ppo.refine_kl``, and the selection evaluations meet the
quality bar, confirmed over 1,024 episodes, at iterations 210, 220 and 230; the run keeps 230 (``best.pt``;
confirmation 99.6 % crash-free, 1.68 cm). A 280-iteration run kept the same one, so the last 50 iterations (about
40 s) are not trained. On the evaluation seeds with randomisation on (256 episodes) it holds 98.8 % crash-free,
1.94 cm tail error, 96.9 % success (before the band: 99.6 %, 2.9 cm, 94.9 %). ``test_transfer`` flies it in
PyBullet within 5 cm. Without the KL switch and the best checkpoint the last policy of an earlier config held
5.007 cm in PyBullet and failed that check. The world count is pinned because
these figures were measured with 4,096 (the shipped config trains 2,048)."""


@dataclass(frozen=True)
class TrainedRun:
    """A finished training run: its folder, exported policy and evaluations before and after training."""

    run_dir: Path
    onnx: Path
    before: dict[str, float]
    after: dict[str, float]
    overrides: tuple[str, ...] = tuple(HOVER_OVERRIDES)


REACH_OVERRIDES = [
    "runner.max_iterations=110",
    "runner.max_time_s=null",
    "runner.eval_interval=0",
    "runner.stop_on_success=false",
]
"""A fixed 110 iterations (1.35 M steps), not "until the criterion" nor the config's wall-clock budget: seed 0 first
meets the criterion (>= 90 % success, randomisation on) after 50 iterations, and a policy that just met it made the
20-episode ROS 2 loop at 250 Hz pass by one episode (16 of 20 against 15). Iteration 110 is the first whose selection
evaluation succeeds in every episode (measured 2026-11-27; a 120-iteration run kept the same one, so the last 10
iterations, about 30 s on a loaded CI worker, are not trained). The fixture runs no selection evaluations and keeps
the last iteration, the same one: they do not change the training (the reach config has no ``ppo.refine_kl``; the
weights after 20 iterations with and without them are identical, 2026-11-28), and ten of them cost about 34 s."""


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside the block: a training's result then does not depend on how many threads the test
    worker has (a fixed seed gives the same policy on every run; MuJoCo batches are deterministic at any count)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _train(task: str, overrides: list[str], root: Path) -> dict[str, object]:
    from robot_rl.config import load_config
    from robot_rl.runner import OnPolicyRunner
    from robot_rl.runs.ppo import PPORun

    with one_torch_thread():
        cfg = load_config(task, None, [*overrides, f"run_root={root}"])
        run_dir = root / "run"
        run_dir.mkdir(parents=True)
        runner = OnPolicyRunner(cfg, run_dir, quiet=True)
        before = runner.evaluate(randomize=True).summary()
        runner.train()
        kept = PPORun.load(run_dir)  # the policy `robot-rl train` exports: best.pt if training kept one
        runner.model.load_state_dict(kept.model.state_dict())
        after = runner.evaluate(randomize=True).summary()
        onnx = kept.export()
    return {"run_dir": str(run_dir), "onnx": str(onnx), "before": before, "after": after}


def _shared_run(factory: pytest.TempPathFactory, task: str, overrides: list[str]) -> TrainedRun:
    # xdist workers share their session's folder (the parent of theirs); a run without xdist keeps to its own:
    # the parent of its folder holds every earlier session's, and a policy trained by older code would be reused.
    base = factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"trained-{task}"
    shared.mkdir(exist_ok=True)
    done = shared / "result.json"
    with FileLock(str(shared / "lock")):
        if not done.exists():
            done.write_text(json.dumps(_train(task, overrides, shared / "train")))
    data = json.loads(done.read_text())
    return TrainedRun(Path(data["run_dir"]), Path(data["onnx"]), data["before"], data["after"], tuple(overrides))


@pytest.fixture(scope="session")
def trained_hover(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The quadrotor hover policy after the learning test's budget (trained once, shared across workers)."""
    return _shared_run(tmp_path_factory, "quadrotor-hover", HOVER_OVERRIDES)


@pytest.fixture(scope="session")
def trained_reach(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The Panda reach policy after its learning test's budget (trained once, shared across workers)."""
    return _shared_run(tmp_path_factory, "panda-reach", REACH_OVERRIDES)


@pytest.fixture
def trainings_finished(trained_hover: TrainedRun, trained_reach: TrainedRun) -> None:
    """Wait until both training fixtures are trained: the real-time DDS loops that judge flight quality use it, so
    that no training runs beside them (beside the reach training, MuJoCo on both cores, the hover loop over DDS ended
    5.6 cm off against its 5 cm bar in CI, 2026-11-27; it holds well inside the bar on a machine that keeps pace)."""


class Ran(NamedTuple):
    """What a ``robot-rl`` command run by :func:`robot_rl` returned and printed (as ``subprocess.run`` has it)."""

    returncode: int
    stdout: str
    stderr: str


def robot_rl(*args: str | Path) -> Ran:
    """``robot-rl ARGS`` in this process: its exit status and what it printed. A subprocess would cost the
    interpreter's start and the imports of torch, MuJoCo and diffusers (3-6 s a command; the suite runs the CLI
    about 50 times). Where the process is what is tested, tests start it: Ctrl-C in ``test_hardening.py``, the
    installed script in ``test_recording.py``, a student's training in ``test_bc_cli.py``."""
    from robot_rl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's refusals (2) and --help (0), as the interpreter maps them
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Ran(code, out.getvalue(), err.getvalue())


def export_untrained(task: str, folder: Path) -> Path:
    """An untrained actor of ``task``, exported with the task's contract: for tests of what runs a policy (nodes,
    recordings, exports) that do not depend on its skill, so they need not wait for a training fixture."""
    import sim
    from policies.nets import ActorCritic
    from policies.nets.export import export_onnx

    env = sim.make(task, 1)
    model = ActorCritic(env.obs_sizes["policy"], env.obs_sizes["critic"], env.num_actions)  # type: ignore[attr-defined]
    return export_onnx(model, env.contract(["policy"]), folder)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def untrained_hover(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained quadrotor hover policy, exported (see :func:`export_untrained`)."""
    return export_untrained("quadrotor-hover", tmp_path_factory.mktemp("untrained-hover"))


@pytest.fixture(scope="session")
def untrained_reach(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained Panda reach policy, exported (see :func:`export_untrained`)."""
    return export_untrained("panda-reach", tmp_path_factory.mktemp("untrained-reach"))


@pytest.fixture(scope="session")
def untrained_quadruped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained A1 velocity policy, exported (see :func:`export_untrained`)."""
    return export_untrained("quadruped-velocity", tmp_path_factory.mktemp("untrained-quadruped"))


TRAINING_FIXTURES = ("trained_hover", "trained_reach")
"""Session fixtures that train for minutes (one worker trains, any other that needs it waits on the file lock)."""


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``--dist loadgroup`` on a pytest whose node ids xdist cannot tag: its ``xdist_group`` marks would be
    dropped silently, and the real-time DDS tests (``ros2-closed-loop``) would run beside each other."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    if pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} drops pytest-xdist's xdist_group grouping (pytest-dev/pytest-xdist#1386); "
            "install the pytest that pyproject.toml pins (make test does)"
        )
    config.option.loadscopereorder = False  # hand work out in the order below, not the largest group first


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the suite so that no pytest-xdist worker sits idle waiting on another's training: the first test of
    each training fixture, then the ``xdist_group`` units (each runs as one unit on one worker; inside one, the tests
    that need no training first), then every test that needs none, then the rest. xdist hands the units out in this
    order (``pytest_configure`` turns off its largest-group-first reordering), a worker taking the next unit when it
    is nearly out of work. So one worker trains the hover policy, the other the reach policy, and the first to finish
    takes the DDS group, whose first test (the wrist-camera student) trains its own students while the other
    training ends. Handed out first, as xdist's own order did, the DDS group's worker waited 208 s for both
    trainings. A grouped test never trains a fixture: when the DDS group led with the hover fixture, its worker
    trained for minutes and then flew the hover loop over DDS in that process, beside the other worker's reach
    training, and the hover ended 5.6 cm off against the 5 cm bar (CI, 2026-11-27)."""

    def needs(item: pytest.Item) -> list[str]:
        return [f for f in TRAINING_FIXTURES if f in getattr(item, "fixturenames", ())]

    first: list[pytest.Item] = []
    grouped: list[pytest.Item] = []
    free: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    started: set[str] = set()
    for item in items:
        trainings = needs(item)
        if item.get_closest_marker("xdist_group") is not None:
            grouped.append(item)
        elif not trainings:
            free.append(item)
        elif trainings[0] not in started:
            started.add(trainings[0])
            first.append(item)
        else:
            rest.append(item)
    grouped.sort(key=lambda item: bool(needs(item)))  # stable: collection order otherwise
    items[:] = first + grouped + free + rest
