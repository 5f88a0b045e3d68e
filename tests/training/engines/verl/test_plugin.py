"""The ``verl.plugins`` entry point registers the agent loop and the trainer, and loads the designs.

veRL imports every plugin inside ``import verl`` and swallows import errors at debug
level, so a broken plugin would only surface on a GPU node as "agent loop not
registered". A fresh interpreter (as a Ray worker is) imports ``verl`` and veRL's own
modules only, never the plugin module by name, and must find both registrations; one that
imports only what a load balancer or reward worker imports must not pay for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from tests.helpers.designs import project_designs

PROBE = """
import json, sys
import verl
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
trainer = get_trainer_cls("sqlagent_sync")
modes = {name: get_trainer_cls(name) for name in ("sqlagent_colocate_async", "sqlagent_separate_async")}
print(json.dumps({
    "async_trainers": {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in modes.items()},
    "agent_loop": _agent_loop_registry.get("sqlagent"),
    "trainer": f"{trainer.__module__}.{trainer.__qualname__}",
    "plugin_loaded": "training.engines.verl.workers.plugin" in sys.modules,
    "designs": list(sys.modules["training.engines.verl.workers.plugin"].DESIGNS),
    "design_agents": sorted(m for m in sys.modules if m.startswith("designs.") and m.endswith(".agent")),
}))
"""


def test_entry_point_names_the_plugin_module() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert found.get("sqlagent_rl") == "training.engines.verl.workers.plugin"


@pytest.mark.slow
def test_import_verl_registers_agent_loop_and_trainer() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["plugin_loaded"] is True
    assert seen["agent_loop"] == {"_target_": "training.engines.verl.workers.agent_loop.SqlAgentLoop"}
    assert seen["trainer"] == "training.engines.verl.workers.sync_trainer.SqlAgentTrainer"
    assert seen["async_trainers"] == {  # trainer.mode=colocate_async | separate_async
        "sqlagent_colocate_async": "training.engines.verl.workers.async_trainers.SqlAgentColocateAsync",
        "sqlagent_separate_async": "training.engines.verl.workers.async_trainers.SqlAgentSeparateAsync",
    }
    # the designs are loaded in the worker with veRL's registries, nothing imported by name
    # (an outside one too: tests/designs/test_outside_design.py)
    designs = project_designs()
    assert set(designs) <= set(seen["designs"])
    assert set(seen["design_agents"]) >= {f"designs.{name}.agent" for name in designs}


LIGHT_PROBE = """
import json, sys
import verl.workers.rollout.router  # veRL's load balancer: no agent loop, no trainer
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("training.engines.verl.workers.", "designs.")))))
"""


@pytest.mark.slow
def test_a_process_without_veRLs_registries_imports_neither_the_agent_loop_nor_the_trainers() -> None:
    proc = subprocess.run([sys.executable, "-c", LIGHT_PROBE], capture_output=True, text=True, check=False, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["training.engines.verl.workers.plugin"]


ORDER_PROBE = """
import json, os, sys
if os.environ.get("REGISTRY_FIRST"):  # veRL's registries imported before the plugin (launch.py's order)
    os.environ["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    import verl.trainer.ppo.v1, verl.experimental.agent_loop
    import training.engines.verl.workers.plugin
else:  # the project's sync trainer first: it imports veRL's trainers, which fire the plugin's hook
    import training.engines.verl.workers.sync_trainer
    import training.engines.verl.workers.async_trainers
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
print(json.dumps({"agent_loop": "sqlagent" in _agent_loop_registry, "trainers": sorted(TRAINER_REGISTRY)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("registry_first", [True, False])
def test_registrations_whichever_is_imported_first(registry_first: bool) -> None:
    import os

    env = {**os.environ, "REGISTRY_FIRST": "1" if registry_first else ""}
    proc = subprocess.run(
        [sys.executable, "-c", ORDER_PROBE], capture_output=True, text=True, check=False, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["agent_loop"] is True
    assert {"sqlagent_sync", "sqlagent_colocate_async", "sqlagent_separate_async"} <= set(seen["trainers"])


@pytest.mark.slow
def test_plugins_can_be_switched_off() -> None:
    """``VERL_USE_EXTERNAL_PLUGINS=none`` is veRL's switch; then nothing is registered."""
    import os

    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    probe = "import sys, verl; print('training.engines.verl.workers.plugin' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"
