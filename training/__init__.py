"""Training: configuration (``config``), the rollout driver (``rollout``), generation
(``generation``: the policy, local models, endpoints), the RL algorithm (``algorithm``:
rewards' shared base, masks, advantages, KL), the supervised stages (``supervised``), what
a run writes (``runs``) and the engines (``engines/local``, ``engines/verl``); the front
doors are ``python -m training.run``, ``training.export``, ``training.preflight`` and
``training.cluster``.
"""

from tools.moved import install_moved_modules

MOVED = {
    "training.rewards": "training.algorithm.rewards",
    "training.advantages": "training.algorithm.advantages",
    "training.masks": "training.algorithm.masks",
    "training.kl": "training.algorithm.kl",
    "training.demonstrations": "training.supervised.demonstrations",
    "training.warm_start": "training.supervised.fine_tune",
    "training.stages": "training.supervised",
    "training.rollout_setup": "training.rollout.setup",
    "training.model": "training.generation.loading",
    "training.run_dir": "training.runs.resume_policy",
    "training.prepare": "training.config.command",
    "training.engines.local_state": "training.engines.local.state",
}
"""Public module paths (docs/INTERFACES.md before the layout by subsystem) -> where they live now."""

install_moved_modules(MOVED)
