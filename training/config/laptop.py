"""The CPU laptop profile: the ``laptop`` block of the typed configuration
(``training.config.laptop_apply`` applies it to a built config; docs/engines.md "The laptop
profile" says why each size is what it is)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.config.fields import _f


@dataclass
class LaptopProfile:
    """CPU demo sizes applied on the local engine (docs/engines.md "The laptop profile").

    Each value replaces the recipe's unless that key was set on the command line; the
    recipe's paper-size numbers stay in the YAML for GPU runs.
    """

    group_size: int = _f(4, "-> algorithm.group_size")
    batch_size: int = _f(2, "-> algorithm.batch_size")
    oversample: int = _f(1, "caps algorithm.dynamic_sampling.oversample (rollouts dominate CPU time)")
    dynamic_sampling_metric: str = _f(
        "total",
        "-> algorithm.dynamic_sampling.metric (a 135M model rarely gets EX right: exec-filtered groups would all drop)",
    )
    max_turns: int = _f(3, "caps every agent.*max_turns")
    max_new_tokens: int = _f(128, "caps rollout.max_new_tokens")
    observation_max_tokens: int = _f(256, "caps rollout.observation_max_tokens")
    max_response_tokens: int = _f(512, "caps rollout.max_response_tokens")
    max_prompt_tokens: int = _f(4096, "caps rollout.max_prompt_tokens")
    total_steps: int = _f(2, "-> trainer.total_steps")
    save_every: int = _f(2, "-> trainer.save_every")
    val_every: int = _f(0, "-> trainer.val_every")
    eval_limit: int = _f(8, "-> data.eval_limit (the fixed before/after subset; eval.run's count on CPU)")
    eval_mode: str = _f("greedy", "-> evaluation.mode (eval.run on CPU: one greedy answer per question)")
    eval_samples: int = _f(4, "caps evaluation.samples (eval.mode=sc / passk on CPU: 4 answers, not 16)")
    lr: float = _f(1e-5, "-> optim.lr (1e-6 moves a 135M model too little in a few steps)")
    micro_batch_size: int = _f(
        1,
        "-> optim.micro_batch_size, stage.warm_start.micro_batch_size and supervised.micro_batch_size "
        "(one row per forward/backward: a row's checkpointed activations, not two; one CPU thread "
        "runs one row as fast as it runs two padded ones)",
    )
    generation_rows: int = _f(8, "-> rollout.generation_rows (rows per batched generate call)")
    gradient_checkpointing: bool = _f(
        True,
        "-> model.gradient_checkpointing (a warm-start micro-batch of two 4k-token "
        "demonstrations held 9.5 GB of layer activations without it)",
    )
    spill_optimizer_state: bool = _f(
        True,
        "-> optim.spill_state (AdamW's 1 GiB of moments wait on disk but for optimizer.step(): the warm "
        "start's long rows and the second step's rollout peaked beside them)",
    )
    warm_start: bool = _f(
        True,
        "-> stage.warm_start.enable (SFT on demonstrations first: without it "
        "the 135M model writes no protocol and every reward is 0)",
    )
    warm_start_examples: int = _f(32, "caps stage.warm_start.examples (SFT time grows with prompt length)")
    supervised_questions: int = _f(16, "caps supervised.questions (traces per question cost rollouts)")
    supervised_samples: int = _f(4, "caps supervised.samples, rl_filter_samples and teacher_samples (k on CPU)")
    supervised_lr: float = _f(
        1e-4, "-> supervised.lr (a few SFT steps on the 135M model; the backbone-scaled 2e-5 moves it too little)"
    )
    split_stages_at: int = _f(
        330,
        "a design with its own SFT dataset (supervised.data: TRUST-SQL) on minibird: SFT questions from train "
        "records [0, N), RL's from [N, end) (data.offset), so the two stages share no question; with the RL "
        "filter, supervised_questions also caps supervised.rl_questions",
    )
    agent_options: dict[str, Any] = _f(
        {}, "agent options set where the agent accepts them (shorter prompts: schema_format=compact, num_few_shot=1)"
    )
