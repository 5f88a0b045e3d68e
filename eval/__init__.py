"""Evaluation: dataset loaders and the bundled benchmark (``eval.data``), and the
evaluation, voting and comparison entry points built on the shared agents and metrics."""
