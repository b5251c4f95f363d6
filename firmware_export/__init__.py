"""ONNX + deployment contract -> dependency-free C99 for microcontrollers: generated, built, sized and verified
(host gcc, arm-none-eabi-gcc, QEMU). Entry point: :func:`firmware_export.export.export_firmware`."""
