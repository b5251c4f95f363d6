"""Sim-to-sim transfer: exported policies (ONNX + contract, through ``policies.runtime`` only) evaluated in an
independent simulator (:mod:`robot_rl.transfer.harness`)."""
