"""Each setting a user can change is shown to change what the model is asked or what the index holds."""

import json

import pytest

from graphrag_assets_tests.model_server import FakeOpenAIServer, tagged

from .conftest import SAMPLE_CORPUS, Workspace, chat_resource, embedding_resource, materialization_metadata
from .test_query import QUESTION, answer_row, ask


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    workspace = Workspace(tmp_path_factory.mktemp("settings"))
    workspace.add_sample_corpus()
    workspace.materialize(SAMPLE_CORPUS, selection=["documents", "base_text_units"])
    return workspace


def extract(workspace: Workspace, tmp_path, config: dict, selection=("entities", "relationships"), **server_options):
    """Run the selection with its own response cache, so every call reaches the server; returns the server."""
    with FakeOpenAIServer(**server_options) as server:
        result = workspace.materialize(
            SAMPLE_CORPUS,
            chat=chat_resource(server.base_url, tmp_path / "cache"),
            selection=list(selection),
            run_config={"ops": config},
        )
    return server, result


@pytest.mark.parametrize("rounds,more", [(0, True), (1, True), (2, True), (2, False)])
def test_gleaning_rounds(chunked, tmp_path, rounds, more):
    server, _ = extract(chunked, tmp_path, {"entity_graph": {"config": {"max_gleanings": rounds}}}, more_gleaning=more)
    units = len(chunked.sql("SELECT id FROM base_text_units"))
    asked_again = rounds if more else min(rounds, 1)  # a "N" to the loop question ends the gleaning
    assert server.count("extract") == units
    assert server.count("gleaning") == units * asked_again
    assert server.count("loop") == units * max(0, asked_again - 1 if more else rounds - 1)


def test_entity_types_are_what_the_model_is_asked_for(chunked, tmp_path):
    server, _ = extract(
        chunked, tmp_path, {"entity_graph": {"config": {"entity_types": ["ship", "harbour"], "max_gleanings": 0}}}
    )
    prompts = [s.prompt for s in server.served if s.kind == "extract"]
    assert prompts and all("Entity types: ship,harbour" in p for p in prompts)


def test_claims_can_be_switched_off(chunked, tmp_path):
    server, result = extract(
        chunked, tmp_path, {"covariates": {"config": {"enabled": False}}}, selection=("covariates",)
    )
    assert server.count() == 0
    assert materialization_metadata(result, "covariates")["skipped_because"] == "claims are switched off"


def test_long_description_lists_are_summarized_in_batches_that_fit(chunked, tmp_path):
    small, _ = extract(chunked, tmp_path / "small", {"entity_graph": {"config": {"summary_max_input_tokens": 60}}})
    large, _ = extract(chunked, tmp_path / "large", {"entity_graph": {"config": {"summary_max_input_tokens": 4000}}})
    batched = [s.prompt for s in small.served if s.kind == "summarize"]
    whole = [s.prompt for s in large.served if s.kind == "summarize"]
    assert len(batched) > len(whole)
    # A later batch carries the summary so far: its entity was asked about more than once.
    names = [p.split("all about ")[1].split(", into")[0] for p in batched]
    assert len(set(names)) < len(names)


@pytest.fixture(scope="module")
def query_server():
    with FakeOpenAIServer() as server:
        yield server


def test_drift_search_follows_up_to_the_depth_asked(llm_index, query_server):
    for depth in (1, 2):
        result = ask(
            llm_index, "drift_search", {"question": QUESTION, "depth": depth, "follow_ups": 2}, server=query_server
        )
        follow_ups = json.loads(answer_row(llm_index[0], result).context)["follow_ups"]
        assert max(f["depth"] for f in follow_ups) == depth and all(f["answered"] for f in follow_ups)
        assert sum(f["depth"] == 2 for f in follow_ups) == (2 if depth == 2 else 0)


@pytest.mark.parametrize(
    "community_prop,text_unit_prop,has_reports,has_units",
    [(0.0, 0.5, False, True), (0.25, 0.0, True, False), (0.25, 0.5, True, True)],
)
def test_local_search_shares_its_budget_as_configured(
    llm_index, query_server, community_prop, text_unit_prop, has_reports, has_units
):
    result = ask(
        llm_index,
        "local_search",
        {"question": QUESTION, "community_prop": community_prop, "text_unit_prop": text_unit_prop},
        server=query_server,
    )
    context = json.loads(answer_row(llm_index[0], result).context)
    assert bool(context["reports"]) == has_reports and bool(context["text_units"]) == has_units
    assert context["entities"]


def test_global_search_shuffles_reports_into_windows_by_its_seed(llm_index, tmp_path):
    def map_prompts(seed: int, cache: str):
        with FakeOpenAIServer() as server:
            workspace = llm_index[0]
            workspace.ask(
                SAMPLE_CORPUS,
                "global_search",
                {"question": QUESTION, "community_level": 1, "map_window_tokens": 600, "seed": seed},
                chat=chat_resource(server.base_url, tmp_path / cache),
                embeddings=embedding_resource(server.base_url, tmp_path / cache),
            )
            return sorted(s.prompt for s in server.served if s.kind == "map")

    first, again, other = map_prompts(1, "a"), map_prompts(1, "b"), map_prompts(2, "c")
    assert len(first) > 1 and first == again  # several windows, the same ones for the same seed
    assert first != other

    def rows(prompts):
        return sorted(line for p in prompts for line in tagged(p, "records").splitlines()[1:] if "|" in line)

    assert rows(first) == rows(other)  # another seed packs the same reports differently


def test_description_lists_that_fit_the_budget_are_joined_without_a_model_call(chunked, tmp_path):
    def run(budget: int):
        server, result = extract(
            chunked,
            tmp_path / str(budget),
            {"entity_graph": {"config": {"summarize_above_tokens": budget, "max_gleanings": 0}}},
        )
        return server.count("summarize"), materialization_metadata(result, "entities")

    always, always_metadata = run(0)
    default, default_metadata = run(500)
    never, never_metadata = run(1_000_000)
    assert never == 0 and never_metadata["joined_descriptions"] > 0
    assert 0 < default < always and always_metadata["joined_descriptions"] == 0
    assert default >= default_metadata["summarized_descriptions"] > 0  # at least one call per long list
    assert default_metadata["joined_descriptions"] > 0
