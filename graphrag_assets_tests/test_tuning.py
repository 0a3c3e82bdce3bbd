"""Prompts tuned to a corpus: what tuning asks and checks, the prompts it writes, and an index that uses them, or a
corpus's own prompt files, or goes back to the defaults."""

import asyncio
import json
import re

import dagster as dg
import pandas as pd
import polars as pl
import pytest

from graphrag_assets.automation.corpora import prompt_files_sensor
from graphrag_assets.cli import step_settings
from graphrag_assets.definitions import index_assets, tuning_assets
from graphrag_assets.method.embeddings.text import LocalEmbedder
from graphrag_assets.method.model_interface import InvalidReply
from graphrag_assets.method.tuning import entity_type_list, example_records, parse_profile, sample_text_units
from graphrag_assets.resources import CorporaResource
from graphrag_assets_tests.corpora import supply_contracts
from graphrag_assets_tests.model_server import DEFAULT_TYPES, FakeOpenAIServer

from .conftest import OFFLINE_MODELS, Workspace, chat_resource, embedding_resource, materialization_metadata
from .test_cli import Cli

CORPUS = "contracts"
R = "<|>"


def contracts(tmp_path, count: int = 6) -> Workspace:
    workspace = Workspace(tmp_path)
    supply_contracts(workspace.data / CORPUS, count)
    return workspace


def tune(workspace: Workspace, server: FakeOpenAIServer | None = None, **config) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [CORPUS])
    return dg.materialize(
        [*index_assets, *tuning_assets],
        selection=["tuned_prompts"],
        instance=instance,
        partition_key=CORPUS,
        resources=workspace.resources(*models(workspace, server)),
        run_config={"ops": {"tuned_prompts": {"config": config}}},
    )


def models(workspace: Workspace, server: FakeOpenAIServer | None):
    if server is None:
        return None, None
    return chat_resource(server.base_url, workspace.cache), embedding_resource(server.base_url, workspace.cache)


def table(workspace: Workspace, name: str) -> pd.DataFrame:
    return workspace.sql(f"SELECT * FROM {name} WHERE corpus = ? ORDER BY id", CORPUS)


def prompts_of(workspace: Workspace) -> pd.DataFrame:
    return table(workspace, "tuned_prompts").set_index("id")


def test_tuning_names_the_corpus_kinds_and_writes_examples_from_its_text_that_parse(tmp_path):
    workspace = contracts(tmp_path)
    with FakeOpenAIServer() as server:
        result = tune(workspace, server, sampling="clusters", sampled_text_units=4, examples=3)
    tuned = prompts_of(workspace)
    types = json.loads(tuned["entity_types"].iloc[0])
    assert {"supplier", "buyer"} <= set(types) and len(types) <= 10
    extraction = tuned.loc["extract_graph", "template"]
    assert f"Entity types: {','.join(types)}" in extraction
    domain = tuned["domain"].iloc[0]
    assert domain.startswith("passages about") and f"This corpus is {domain}." in extraction  # the model's words
    assert f"Entities to look for: {', '.join(types)}" in tuned.loc["extract_claims", "template"]
    assert tuned.loc["community_report", "template"].startswith(f"This corpus is {domain}.")

    examples = json.loads(tuned["examples"].iloc[0])
    sampled = json.loads(tuned["sampled_text_unit_ids"].iloc[0])
    assert len(examples) == 3 and len(sampled) == 4
    for example in examples:
        assert example["text_unit_id"] in sampled
        assert example["excerpt"] in extraction and example["records"] in extraction
        example_records(example["excerpt"], types)(example["records"])  # parses as records of the listed types
    assert server.count("tune_corpus") == server.count("tune_entity_types") == 1
    assert server.count("extract") == 3  # one call per example
    metadata = materialization_metadata(result, "tuned_prompts")
    assert metadata["derived_by"] == "model" and metadata["examples"] == 3
    assert f"+Entity types: {','.join(types)}" in metadata["diff_against_defaults"]


def test_offline_tuning_takes_the_types_from_noun_phrases_and_makes_up_no_example(tmp_path):
    workspace = contracts(tmp_path)
    result = tune(workspace)
    tuned = prompts_of(workspace)
    assert tuned["derived_by"].iloc[0].startswith("offline: entity types are the sample's most frequent noun-phrase")
    assert {"supplier", "buyer", "agreement"} <= set(json.loads(tuned["entity_types"].iloc[0]))
    assert json.loads(tuned["examples"].iloc[0]) == [] and tuned["domain"].iloc[0] == ""
    assert "Example 1" not in tuned.loc["extract_graph", "template"]
    assert materialization_metadata(result, "tuned_prompts")["domain"] == "(needs a model)"


def index(workspace: Workspace, server: FakeOpenAIServer | None, prompts: str | None = None, **more):
    config = {"ops": {"index_prompts": {"config": {"prompts": prompts}}}} if prompts else None
    chat, embeddings = models(workspace, server)
    return workspace.materialize(CORPUS, chat, embeddings=embeddings, run_config=config, **more)


