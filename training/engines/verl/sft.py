"""The supervised stages on GPU: veRL 0.9.1's SFT trainer fed the rollout driver's tokens.

veRL's own ``MultiTurnSFTDataset`` templates messages one by one and sets its own loss
masks; here ``RolloutDriverSFTDataset`` (plugged in through ``data.custom_cls``) replays
each conversation of the dataset stage's ``train.jsonl`` through the design's agent and
the rollout driver (``training/supervised/dataset.py``), and emits exactly the token ids and
loss mask that RL trains on: ``input_ids = prompt + response``, ``loss_mask`` 0 on the
prompt, the response mask on the response (observation and template tokens carry no loss).
Everything it needs to rebuild the agent travels in the ``data.sqlagent`` block.

``training.run engine=verl stage=sft`` builds the dataset with the local chain
(``stage=data``), then launches ``torchrun -m verl.trainer.sft_trainer`` with the composed
config; ``dry_run=true`` prints that config. With ``stage=sft_rl`` the SFT run saves a HF
copy (``checkpoint.save_contents`` includes ``hf_model``) and GRPO then starts from it on
the veRL engine (``stage.init_from``), so the SFT weights are also the KL reference. With
``supervised.rl_filter`` (TRUST-SQL) the local chain first samples each RL question (``data``;
the SFT questions come from ``supervised.data``) with the SFT checkpoint on this node's GPU at
RL's temperature, and GRPO reads the kept ids as ``data.train_ids``.

Mining on GPU (``engine=verl stage=data``): the policy's k samples per question come from
a served copy of it — ``vllm serve MODEL`` and ``supervised.policy_endpoint={base_url,
model}`` — through the endpoint client of ``training/generation/sources.py``, the design's tools
running in this process; without an endpoint the local HF model generates on this node's
GPU. Either way the traces go through the local stage's filters into the same files.
(veRL's own validation pass with n = k was not used: its ``_validate`` keeps only the last
output per session and clears the rows from TransferQueue inside one method, so capturing
every episode would mean copying that method.)

veRL 0.9.1's SFT trainer does not run on CPU, checked step by step with the tiny model:
veRL has no CPU platform (it falls back to ``nvidia`` and asks for an NCCL group), its
engine registry has the FSDP engines for cuda/npu only, FSDP1 needs an accelerator
``device_id``, and FSDP2 loading moves the model to ``get_device_id()`` (CUDA). The CPU
tests therefore check the dataset class through veRL's own ``create_sft_dataset`` and the
composed config; the trainer itself needs a GPU node with veRL installed.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

SFT_CONFIG_MODULE, SFT_CONFIG_NAME = "verl.trainer.config", "sft_trainer_engine"


class RolloutDriverSFTDataset:
    """veRL SFT dataset (``data.custom_cls``): the rollout driver's ids and loss masks.

    One item per replayed episode (DualSQL rows give a linker and a generator item).
    Items are ``input_ids``, ``loss_mask``, ``position_ids`` (and ``attention_mask`` with
    ``pad_mode=right``, padded to ``max_length``) as 1-D tensors, like veRL's own dataset.
    """

    def __init__(
        self, parquet_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1
    ) -> None:
        from omegaconf import OmegaConf

        from training.supervised.dataset import read_rows

        block = config.get("sqlagent")
        if block is None:
            raise ValueError(
                "RolloutDriverSFTDataset needs the data.sqlagent block (training.run engine=verl stage=sft writes it)"
            )
        settings = OmegaConf.to_container(block, resolve=True) if not isinstance(block, dict) else dict(block)
        if not isinstance(settings, dict):
            raise ValueError(f"data.sqlagent must be a mapping, got {type(settings).__name__}")
        self.settings = {str(k): v for k, v in settings.items()}
        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        rows = [row for f in files for row in read_rows(_jsonl_of(f))]
        if max_samples and max_samples > 0:
            rows = rows[:max_samples]
        self.pad_mode = config.get("pad_mode", "no_padding")
        self.max_length = int(config.get("max_length", 1024))
        self.truncation = config.get("truncation", "error")
        self.tokenizer = tokenizer
        self.trajectories, self.dropped = replay_rows(rows, tokenizer, self.settings)

    def __len__(self) -> int:
        return len(self.trajectories)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        t = self.trajectories[index]
        ids = list(t.prompt_ids) + list(t.response_ids)
        loss = [0] * len(t.prompt_ids) + [int(m) for m in t.response_mask]
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(
                    f"episode {t.example_id}/{t.role}: {len(ids)} tokens > data.max_length="
                    f"{self.max_length}; raise data.max_length or set data.truncation=right"
                )
            ids, loss = ids[: self.max_length], loss[: self.max_length]
        item = {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "loss_mask": torch.tensor(loss, dtype=torch.long),
            "position_ids": torch.arange(len(ids), dtype=torch.long),
        }
        if self.pad_mode == "right":
            pad = self.max_length - len(ids)
            pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
            item["attention_mask"] = torch.tensor([1] * len(ids) + [0] * pad, dtype=torch.long)
            item["input_ids"] = torch.cat([item["input_ids"], torch.full((pad,), pad_id, dtype=torch.long)])
            item["loss_mask"] = torch.cat([item["loss_mask"], torch.zeros(pad, dtype=torch.long)])
            item["position_ids"] = torch.cat([item["position_ids"], torch.zeros(pad, dtype=torch.long)])
        return item


def _jsonl_of(path: str) -> str:
    """Our dataset directory holds train.jsonl beside train.parquet: read the JSONL (the
    episodes' nested messages survive it unchanged)."""
    p = Path(path)
    if p.suffix == ".parquet" and (p.with_suffix(".jsonl")).exists():
        return str(p.with_suffix(".jsonl"))
    return str(p)


def replay_rows(rows: list[dict[str, Any]], tokenizer: Any, settings: dict[str, Any]) -> tuple[list[Any], dict]:
    """Replay dataset rows through the agent named in ``settings`` (the data.sqlagent block)."""
    from agents import make_agent, runtime_options
    from eval.data import load_from_config
    from training.rollout import RolloutLimits
    from training.supervised.dataset import replay

    examples = load_from_config(settings["data"], "train")  # the SFT questions' dataset (supervised.data)
    name = settings["agent"]
    agent = make_agent(name, **runtime_options(name, settings["agent_options"], few_shot_pool=lambda: examples))
    limits = RolloutLimits(**settings["limits"])
    return replay(agent, rows, {ex.id: ex for ex in examples}, tokenizer, limits, settings.get("drop_phases", []))


# ----------------------------------------------------------------------------- the config


def sqlagent_block(cfg: Any) -> dict[str, Any]:
    """What the dataset class needs to rebuild the agent, as plain data."""
    from training.rollout import RolloutLimits

    r = cfg.rollout
    limits = RolloutLimits(
        max_response_tokens=r.max_response_tokens,
        max_context_tokens=r.max_prompt_tokens + r.max_response_tokens,
        max_tokens_per_turn=r.max_new_tokens,
        max_observation_tokens=r.observation_max_tokens,
        max_prompt_tokens=r.max_prompt_tokens,
    )
    d = cfg.data
    own = ("kind", "root", "split", "drop_failing_gold", "limit", "offset", "difficulties", "mixture", "dsn")
    return {
        "agent": cfg.agent.name,
        "agent_options": dict(cfg.agent.options),
        "limits": dataclasses.asdict(limits),
        # the SFT questions' dataset: supervised.data, else the training side of data
        "data": dict(cfg.supervised.data) if cfg.supervised.data is not None else {k: getattr(d, k) for k in own},
        "drop_phases": list(cfg.supervised.drop_phases),
    }


def dataset_file(cfg: Any) -> Path:
    from training.supervised.dataset import TRAIN_JSONL

    if cfg.supervised.dataset:
        return Path(cfg.supervised.dataset)
    return Path(cfg.run_dir) / "supervised" / "dataset" / TRAIN_JSONL


def sft_overrides(cfg: Any, model_path: str) -> list[str]:
    """Hydra overrides of veRL's ``sft_trainer_engine`` for this run."""
    sup = cfg.supervised
    r = cfg.rollout
    out = Path(cfg.run_dir) / "supervised" / "sft_verl"
    return [
        f"model.path={model_path}",
        f"data.train_files={dataset_file(cfg)}",
        f"data.custom_cls.path={Path(__file__).resolve()}",
        "data.custom_cls.name=RolloutDriverSFTDataset",
        "data.pad_mode=no_padding",
        f"data.max_length={r.max_prompt_tokens + r.max_response_tokens}",
        # packed micro-batches of up to one whole episode (veRL's default 8,192 is shorter than
        # most designs' episodes); the attention kernel the RL side uses (sdpa unless
        # flash-attn is opted in: veRL's default flash_attention_2 is not installed by verl[vllm])
        f"data.max_token_len_per_gpu={max(8192, r.max_prompt_tokens + r.max_response_tokens)}",
        f"+model.override_config.attn_implementation={cfg.model.attn_implementation}",
        f"data.train_batch_size={sup.batch_size}",
        f"data.micro_batch_size_per_gpu={sup.micro_batch_size}",
        f"optim.lr={sup.lr}",
        f"optim.lr_warmup_steps_ratio={sup.warmup_ratio}",
        f"trainer.total_epochs={sup.epochs}",
        f"trainer.default_local_dir={out}",
        f"trainer.project_name={cfg.trainer.project}",
        f"trainer.experiment_name={cfg.recipe_name}-sft",
        f"trainer.seed={cfg.seed}",
        "trainer.logger=[console,file]",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    ]


def compose_sft_config(cfg: Any, model_path: str = "MODEL_PATH") -> Any:
    """veRL's ``sft_trainer_engine`` composed from its package with this run's overrides,
    plus the ``data.sqlagent`` block the dataset class reads."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf import open_dict

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=SFT_CONFIG_MODULE, version_base=None):
            composed = compose(config_name=SFT_CONFIG_NAME, overrides=sft_overrides(cfg, model_path))
    finally:
        restore_gh_from_backup(backup)
    with open_dict(composed):
        composed.data.sqlagent = sqlagent_block(cfg)
    return composed


def write_sft_config(cfg: Any, model_path: str) -> Path:
    """The composed config as a standalone YAML that veRL's entry point loads
    (``--config-path/--config-name``): nested blocks need no command-line quoting."""
    from omegaconf import OmegaConf, open_dict

    path = Path(cfg.run_dir).resolve() / "supervised" / "verl_sft.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    composed = compose_sft_config(cfg, model_path)
    with open_dict(composed):
        composed.pop("hydra", None)
    OmegaConf.save(composed, path)
    return path


def policy_path(cfg: Any) -> str | None:
    """The model veRL's SFT fine-tunes and the data stage samples: ``stage.init_from``, else
    ``model.path``, else the recipe's GPU backbone (as the RL launch does); None only where
    the recipe names no backbone, which means the embedded default."""
    return cfg.stage.init_from or cfg.model.path or cfg.gpu_backbone or None


def describe(cfg: Any) -> str:
    from omegaconf import OmegaConf

    if cfg.stage.name == "data":
        return describe_data(cfg)

    path = policy_path(cfg) or "EMBEDDED_DEFAULT"  # resolved (converted) when training starts
    data = dataset_file(cfg)
    state = "present" if data.exists() else "not built yet: stage=data (or this command) builds it first"
    header = (
        f"# engine=verl stage={cfg.stage.name}: veRL sft_trainer_engine composed from pkg://{SFT_CONFIG_MODULE};"
        f"\n# dataset {data} ({state}); model {path}\n"
    )
    return header + OmegaConf.to_yaml(compose_sft_config(cfg, str(path)))


def data_config(cfg: Any) -> Any:
    """The dataset stage of an ``engine=verl`` run: the local chain (traces, filters, the
    dataset files) on this node's GPU when it has one. With ``supervised.policy_endpoint``
    the policy's k samples come from the served copy (vLLM) through the endpoint client, and
    teachers are endpoints or local models as on the local engine; the files it writes are
    the ones veRL's SFT trainer reads."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return dataclasses.replace(
        cfg,
        stage=dataclasses.replace(cfg.stage, name="data"),
        engine=dataclasses.replace(cfg.engine, name="local", device=device),
        model=dataclasses.replace(cfg.model, path=cfg.model.path or cfg.gpu_backbone),
    )


