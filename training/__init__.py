"""Training: the rollout driver (``training.rollout``), loss masks (``training.masks``),
rewards, advantages, engines and the ``python -m training.run`` entry point."""
