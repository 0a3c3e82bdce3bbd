"""What tokens cost: a price set per model, else the genai-prices table, else unknown (never 0)."""

import pytest
from genai_prices import Usage as Tokens
from genai_prices import calc_price

from graphrag_assets.models.endpoint import ModelSettings, Usage
from graphrag_assets.models.prices import PriceRefused, dollars, price_of, prices_from_environment, total_cost
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import SAMPLE_CORPUS, Workspace, chat_resource, embedding_resource, materialization_metadata

SPENT = Usage(prompt_tokens=2_000_000, completion_tokens=500_000)


def test_a_listed_model_costs_what_the_table_says_with_its_batch_rate():
    listed = calc_price(Tokens(input_tokens=2_000_000, output_tokens=500_000), model_ref="gpt-4o-mini")
    assert SPENT.cost(ModelSettings(model="gpt-4o-mini")) == pytest.approx(float(listed.total_price))
    price = price_of("gpt-4o-mini")
    assert price.source.startswith("genai-prices ") and 0 < price.batch_prompt < price.prompt
    half_in_batch = Usage(prompt_tokens=2_000_000, batch_prompt_tokens=1_000_000)
    assert half_in_batch.cost(ModelSettings(model="gpt-4o-mini")) == pytest.approx(
        (price.prompt + price.batch_prompt) * 1.0
    )


def test_a_model_with_no_known_price_costs_unknown_not_zero(monkeypatch):
    monkeypatch.delenv("GRAPHRAG_PRICES", raising=False)
    local = ModelSettings(model="llama3.1:8b-instruct-q4")
    assert price_of(local.model) is None and SPENT.cost(local) is None
    assert Usage(cache_hits=12).cost(local) == 0.0  # nothing was sent: nothing was spent, price or none
    assert total_cost([0.25, None]) is None and total_cost([0.25, 0.5]) == 0.75
    assert dollars(None) == "unknown" and dollars(0.01234) == "$0.0123"


def test_a_price_set_in_the_environment_or_the_settings_wins_and_zero_marks_a_model_free(monkeypatch):
    monkeypatch.setenv("GRAPHRAG_PRICES", '{"llama3.1:8b": 0, "my-tune": [1.5, 6], "gpt-4o-mini": [10, 10]}')
    assert SPENT.cost(ModelSettings(model="llama3.1:8b")) == 0.0
    assert SPENT.cost(ModelSettings(model="my-tune")) == pytest.approx(2 * 1.5 + 0.5 * 6)
    assert SPENT.cost(ModelSettings(model="gpt-4o-mini")) == pytest.approx(25.0)  # over the listed price
    settings = ModelSettings(model="my-tune", prompt_price_per_million=1.0, completion_price_per_million=2.0)
    assert SPENT.cost(settings) == pytest.approx(3.0)  # the resource's own setting, over the environment's
    for malformed in ("cheap", "[1, 2]", '{"m": "free"}', '{"m": [1, 2, 3]}', '{"m": -0.5}'):
        monkeypatch.setenv("GRAPHRAG_PRICES", malformed)
        with pytest.raises(PriceRefused, match="GRAPHRAG_PRICES"):
            prices_from_environment()


def test_an_unpriced_model_shows_its_cost_as_unknown_in_the_assets_metadata(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHRAG_PRICES", raising=False)
    workspace = Workspace(tmp_path)
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    with FakeOpenAIServer() as server:
        priced = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, workspace.cache),
            embeddings=embedding_resource(server.base_url, workspace.cache),
            selection=["entities", "relationships"],
        )
        unpriced = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, tmp_path / "other-cache", model="our-own-finetune"),
            selection=["entities", "relationships"],
        )
    listed = materialization_metadata(priced, "entities")["estimated_cost_usd"]
    assert isinstance(listed, float) and listed > 0
    unknown = materialization_metadata(unpriced, "entities")["estimated_cost_usd"]
    assert isinstance(unknown, str) and unknown.startswith("unknown: no price for model 'our-own-finetune'")


def test_openai_embedding_models_are_priced_too():
    assert price_of("text-embedding-3-small").prompt > 0 and price_of("text-embedding-3-large").prompt > 0