@pytest.mark.slow
def test_an_index_takes_the_tuned_prompts_when_chosen_keeps_the_choice_and_goes_back(tmp_path):
    workspace = contracts(tmp_path, count=4)
    with FakeOpenAIServer() as server:
        tune(workspace, server)
        types = {t.upper() for t in json.loads(prompts_of(workspace)["entity_types"].iloc[0])}
        index(workspace, server, "tuned")
        assert set(table(workspace, "entities")["type"]) <= types
        assert set(table(workspace, "index_prompts").query("source == 'tuned'")["id"]) >= {
            "extract_graph",
            "extract_claims",
            "summarize_descriptions",
            "community_report",
        }
        extractions = server.count("extract")

        index(workspace, server)  # no choice: the corpus keeps the tuned prompts, from the cache
        assert set(table(workspace, "index_prompts")["source"]) == {"tuned", "default"}
        assert server.count("extract") == extractions

        index(workspace, server, "default")
        assert set(table(workspace, "index_prompts")["source"]) == {"default"}
        assert set(table(workspace, "entities")["type"]) <= set(DEFAULT_TYPES)
        assert server.count("extract") > extractions


def test_a_corpus_prompt_file_wins_and_a_broken_one_stops_the_index_naming_it(tmp_path):
    workspace = contracts(tmp_path, count=3)
    folder = workspace.data / CORPUS / "prompts"
    folder.mkdir()
    (folder / "summarize_descriptions.txt").write_text(
        "Summarize what a commercial lawyer needs about {entity_name} in {max_length} words:\n{description_list}\n"
    )
    steps = ["documents", "base_text_units", "index_prompts"]
    index(workspace, None, selection=steps)
    sources = table(workspace, "index_prompts").set_index("id")["source"]
    assert sources["summarize_descriptions"] == f"data/{CORPUS}/prompts/summarize_descriptions.txt"
    assert len(table(workspace, "documents")) == 3  # the prompt file is no document

    (folder / "extract_graph.txt").write_text("Find the entities of type {entity_types}.\n")
    (folder / "extract_grap.txt").write_text("{input_text}\n")
    problems = []
    for broken, expected in (
        ("extract_grap.txt", "no prompt of the index is called 'extract_grap'"),
        ("extract_graph.txt", "the prompt lacks {input_text}, which the index fills in"),
    ):
        failed = index(workspace, None, selection=steps, raise_on_error=False)
        problems.append(failed.get_step_failure_events()[0].step_failure_data.user_failure_data.description)
        assert f"data/{CORPUS}/prompts/{broken}: {expected}" in problems[-1]
        (folder / broken).unlink()

    failed = index(workspace, None, "tuned", selection=steps, raise_on_error=False)
    message = failed.get_step_failure_events()[0].step_failure_data.user_failure_data.description
    assert f"has no tuned prompts: run `graphrag-assets tune --corpus {CORPUS}`" in message


def test_a_prompt_file_is_refused_when_loaded_for_fields_the_index_does_not_fill_binary_data_or_its_size():
    from graphrag_assets.method.prompts import load_prompt
    from graphrag_assets.method.tuning import MAX_PROMPT_CHARS, PromptFileError, check_prompt_file

    template = load_prompt("extract_graph").template
    check_prompt_file("extract_graph", template, "data/c/prompts/extract_graph.txt")  # the default passes
    for text, words in (
        (
            template.replace("{input_text}", "{input_txt}"),
            "lacks {input_text}, which the index fills in and has {input_txt}, which the index does not fill in",
        ),
        (template + "\nAlso mind {tone}.", "has {tone}, which the index does not fill in and would send as it is"),
        (template + "\x00\x01", "holds binary data (NUL bytes)"),
        (template + "x" * MAX_PROMPT_CHARS, "characters is more than a prompt (100,000 at most)"),
    ):
        with pytest.raises(PromptFileError, match=re.escape(words)):
            check_prompt_file("extract_graph", text, "data/c/prompts/extract_graph.txt")


