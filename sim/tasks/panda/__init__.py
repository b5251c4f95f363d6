"""Franka Emika Panda tasks: the shared arm task (:mod:`sim.tasks.panda.base`), one module per task, and the scripted
experts of the cube tasks (:mod:`sim.tasks.panda.experts`)."""
