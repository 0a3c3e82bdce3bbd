"""What the environment sets: where the project keeps its state, and each model endpoint.

Read without importing Dagster, so that the answering service and quick commands start fast; definitions.py
builds its resources from the same values.
"""

from __future__ import annotations

import os

from .method.prompts import use_prompts_dir
from .models.prices import PriceRefused, prices_from_environment

# Where the project keeps what it makes (store, response cache, vector indexes, exports), unless each is set apart.
STATE_DIR = os.getenv("GRAPHRAG_HOME", ".graphrag")
DATABASE = os.getenv("GRAPHRAG_DUCKDB", f"{STATE_DIR}/graphrag.duckdb")  # or ducklake:<catalog>: store/connection.py
DUCKLAKE_DATA_PATH = os.getenv("GRAPHRAG_DUCKLAKE_DATA_PATH")
CACHE_DIR = os.getenv("GRAPHRAG_CACHE_DIR", f"{STATE_DIR}/cache")
VECTOR_INDEX_DIR = os.getenv("GRAPHRAG_VECTOR_INDEX_DIR", f"{STATE_DIR}/vector-index")
DATA_DIR = os.getenv("GRAPHRAG_DATA_DIR", "data")
RATE_LIMITS_FILE = f"{STATE_DIR}/rate-limits.sqlite"
SPENDING_FILE = f"{STATE_DIR}/spending.sqlite"  # what each run with a budget has spent and holds (models/spending.py)
PROMPTS_DIR = os.getenv("GRAPHRAG_PROMPTS_DIR")  # a copy of prompts/ to read instead (the method reads no variable)
if PROMPTS_DIR:
    use_prompts_dir(PROMPTS_DIR)


def answer_queue_path(database: str = DATABASE) -> str:
    """Where answers wait while the store is busy: beside a local DuckDB file, else in the state folder."""
    from .store.connection import is_local_file

    return f"{database}.answers.sqlite" if is_local_file(database) else f"{STATE_DIR}/answers.sqlite"


def _positive(kind: type) -> object:
    def read(value: str):
        number = kind(value)  # a ValueError for what is not a number
        if number <= 0:
            raise ValueError("it must be more than 0")
        return number

    return read


def flag(value: str) -> bool:
    """A yes-or-no setting, from a variable or a run's tag: the one reading of both."""
    if value.strip().lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError("use true or false")
    return value.strip().lower() in ("1", "true", "yes", "on")


# Optional settings from the environment; what is unset keeps the resource's default.
_OPTIONAL_SETTINGS = {
    "api_version": ("GRAPHRAG_API_VERSION", str),
    "max_concurrency": ("GRAPHRAG_MAX_CONCURRENCY", _positive(int)),
    "requests_per_minute": ("GRAPHRAG_RPM", _positive(int)),
    "tokens_per_minute": ("GRAPHRAG_TPM", _positive(int)),
    "rate_limits_file": ("GRAPHRAG_RATE_LIMITS_FILE", str),
    "timeout_seconds": ("GRAPHRAG_TIMEOUT_SECONDS", _positive(float)),
    "batch_api": ("GRAPHRAG_BATCH_API", flag),
}


class SettingRefused(ValueError):
    """An environment variable's value cannot be used."""


# Dollars each run of the schedule and the sensors may spend on a paid model; without it they launch none.
RUN_BUDGET_VARIABLE = "GRAPHRAG_RUN_BUDGET_USD"


def run_budget() -> float | None:
    return _read(RUN_BUDGET_VARIABLE, _positive(float)) if os.getenv(RUN_BUDGET_VARIABLE) else None


def _read(variable: str, kind) -> object:
    try:
        return kind(os.environ[variable])
    except ValueError as problem:
        reason = str(problem) if "must" in str(problem) or "use" in str(problem) else "it is not a number"
        raise SettingRefused(f"{variable}={os.environ[variable]!r} cannot be used: {reason}") from None


# Each endpoint: the variable naming its model, the model when unset, and the variable of a base URL of its own.
ENDPOINTS = {
    "chat": ("GRAPHRAG_CHAT_MODEL", "gpt-4o-mini", "GRAPHRAG_API_BASE"),
    "judge": ("GRAPHRAG_JUDGE_MODEL", "gpt-4o-mini", "GRAPHRAG_API_BASE"),
    # A server of its own for embeddings where one server serves one model (vLLM, llama.cpp's server).
    "embeddings": ("GRAPHRAG_EMBEDDING_MODEL", "text-embedding-3-small", "GRAPHRAG_EMBEDDING_API_BASE"),
}
API_KEY_VARIABLE = "GRAPHRAG_API_KEY"


def endpoint_settings(
    endpoint: str,
    api_key: object,
    *,
    api_base_variable: str | None = None,
    api_key_variable: str = API_KEY_VARIABLE,
    model: str | None = None,
) -> dict:
    """The fields of one endpoint's resource from the environment; `api_key` is what stands for the key there
    (a Dagster EnvVar in definitions.py, so the key never reaches the UI or the run config). A dg component names
    its own variables (`api_base_variable`, `api_key_variable`) and models; by default, the GRAPHRAG_ ones."""
    model_variable, default_model, base_variable = ENDPOINTS[endpoint]
    try:
        prices_from_environment()  # refused here, in one line, rather than when the first cost is counted
    except PriceRefused as problem:
        raise SettingRefused(str(problem)) from None
    base_variables = [api_base_variable] if api_base_variable else [base_variable, "GRAPHRAG_API_BASE"]
    return dict(
        base_url=next((os.environ[name] for name in base_variables if os.getenv(name)), None),
        api_key=api_key if os.getenv(api_key_variable) else None,
        model=model or os.getenv(model_variable, default_model),
        cache_dir=CACHE_DIR,
        **{
            field: _read(variable, kind)
            for field, (variable, kind) in _OPTIONAL_SETTINGS.items()
            if os.getenv(variable)
        },
    )