def test_replies_that_do_not_answer_the_tuning_prompts_are_refused():
    types = entity_type_list(4)
    assert types('{"entity_types": ["Party", "Contract  Clause", "party"]}') == ["party", "contract clause"]
    for reply in (
        '{"entity_types": ["a", "b", "c", "d", "e"]}',  # more than asked
        '{"entity_types": ["party"]}',
        '{"entity_types": ["the party that signs the contract", "clause"]}',
        '{"types": ["party", "clause"]}',
    ):
        with pytest.raises(InvalidReply):
            types(reply)

    text = "Harrow Mills sells flour to Coldwater Foods."
    check = example_records(text, ["company", "product"])
    good = f'("entity"{R}HARROW MILLS{R}COMPANY{R}A miller)##("entity"{R}COLDWATER FOODS{R}COMPANY{R}A buyer)##'
    related = good + f'("relationship"{R}HARROW MILLS{R}COLDWATER FOODS{R}sells to{R}7)<|COMPLETE|>'
    assert check(related).count("##") == 2
    for wrong in (
        f'("entity"{R}HARROW MILLS{R}PERSON{R}A miller)<|COMPLETE|>',  # a type not listed
        f'("entity"{R}BEXLEY GRAIN{R}COMPANY{R}A miller)<|COMPLETE|>',  # a name the text does not hold
        good + f'("relationship"{R}HARROW MILLS{R}FLOUR{R}sells{R}5)<|COMPLETE|>',  # FLOUR is no entity
        good,  # cut off: no completion marker
        f'("entity"{R}HARROW MILLS{R}COMPANY{R}Sells {{input_text}})<|COMPLETE|>',  # a field the prompt fills in
    ):
        with pytest.raises(InvalidReply):
            check(wrong)

    assert parse_profile('{"domain": "contracts", "persona": "A lawyer", "language": "English"}')["persona"] == (
        "a lawyer"
    )
    for reply in (
        '{"domain": "contracts {input_text}", "persona": "a lawyer", "language": "English"}',
        '{"domain": "contracts", "persona": "a lawyer"}',
        '{"domain": "contracts", "persona": "a lawyer", "language": "English, mostly; some French"}',
    ):
        with pytest.raises(InvalidReply):
            parse_profile(reply)


def test_cluster_sampling_reads_every_kind_of_document():
    topics = {
        "weather": "Rain and wind and clouds over the hills; the storm brings rain, the wind turns cold.",
        "cooking": "Flour, butter and sugar are creamed; the oven bakes the dough into bread and cake.",
        "sailing": "The boat tacks into the wind; the crew trims the sails and the keel holds the course.",
    }
    units = pl.DataFrame(
        [
            {"id": f"{topic}-{i}", "text": f"{text} Note {i} of {topic}."}
            for topic, text in topics.items()
            for i in range(6)
        ]
    )

    async def embed(texts):
        return LocalEmbedder.fit(texts).embed(texts)

    picked = asyncio.run(sample_text_units(units, 3, "clusters", seed=1, embed=embed))
    assert sorted(i.split("-")[0] for i in picked["id"]) == sorted(topics)
    assert len(asyncio.run(sample_text_units(units, 3, "random", seed=1))) == 3


def test_prompts_can_be_chosen_for_the_whole_run_from_the_command_line():
    assert step_settings(None, ["prompts=tuned"]) == {"ops": {"index_prompts": {"config": {"prompts": "tuned"}}}}


def test_a_prompt_file_added_edited_or_removed_reruns_what_is_built_with_the_prompts(tmp_path):
    workspace = contracts(tmp_path, count=1)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("corpus", [CORPUS])
    corpora = {"corpora": CorporaResource(root=str(workspace.data)), **OFFLINE_MODELS}

    def tick(cursor):
        context = dg.build_sensor_context(instance=instance, resources=corpora, cursor=cursor)
        return prompt_files_sensor(context), context.cursor

    result, cursor = tick(None)
    assert isinstance(result, dg.SkipReason)
    prompt = workspace.data / CORPUS / "prompts" / "community_report.txt"
    prompt.parent.mkdir()
    prompt.write_text("Report on the community as a contracts lawyer would.\n{input_text}\n")
    requests, cursor = tick(cursor)
    assert [r.partition_key for r in requests] == [CORPUS]
    selected = {k.to_user_string() for k in requests[0].asset_selection}
    assert {"index_prompts", "entities", "covariates", "community_reports", "published_index"} <= selected
    assert selected.isdisjoint({"documents", "base_text_units"})
    assert isinstance(tick(cursor)[0], dg.SkipReason)
    prompt.write_text(prompt.read_text() + "Keep it short.\n")
    requests, cursor = tick(cursor)
    assert len(requests) == 1
    prompt.unlink()
    assert len(tick(cursor)[0]) == 1  # removing the file is a change too


@pytest.mark.slow
def test_the_cli_tunes_a_corpus_prints_its_types_and_the_diff_and_indexes_with_them(tmp_path):
    supply_contracts(tmp_path / "data" / CORPUS, 3)
    cli = Cli(tmp_path)
    tuned = cli.run("tune", "--corpus", CORPUS)
    assert tuned.returncode == 0, tuned.stderr
    assert "entity types: buyer, supplier" in tuned.stdout and "derived by offline" in tuned.stdout
    assert "+++ extract_graph (this corpus)" in tuned.stdout and "+Entity types: buyer,supplier" in tuned.stdout
    indexed = cli.run("index", "--corpus", CORPUS, "--prompts", "tuned")
    assert indexed.returncode == 0, indexed.stderr
    assert "prompts: tuned" in indexed.stderr
