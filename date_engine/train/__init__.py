"""The bundled trainer behind ``date scale``: launch, runtime, sampling, checkpoints, the loop."""
