"""Built-in tasks, one folder per robot family (``cartpole/``, ``quadrotor/``, ``panda/``), one module per task.

:data:`BUILTIN` is the one list of them: task name -> ``"module:SPEC"`` (the module's :class:`~sim.registry.TaskSpec`),
read lazily by :mod:`sim.registry`, so looking a task up imports only its module. Adding a task is a module with a
``SPEC`` in its family's folder, a training config in ``configs/``, and one line here.
"""

BUILTIN: dict[str, str] = {
    "cartpole-balance": "sim.tasks.cartpole.balance:SPEC",
    "quadrotor-hover": "sim.tasks.quadrotor.hover:SPEC",
    "panda-reach": "sim.tasks.panda.reach:SPEC",
    "panda-push": "sim.tasks.panda.push:SPEC",
    "panda-lift": "sim.tasks.panda.lift:SPEC",
    "panda-press": "sim.tasks.panda.press:SPEC",
    "panda-insert": "sim.tasks.panda.insert:SPEC",
    "panda-multitask": "sim.tasks.panda.multitask:SPEC",
    "quadruped-velocity": "sim.tasks.quadruped.velocity:SPEC",
}
