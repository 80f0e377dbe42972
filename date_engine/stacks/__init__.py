"""The stacks language models are trained in, read and written: their own configuration files
in, the plan out in the form each reads (docs/integrations.md). One module per stack, each with
its reader (``baseline_from_*``) and its emitter; :mod:`date_engine.stacks.pyconfig` reads the
Python configuration files some of them use without running them. Torch-free."""
