"""Documents from a SQL query (a DuckDB file, PostgreSQL): each corpus's rows become a parquet file the index reads
as any corpus folder, rewritten only when they change; a bad query or column is one clear error."""

import duckdb
import psycopg2
import pyarrow.parquet as pq
import pytest

from graphrag_assets.resources import QueryCorporaResource
from graphrag_assets.store.document_query import DocumentQuery, QueryRefused, write_corpora


def warehouse(path) -> str:
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE tickets (ticket_id INTEGER, subject VARCHAR, body VARCHAR, team VARCHAR)")
        conn.execute(
            "INSERT INTO tickets VALUES (1, 'Refund', 'Ada asked for a refund of invoice 42.', 'billing'), "
            "(2, 'Login', 'Charles cannot log in since Tuesday.', 'access'), "
            "(3, 'Invoice', 'Ada found invoice 43 charged twice.', 'billing'), "
            "(4, 'Odd', 'A ticket filed under a team no folder may be named.', '../etc')"
        )
    return str(path)


def test_a_querys_rows_become_one_parquet_file_per_corpus_with_the_index_column_names(tmp_path):
    query = DocumentQuery(
        sql="SELECT * FROM tickets WHERE team <> '../etc'",
        database=warehouse(tmp_path / "warehouse.duckdb"),
        text_column="body",
        title_column="subject",
        id_column="ticket_id",
        metadata_columns=("team",),
        corpus_column="team",
    )
    folders, returned = write_corpora(query, tmp_path / "mirror")
    assert sorted(folders) == returned == ["access", "billing"]
    billing = pq.read_table(folders["billing"] / "documents.parquet")
    assert billing.column_names == ["text", "title", "ticket_id", "team"]
    assert billing["ticket_id"].to_pylist() == [1, 3]
    assert query.metadata() == ["ticket_id", "team"]

    written = (folders["billing"] / "documents.parquet").stat().st_mtime_ns
    write_corpora(query, tmp_path / "mirror")  # the same rows: the file is kept, so nothing downstream changes
    assert (folders["billing"] / "documents.parquet").stat().st_mtime_ns == written


def test_a_query_without_the_columns_it_was_told_or_that_fails_is_refused_by_name(tmp_path):
    database = warehouse(tmp_path / "warehouse.duckdb")
    missing = DocumentQuery(sql="SELECT ticket_id, subject FROM tickets", database=database, title_column="subject")
    with pytest.raises(QueryRefused, match=r"returns no column 'text' \(it returns ticket_id, subject\)"):
        missing.read()
    with pytest.raises(QueryRefused, match="the documents' query failed: .*tickts"):
        DocumentQuery(sql="SELECT * FROM tickts", database=database).read()
    with pytest.raises(QueryRefused, match="does not exist"):
        DocumentQuery(sql="SELECT 1", database=str(tmp_path / "nowhere.duckdb")).read()


def test_an_unsafe_corpus_value_is_refused_by_name_and_the_other_corpora_go_on(tmp_path):
    corpora = QueryCorporaResource(
        query="SELECT * FROM tickets",
        query_database=warehouse(tmp_path / "warehouse.duckdb"),
        text_column="body",
        title_column="subject",
        corpus_column="team",
        mirror_dir=str(tmp_path / "mirrors"),
        conversion_cache_dir=None,
    )
    names, refused = corpora.scan()
    assert names == ["access", "billing"]
    assert list(refused) == ["../etc"] and "not a safe identifier" in refused["../etc"]
    assert (corpora.folder("billing") / "documents.parquet").is_file()
    assert not (tmp_path / "etc").exists() and not (tmp_path / "mirrors" / "etc").exists()


def test_documents_come_from_postgresql_with_the_connection_string_kept_out_of_errors(tmp_path, postgres):
    dsn = postgres.create_database("helpdesk")
    with psycopg2.connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE articles (id INTEGER, headline TEXT, content TEXT)")
        cursor.execute("INSERT INTO articles VALUES (7, 'Resetting a password', 'Open settings, then security.')")
    query = DocumentQuery(
        sql="SELECT * FROM pg.public.articles",
        postgres=dsn + " password=not-the-real-one",
        text_column="content",
        title_column="headline",
        id_column="id",
        corpus="help",
    )
    folders, _ = write_corpora(query, tmp_path / "mirror")
    assert pq.read_table(folders["help"] / "documents.parquet").to_pylist() == [
        {"text": "Open settings, then security.", "title": "Resetting a password", "id": 7}
    ]
    broken = DocumentQuery(sql="SELECT * FROM pg.public.nothing", postgres=dsn + " password=s3cret-value")
    with pytest.raises(QueryRefused) as refused:
        broken.read()
    assert "s3cret-value" not in str(refused.value)
