"""What a model's tokens cost, in US dollars per million tokens.

A price set for the model (the resource's `prompt_price_per_million`, or `GRAPHRAG_PRICES` in the environment)
wins; else the table of `genai-prices`, a maintained list of the providers' published prices with their batch
rates. A model in neither (a local or fine-tuned model) has no price: its cost is unknown, never 0. A price of 0
marks a model free (Ollama, vLLM on your own machine).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

PRICES_VARIABLE = "GRAPHRAG_PRICES"  # {"model": [prompt, completion] or one price for both, per million tokens}


class PriceRefused(ValueError):
    """A price setting that cannot be used."""


@dataclass(frozen=True)
class Price:
    prompt: float
    completion: float
    batch_prompt: float
    batch_completion: float
    source: str  # where it came from, for the metadata: "genai-prices 0.2.3", "set", "GRAPHRAG_PRICES"

    def cost(self, prompt_tokens: int, completion_tokens: int, batch_prompt: int = 0, batch_completion: int = 0):
        """Dollars for the tokens; the batch ones (a part of the totals) at the batch rates."""
        return (
            (prompt_tokens - batch_prompt) * self.prompt
            + (completion_tokens - batch_completion) * self.completion
            + batch_prompt * self.batch_prompt
            + batch_completion * self.batch_completion
        ) / 1e6


def price_of(
    model: str, prompt: float | None = None, completion: float | None = None, batch_factor: float = 0.5
) -> Price | None:
    """The model's price: as set (`prompt`, `completion`), from GRAPHRAG_PRICES, or from the table; None if unknown."""
    if prompt is not None or completion is not None:
        prompt, completion = prompt or 0.0, completion or 0.0
        return Price(prompt, completion, prompt * batch_factor, completion * batch_factor, "set")
    configured = prices_from_environment().get(model)
    if configured is not None:
        prompt, completion = configured
        return Price(prompt, completion, prompt * batch_factor, completion * batch_factor, PRICES_VARIABLE)
    return _listed(model)


@functools.lru_cache(maxsize=64)
def _listed(model: str) -> Price | None:
    from importlib.metadata import version

    from genai_prices import Usage, calc_price

    million = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    # The table finds the provider from the model's name, but not for every model (not OpenAI's embedding models):
    # then OpenAI's, as the API this project speaks is theirs.
    for provider in (None, "openai"):
        try:
            listed = calc_price(million, model_ref=model, provider_id=provider)
            # The provider's batch rate where it has one; its standard rate where it serves no batch.
            batch = calc_price(million, model_ref=model, provider_id=provider, price_context={"processing": "batch"})
            break
        except LookupError:
            continue
    else:
        return None
    return Price(
        float(listed.input_price),
        float(listed.output_price),
        float(batch.input_price),
        float(batch.output_price),
        f"genai-prices {version('genai-prices')}",
    )


def prices_from_environment() -> dict[str, tuple[float, float]]:
    """GRAPHRAG_PRICES as {model: (prompt, completion)}; a malformed value is refused in one line."""
    text = os.getenv(PRICES_VARIABLE, "").strip()
    if not text:
        return {}
    return _parse(text)


@functools.lru_cache(maxsize=4)
def _parse(text: str) -> dict[str, tuple[float, float]]:
    example = '{"gpt-4o-mini": [0.15, 0.6], "llama3.1:8b": 0}'
    try:
        table = json.loads(text)
    except json.JSONDecodeError:
        table = None
    if not isinstance(table, dict):
        raise PriceRefused(f"{PRICES_VARIABLE} must be a JSON object of model to price per million tokens: {example}")
    prices = {}
    for model, value in table.items():
        pair = value if isinstance(value, list) else [value, value]
        if len(pair) != 2 or not all(isinstance(p, int | float) and not isinstance(p, bool) and p >= 0 for p in pair):
            raise PriceRefused(
                f"{PRICES_VARIABLE}: the price of {model!r} must be a number of dollars per million tokens, or "
                f"[prompt, completion], 0 or more: {example}"
            )
        prices[model] = (float(pair[0]), float(pair[1]))
    return prices


def total_cost(costs) -> float | None:
    """The sum of costs; unknown (None) when any of them is."""
    costs = list(costs)
    return None if any(cost is None for cost in costs) else float(sum(costs))


def dollars(cost: float | None) -> str:
    """A cost as a person reads it: "$0.0123", or "unknown" for a model with no known price."""
    return "unknown" if cost is None else f"${cost:,.4f}"
