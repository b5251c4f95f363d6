"""ONNX + deployment contract -> dependency-free C99 for microcontrollers (planned; see the project issues)."""
