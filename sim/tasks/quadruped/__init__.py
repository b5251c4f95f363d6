"""Legged robots (the Unitree A1 of :mod:`sim.robots.unitree_a1`)."""
