"""The rooms of the project and who may import whom (docs/architecture.md), checked over the whole tree: every
import, at module level or inside a function, follows the table, and no module imports itself back through others.

Also: every registered task's entry points resolve and its training config loads, so a task's registration cannot
name something that does not exist."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "policies": ROOT / "policies",
    "sim": ROOT / "sim",
    "robot_rl": ROOT / "robot_rl",
    "firmware_export": ROOT / "firmware_export",
    "robot_rl_ros": ROOT / "ros2_ws" / "src" / "robot_rl_ros" / "robot_rl_ros",
}
ALLOWED: dict[str, tuple[str, ...]] = {
    "policies.runtime": ("policies.runtime",),
    "policies.nets": ("policies.nets", "policies.runtime"),
    "policies": ("policies",),
    "sim": ("sim", "policies.runtime"),
    "firmware_export": ("firmware_export", "policies.runtime"),
    "robot_rl_ros": ("robot_rl_ros", "policies.runtime"),
    "robot_rl": ("robot_rl", "sim", "policies", "firmware_export"),
}
"""Room -> the project packages its modules may import (the most specific room of a module applies)."""
EXCEPTIONS: dict[str, tuple[str, ...]] = {
    "robot_rl_ros.sim_robot_node": ("sim",),  # the simulated robot runs a simulation
    "robot_rl.cli.deploy": ("robot_rl_ros",),  # `robot-rl deploy` / `replay` start the ROS 2 node graph
    "robot_rl.imitation.from_recording": ("robot_rl_ros",),  # recordings read as the node read its inputs
    "robot_rl_ros.instruction_encoder": ("policies.nets.language",),  # embed_instructions: the encoder, lazily
}
"""Single modules allowed one more room."""


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [pkg, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Project modules ``module`` imports anywhere in its file (resolved to the longest known module name)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            # `from pkg import sub` depends on the submodule; `from mod import name` on the module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _room(module: str) -> str:
    return max((r for r in ALLOWED if module == r or module.startswith(r + ".")), key=len)


def test_every_import_follows_the_rooms_table() -> None:
    wrong = []
    for module, deps in sorted(GRAPH.items()):
        allowed = ALLOWED[_room(module)] + EXCEPTIONS.get(module, ())
        for dep in sorted(deps):
            if not any(dep == a or dep.startswith(a + ".") for a in allowed):
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "imports against docs/architecture.md's table:\n" + "\n".join(wrong)


def test_no_module_imports_itself_back() -> None:
    """No cycle in the import graph (every import counted, lazy ones too: a lazy circle is still a circle)."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(GRAPH[m]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _tasks() -> list[str]:
    from sim.registry import task_names

    return task_names()


@pytest.mark.parametrize("task", _tasks())
def test_every_task_names_what_exists(task: str) -> None:
    """The spec's entry points resolve, its training config loads, and it builds with one world."""
    import sim
    from robot_rl.config import load_config
    from sim.registry import get_task

    spec = get_task(task)
    assert spec.config_path.is_file(), spec.config_path
    cfg = load_config(task)
    assert cfg.task == task
    if spec.expert:
        assert callable(spec.expert_cls())
    for engine in spec.transfer:
        assert callable(spec.transfer_factory(engine))
    robots = ROOT / "sim" / "robots"
    assert (robots / f"{spec.robot}.py").is_file() or (robots / "assets" / f"{spec.robot}.xml").is_file(), spec.robot
    env = sim.make(task, 1, "cpu", cfg.env)
    env.contract(["policy"])  # what a deployed policy (or a student of a privileged teacher) reads
    if cfg.policy.actor_obs != ["policy"]:  # a privileged teacher, recorded, never deployed: it says so
        assert "privileged" in spec.config_path.read_text()
    env.close()
