"""A Microsoft GraphRAG output folder in data/ is imported as a corpus: no extraction call, and every query works."""

import json
import shutil

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graphrag_assets.answers.sources import cited
from graphrag_assets.method.exports import GRAPHRAG_SCHEMAS
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .conftest import (
    INDEX_ASSETS,
    SAMPLE_CORPUS,
    Workspace,
    chat_resource,
    embedding_resource,
    materialization_metadata,
    table,
)

CORPUS = "imported-graph"
IMPORTED = INDEX_ASSETS[: INDEX_ASSETS.index("community_reports") + 1]  # what an import loads or links
PEOPLE = ["ADA QUAYLE", "BEN ORME", "CORA VANE", "DAN FELL", "EVA MOSS", "FRED HALE", "GIL PRY", "HAL ROOK"]


def microsoft_output() -> dict[str, list[dict]]:
    """A small index as Microsoft GraphRAG 3.x writes it: two documents, a two-level hierarchy where community 1
    is not split (its hierarchy then stops; ours carries it down), claims."""
    units = [
        {
            "id": f"unit-{i}",
            "human_readable_id": i,
            "text": f"{PEOPLE[i]} met {PEOPLE[(i + 1) % 8]} at the harbour of Port Wren.",
            "n_tokens": 14,
            "document_id": f"doc-{i // 4}",
            "entity_ids": [f"entity-{i}", f"entity-{(i + 1) % 8}"],
            "relationship_ids": [f"rel-{i}"],
            "covariate_ids": [],
        }
        for i in range(8)
    ]
    documents = [
        {
            "id": f"doc-{d}",
            "human_readable_id": d,
            "title": f"log-{d}.txt",
            "text": " ".join(u["text"] for u in units if u["document_id"] == f"doc-{d}"),
            "text_unit_ids": [u["id"] for u in units if u["document_id"] == f"doc-{d}"],
            "creation_date": "2026-01-0{d + 1}",
            "raw_data": None,
        }
        for d in range(2)
    ]
    entities = [
        {
            "id": f"entity-{i}",
            "human_readable_id": i,
            "title": name,
            "type": "PERSON",
            "description": f"{name.title()} works at the harbour.",
            "text_unit_ids": [f"unit-{i}", f"unit-{(i - 1) % 8}"],
            "frequency": 2,
            "degree": 2,
        }
        for i, name in enumerate(PEOPLE)
    ]
    relationships = [
        {
            "id": f"rel-{i}",
            "human_readable_id": i,
            "source": PEOPLE[i],
            "target": PEOPLE[(i + 1) % 8],
            "description": f"{PEOPLE[i].title()} met {PEOPLE[(i + 1) % 8].title()}.",
            "weight": 1.0 + i,
            "combined_degree": 4,
            "text_unit_ids": [f"unit-{i}"],
        }
        for i in range(8)
    ]
    # As in Microsoft GraphRAG's own test index: a relationship whose endpoint is no entity, and a name an alias
    # search would pair with ADA QUAYLE (an import asks the model nothing unless told to).
    relationships.append({**relationships[7], "id": "rel-8", "human_readable_id": 8, "target": "THE HARBOUR MASTER"})
    entities.append({**entities[0], "id": "entity-8", "human_readable_id": 8, "title": "QUAYLE", "degree": 0})
    covariates = [
        {
            "id": f"claim-{i}",
            "human_readable_id": i,
            "covariate_type": "claim",
            "type": "MEETING",
            "description": f"{PEOPLE[i].title()} held a meeting.",
            "subject_id": PEOPLE[i],
            "object_id": None,
            "status": "TRUE",
            "start_date": None,
            "end_date": None,
            "source_text": units[i]["text"],
            "text_unit_id": f"unit-{i}",
        }
        for i in range(3)
    ]
    members = {0: range(0, 4), 1: range(4, 8), 2: range(0, 2), 3: range(2, 4)}
    hierarchy = {0: (0, -1, [2, 3]), 1: (0, -1, []), 2: (1, 0, []), 3: (1, 0, [])}
    communities, reports = [], []
    for number, (level, parent, children) in hierarchy.items():
        common = {"human_readable_id": number, "community": number, "level": level, "parent": parent}
        common |= {"children": children, "title": f"Community {number}", "period": "2026-01-02"}
        communities.append(
            {
                "id": f"community-{number}",
                **common,
                "entity_ids": [f"entity-{i}" for i in members[number]],
                "relationship_ids": [f"rel-{i}" for i in members[number]],
                "text_unit_ids": [f"unit-{i}" for i in members[number]],
                "size": len(members[number]),
            }
        )
        names = " and ".join(PEOPLE[i].title() for i in members[number])
        reports.append(
            {
                "id": f"report-{number}",
                **{k: v for k, v in common.items() if k != "period"},
                "summary": f"The harbour meetings of {names}.",
                "full_content": f"# Harbour circle {number}\n\nThe harbour meetings of {names}.",
                "rank": 5.0,
                "rating_explanation": "They run the harbour.",
                "findings": [{"explanation": f"{names} meet at Port Wren.", "summary": "Harbour meetings"}],
                "full_content_json": "{}",
                "period": "2026-01-02",
                "size": len(members[number]),
                "title": f"Harbour circle {number}",
            }
        )
    return {
        "documents": documents,
        "text_units": units,
        "entities": entities,
        "relationships": relationships,
        "covariates": covariates,
        "communities": communities,
        "community_reports": reports,
    }


