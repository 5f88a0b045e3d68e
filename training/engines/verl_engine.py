"""Transitional: the verl engine now lives in verl_common / verl_config / verl_data /
verl_checks / verl_launch. Kept only while modules on this branch still import names from
here; removed once none does."""

from training.engines.verl_common import (  # noqa: F401
    AGENT_LOOP_NAME,
    PROJECT_NAMESPACE,
    TRAINER_MODE,
    example_from_json,
    example_to_row,
    plain,
)
from training.engines.verl_config import VerlSettings, build_verl_config  # noqa: F401
