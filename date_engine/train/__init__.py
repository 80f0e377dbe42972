"""The bundled trainer behind ``date scale``: launch, runtime, sampling, checkpoints, the loop.

Importing it asks torch for huge pages under large CPU tensors (:func:`date_engine.machine.
huge_pages_for_tensors`), before any of its modules loads torch.
"""

from date_engine.machine import huge_pages_for_tensors

huge_pages_for_tensors()