def write_output(folder, tables: dict[str, list[dict]]) -> None:
    folder.mkdir(parents=True)
    for name, rows in tables.items():
        pq.write_table(pa.Table.from_pylist(rows, schema=GRAPHRAG_SCHEMAS[name]), folder / f"{name}.parquet")


@pytest.mark.slow
def test_a_microsoft_graphrag_output_is_imported_and_answers_at_every_level(tmp_path):
    workspace = Workspace(tmp_path)
    output = microsoft_output()
    write_output(workspace.data / CORPUS / "output", output)
    with FakeOpenAIServer() as server:
        chat, embeddings = (
            chat_resource(server.base_url, workspace.cache),
            embedding_resource(server.base_url, workspace.cache),
        )
        result = workspace.materialize(CORPUS, chat=chat, embeddings=embeddings)  # every index asset, green
        assert {s.kind for s in server.served} <= {"embed", "probe"}  # no extraction, summary, alias or report call
        # Its parquet files are an index to import, not documents to read.
        assert materialization_metadata(result, "documents")["source"] == "Microsoft GraphRAG output (imported)"
        (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name.startswith("relationship_end")]
        assert check.severity == dg.AssetCheckSeverity.WARN and check.metadata["dangling_endpoints"].value == 1
        layout = workspace.sql("SELECT * FROM layouts WHERE corpus = ? AND kind = 'entity'", CORPUS)
        assert set(layout["title"]) == set(PEOPLE)  # the graph's nodes are entities (QUAYLE has no edge to walk)
        for name in ("documents", "entities", "relationships", "covariates"):
            ids = workspace.sql(f"SELECT id FROM {name} WHERE corpus = ? ORDER BY id", CORPUS)["id"].tolist()
            assert ids == sorted(row["id"] for row in output[name]), name
        engines = workspace.sql("SELECT DISTINCT asset, engine FROM lineage WHERE corpus = ?", CORPUS)
        assert set(engines.loc[engines["engine"] == "imported", "asset"]) == set(IMPORTED) - {
            "index_prompts",  # what our prompts would be; the imported graph was extracted with the other tool's
            "text_units",
            "entity_aliases",
        }
        # Community 1 is not split: our hierarchy carries a copy of it, and its report, down to level 1.
        communities = workspace.sql("SELECT * FROM communities WHERE corpus = ? ORDER BY community", CORPUS)
        copy = communities[communities["carried_from"] == 1].iloc[0]
        assert copy["level"] == 1 and list(communities.loc[communities["community"] == 1, "children"].iloc[0]) == [
            copy["community"]
        ]
        reports = workspace.sql("SELECT * FROM community_reports WHERE corpus = ?", CORPUS)
        assert len(reports) == 5 and (reports["status"] == "ok").all()
        for level in (0, 1):
            result = workspace.ask(
                CORPUS,
                "global_search",
                {"question": "Who meets at the harbour?", "community_level": level},
                chat=chat,
                embeddings=embeddings,
            )
            answer = workspace.sql("SELECT context FROM query_answers WHERE run_id = ?", result.run_id).iloc[0][
                "context"
            ]
            expected = reports.loc[reports["level"] == level, "id"]
            assert sorted(json.loads(answer)["reports"]) == sorted(expected)
        # The copy of community 1 at level 1 is cited as community 1, a number Microsoft's index has (the offline
        # answer quotes and cites each report it uses).
        question = {"question": "Who meets at the harbour?", "community_level": 1}
        offline = workspace.ask(CORPUS, "global_search", question, embeddings=embeddings)
        answer = workspace.sql("SELECT answer FROM query_answers WHERE run_id = ?", offline.run_id).iloc[0, 0]
        assert 1 in cited(answer, "Reports") and set(cited(answer, "Reports")) <= {0, 1, 2, 3}
        mapped = " ".join(s.prompt for s in server.served if s.kind == "map")
        assert all(f"Harbour circle {n}" in mapped for n in range(4))


