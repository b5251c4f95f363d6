"""Built-in tasks; importing this package registers them (see :mod:`sim.registry`)."""

from sim.tasks import cartpole_balance, panda_lift, panda_push, panda_reach, quadrotor_hover  # noqa: F401
