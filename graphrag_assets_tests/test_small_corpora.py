"""The offline engine indexes any corpus with at least one sentence, and keeps nothing executable in DuckDB."""

import csv

import numpy as np
import polars as pl
import pytest

from graphrag_assets.method.embeddings.text import LocalEmbedder
from graphrag_assets.method.schema import frame

from .conftest import REPO, SAMPLE_CORPUS, materialization_metadata, stored


def write_corpus(folder, kind: str) -> None:
    folder.mkdir(parents=True)
    if kind == "three files":
        (folder / "a.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage built the engine.")
        (folder / "b.md").write_text("# Notes\nAda Lovelace met Charles Babbage in London.")
        (folder / "c.txt").write_text("Charles Babbage and Ada Lovelace wrote letters about the Analytical Engine.")
    elif kind == "one lowercase sentence":
        (folder / "s.txt").write_text("the cat sat on the mat.")
    elif kind == "repetitive":
        (folder / "r.txt").write_text("Scrooge said humbug. " * 300)
    else:  # fifteen chapters of the sample as CSV rows
        book = next((REPO / "data" / SAMPLE_CORPUS).glob("*.txt")).read_text(encoding="utf-8")
        with open(folder / "book.csv", "w", newline="", encoding="utf-8") as out:
            rows = csv.writer(out)
            rows.writerow(["title", "text"])
            rows.writerows([f"Chapter {i + 1}", book[20000 + i * 3000 : 20000 + (i + 1) * 3000]] for i in range(15))


@pytest.mark.parametrize("kind", ["three files", "one lowercase sentence", "repetitive", "fifteen csv chapters"])
def test_the_offline_engine_indexes_a_small_corpus(workspace, kind):
    write_corpus(workspace.data / "small", kind)
    result = workspace.materialize("small")
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert len(workspace.sql("SELECT * FROM entities WHERE corpus = 'small'")) > 0
    assert len(workspace.sql("SELECT * FROM community_reports WHERE corpus = 'small' AND status = 'ok'")) > 0
    metadata = materialization_metadata(result, "text_embeddings")
    if metadata["dimensions"] < 128:
        assert metadata["offline_dimensions_note"] == "reduced from 128: the corpus is small"


def test_the_offline_embedding_model_is_stored_as_numbers_a_row_per_term_and_embeds_questions_the_same(
    offline_index,
):
    workspace, _, _ = offline_index
    columns = dict(
        workspace.sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'embedding_model_terms'"
        ).values
    )
    assert columns["id"] == "VARCHAR" and columns["components"] == "FLOAT[]"
    assert "BLOB" not in columns.values()
    model = LocalEmbedder.from_tables(stored(workspace, "embedding_models"), stored(workspace, "embedding_model_terms"))
    assert model.dimensions == 128 and len(model.vocabulary) == len(stored(workspace, "embedding_model_terms"))
    again = LocalEmbedder.from_tables(*model.to_tables())
    assert again.vocabulary == model.vocabulary and np.array_equal(again.components, model.components)
    units = workspace.sql(
        f"SELECT u.text, e.embedding FROM text_units u JOIN text_embeddings e USING (id, corpus) "
        f"WHERE u.corpus = '{SAMPLE_CORPUS}' ORDER BY u.id LIMIT 5"
    )
    vectors = np.stack(units["embedding"].map(np.asarray))
    assert np.allclose(model.embed(units["text"].tolist()), vectors, atol=1e-5)


def test_an_old_pickled_or_single_value_model_is_refused_not_loaded():
    pickled = pl.DataFrame({"id": ["offline"], "vocabulary": [None], "model": [b"a pickle"]})
    whole = pl.DataFrame({"id": ["offline"], "vocabulary": [["a", "b"]], "idf": [[1.0, 2.0]], "terms": [None]})
    for old in (pickled, whole):
        with pytest.raises(ValueError, match="older version: materialize text_embeddings again"):
            LocalEmbedder.from_tables(old, frame("embedding_model_terms"))


def test_a_corpus_over_the_fit_budget_is_fitted_on_an_even_spread_and_embedded_in_batches(monkeypatch):
    from graphrag_assets.method.embeddings import text

    texts = [f"part{n // 100} shared words and word{n % 13} number {n}" for n in range(1000)]
    assert text.fit_sample(texts, characters=10**9) is texts
    sample = text.fit_sample(texts, characters=sum(map(len, texts)) // 10)
    assert 90 <= len(sample) <= 100 and {t.split()[0] for t in sample} == {f"part{n}" for n in range(10)}
    whole = LocalEmbedder.fit(texts, dimensions=8)
    monkeypatch.setattr(text, "EMBED_BATCH", 7)  # batches end mid-corpus and a last short one remains
    halves = np.concatenate([whole._embed_batch(texts[:500]), whole._embed_batch(texts[500:])])
    assert np.array_equal(whole.embed(texts), halves)
    monkeypatch.setattr(text, "FIT_CHARACTERS", sum(map(len, texts)) // 10)
    spread = LocalEmbedder.fit(texts, dimensions=8)
    assert spread.dimensions == 8 and "part9" in spread.vocabulary and "number" in spread.vocabulary
    assert len(spread.vocabulary) < len(whole.vocabulary)  # most numbers are outside the sample
    # The index hands over its texts as a column: only the sample becomes Python strings, to the same model.
    column = pl.Series(texts)
    assert text.fit_sample(column) == text.fit_sample(texts)
    from_column = LocalEmbedder.fit(column, dimensions=8)
    assert from_column.vocabulary == spread.vocabulary and np.array_equal(
        from_column.embed(column), spread.embed(texts)
    )


def test_the_offline_embedding_keeps_the_most_frequent_terms_up_to_its_bound():
    texts = [f"common words here and rare{n} word{n % 7}" for n in range(400)]
    model = LocalEmbedder.fit(texts, dimensions=4, max_terms=10)
    assert len(model.vocabulary) == 10 and "common" in model.vocabulary and "rare3" not in model.vocabulary
    assert model.embed(["common rare3"]).shape == (1, 4)
