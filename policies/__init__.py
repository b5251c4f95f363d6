"""Everything that runs on the robot: networks (``policies.nets``, torch) and the torch-free runtime
(``policies.runtime``: deployment contract, observation builder, ONNX runner)."""
