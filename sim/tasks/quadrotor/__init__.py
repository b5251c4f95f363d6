"""Multirotor tasks (the Crazyflie 2.x of :mod:`sim.robots.multirotor`)."""
