"""What a training run writes, the same on both engines: the console, ``metrics.jsonl`` and
wandb (``logger``), sample and evaluation records (``samples``), sweep jobs (``sweep``), and
the run-directory policy: resume modes, complete checkpoints, shared storage
(``resume_policy``)."""