def test_our_export_imports_back_with_the_same_rows_and_ids(llm_index, tmp_path):
    source = llm_index[0]
    workspace = Workspace(tmp_path)
    shutil.copytree(source.root / "exports" / SAMPLE_CORPUS / "parquet", workspace.data / CORPUS)
    workspace.materialize(CORPUS, selection=list(IMPORTED))
    for name in ("documents", "text_units", "entities", "relationships", "covariates", "community_reports"):
        ours = table(source, name)
        back = workspace.sql(f"SELECT * FROM {name} WHERE corpus = ? ORDER BY id", CORPUS)
        assert len(back) == len(ours), name
        assert back["id"].tolist() == ours["id"].tolist(), name
    # Each text comes back in its own column: a report's title is not its summary, nor its summary its full text.
    texts = {
        "community_reports": ["title", "summary", "full_content", "rank", "rating_explanation"],
        "entities": ["title", "type", "description"],
        "relationships": ["source", "target", "description", "weight"],
        "text_units": ["text", "n_tokens"],
    }
    for name, columns in texts.items():
        ours = table(source, name).set_index("id")[columns].sort_index()
        back = workspace.sql(f"SELECT * FROM {name} WHERE corpus = ?", CORPUS).set_index("id")[columns].sort_index()
        pd.testing.assert_frame_equal(back, ours, check_dtype=False, obj=name)
    # The hierarchy comes back whole: the same communities at every level, copies included.
    ours, back = table(source, "communities"), workspace.sql("SELECT * FROM communities WHERE corpus = ?", CORPUS)
    assert sorted(zip(ours["level"], ours["id"])) == sorted(zip(back["level"], back["id"]))


def test_an_output_that_cannot_be_imported_is_refused_at_its_first_step_naming_file_column_and_row(tmp_path):
    from graphrag_assets.method.graphrag_import import GraphRAGOutputError, check_output, documents_and_units

    def broken(name: str, change) -> str:
        tables = microsoft_output()
        change(tables)
        folder = tmp_path / name
        write_output(folder, tables)
        with pytest.raises(GraphRAGOutputError) as refused:
            check_output(folder)
        return str(refused.value)

    def duplicate_entity(tables):
        tables["entities"][1]["id"] = tables["entities"][0]["id"]

    def deep_level(tables):  # one community far below the others: carried down, it made ~100k rows
        tables["communities"][-1]["level"] = 3000

    def null_level(tables):
        tables["communities"][0]["level"] = None

    def orphan(tables):
        child = next(c for c in tables["communities"] if c["level"] == 1)
        child["parent"] = 999

    assert "entities.parquet: column id holds 'entity-0' twice (rows 0 and 1)" in broken("dup", duplicate_entity)
    assert "communities.parquet: column level holds [0, 1, 3000]; levels count from 0 with no gap" in broken(
        "deep", deep_level
    )
    assert "communities.parquet: column level is empty at row 0" in broken("null", null_level)
    assert "is 999, which is not a community of level 0" in broken("orphan", orphan)

    folder = tmp_path / "no-tokens"  # an older output without n_tokens: counted, not refused
    write_output(folder, microsoft_output())
    units = pq.read_table(folder / "text_units.parquet")
    pq.write_table(units.drop_columns(["n_tokens"]), folder / "text_units.parquet")
    _, base = documents_and_units(folder)
    assert (base["n_tokens"] > 5).all()