def describe_data(cfg: Any) -> str:
    """``engine=verl stage=data dry_run=true``: where the traces come from and where they land."""
    from training.supervised.context import chain_of

    sup, data = cfg.supervised, dataset_file(cfg)
    ep = sup.policy_endpoint
    policy = (
        f"the served policy {ep['model']} at {ep['base_url']} (endpoint client; tools run here)"
        if ep
        else f"the local model {policy_path(cfg) or 'EMBEDDED_DEFAULT'} on {data_config(cfg).engine.device}"
    )
    teachers = [t.get("model", t.get("path")) for t in sup.teachers] or ["the policy itself"]
    chain = chain_of(cfg)
    mined = f"pass@{sup.samples} of {policy}" if chain == "mine" else "no policy mining"
    return (
        f"# engine=verl stage=data: chain={chain} ({cfg.agent.name}); {mined}; teachers {teachers}"
        f"{' (privileged)' if (sup.privileged if sup.privileged is not None else chain == 'mine') else ''};\n"
        f"# writes {data} (+ card.json), which stage=sft engine=verl reads\n"
    )


def train(cfg: Any, say: Any = print, inputs: Any = None) -> dict[str, Any]:
    """Dataset (local chain), then veRL's SFT trainer under torchrun; sft_rl then runs GRPO
    from its checkpoint, on the RL filter's questions when the design filters (TRUST-SQL).
    ``inputs``: the local chain's trainer inputs (tests script the policy's answers)."""
    from tools.errors import ConfigError
    from training.generation.loading import resolve_model_path
    from training.supervised.chain import run_stage

    if cfg.stage.name == "data":
        return run_stage(data_config(cfg), inputs, say)
    gpus = gpu_count()
    if not gpus:
        raise ConfigError("engine=verl stage=sft needs CUDA GPUs; on CPU use engine=local")
    if not cfg.supervised.dataset:
        run_stage(data_config(cfg), inputs, say)
    model_path = resolve_model_path(policy_path(cfg), say)
    config_file = write_sft_config(cfg, model_path)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={gpus}",
        "-m",
        "verl.trainer.sft_trainer",
        f"--config-path={config_file.parent}",
        f"--config-name={config_file.stem}",
    ]
    say("[verl sft] " + " ".join(command))
    subprocess.run(command, check=True)
    hf = latest_hf_checkpoint(Path(cfg.run_dir) / "supervised" / "sft_verl")
    summary: dict[str, Any] = {"sft_checkpoint": str(hf)}
    if cfg.stage.name == "sft_rl":
        summary["rl"] = reinforce(cfg, hf, say, inputs)
    return summary


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def reinforce(cfg: Any, sft_checkpoint: Path, say: Any = print, inputs: Any = None) -> dict[str, Any]:
    """GRPO on veRL from the SFT checkpoint (also the KL reference). With
    ``supervised.rl_filter`` the SFT policy first samples each RL question (``data``)
    ``rl_filter_samples`` times at RL's temperature, through the local chain on this node (as
    ``stage=data``), and RL reads the kept ids as ``data.train_ids``."""
    from training.engines.verl import launch as verl_launch
    from training.supervised.chain import rl_filter_file

    data = cfg.data
    if cfg.supervised.rl_filter:
        local = data_config(cfg)
        local = dataclasses.replace(local, stage=dataclasses.replace(local.stage, init_from=str(sft_checkpoint)))
        kept = rl_filter_file(local, inputs, say)
        if kept is None:
            return {"skipped": "no question left after the RL filter"}
        data = dataclasses.replace(cfg.data, train_ids=str(kept))
    rl = dataclasses.replace(
        cfg, data=data, stage=dataclasses.replace(cfg.stage, name="rl", init_from=str(sft_checkpoint))
    )
    return verl_launch.train(rl, say)


def latest_hf_checkpoint(folder: Path) -> Path:
    from tools.errors import ConfigError

    steps = sorted(folder.glob("global_step_*/huggingface"), key=lambda p: int(p.parent.name.rsplit("_", 1)[1]))
    if not steps:
        raise ConfigError(f"veRL's SFT wrote no HF checkpoint under {folder}")
    return steps[-1]
