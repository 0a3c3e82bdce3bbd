"""Bad input: each broken file is named with its problem, and the rest of the corpus is indexed."""

import json

import polars as pl
import pytest

from graphrag_assets.method.ingest.documents import Problem, TabularColumns, problem_summary, read_corpus
from graphrag_assets.method.progress import PROGRESS_TO_TERMINAL
from graphrag_assets.resources import CorporaResource

from .conftest import materialization_metadata


@pytest.fixture
def messy_corpus(workspace):
    folder = workspace.data / "messy"
    folder.mkdir()
    (folder / "good.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage built the engine.")
    (folder / "notes.md").write_text("# Notes\nAda Lovelace met Charles Babbage in London.")
    (folder / "zz-copy.txt").write_text("Ada Lovelace wrote the first program. Charles Babbage built the engine.")
    (folder / "empty.txt").write_text("   \n")
    (folder / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "latin1.txt").write_bytes("Café au lait".encode("latin-1"))
    (folder / "table.csv").write_text("body,author\nsome text,someone\n")
    (folder / "rows.csv").write_text("title,text,year\nFirst,Grace Hopper wrote a compiler.,1952\nSecond,,1953\n")
    (folder / "lines.jsonl").write_text(
        json.dumps({"text": "Alan Turing proposed a test.", "title": "Turing"}) + "\n{not json\n[1, 2]\n"
    )
    (folder / "data.bin").write_bytes(b"\x00\x01")
    (folder.parent / "elsewhere").mkdir()
    (folder.parent / "elsewhere" / "kept-out.txt").write_text("A folder linked in is not walked into.")
    (folder / "linked").symlink_to(folder.parent / "elsewhere")
    return folder


def test_each_broken_file_is_named_with_its_problem(messy_corpus):
    result = read_corpus(messy_corpus, TabularColumns(metadata=("year",)))
    problems = {p.path: p.message for p in result.problems}
    assert "duplicate of good.txt" in problems["zz-copy.txt"]
    assert "empty file" in problems["empty.txt"]
    assert "binary file" in problems["image.txt"]
    assert "not valid UTF-8 (byte 0xe9 at offset 3)" in problems["latin1.txt"]
    assert "no text column 'text' (columns found: author, body)" in problems["table.csv"]
    assert "empty 'text'" in problems["rows.csv#2"]
    assert "invalid JSON" in problems["lines.jsonl:2"]
    assert "not a JSON object" in problems["lines.jsonl:3"]
    assert "unsupported file type .bin" in problems["data.bin"]
    assert "is a link to a folder, which is not followed" in problems["linked"]
    assert sorted(result.documents["title"]) == ["First", "Turing", "good.txt", "notes.md"]
    first = result.documents.filter(pl.col("title") == "First")
    assert json.loads(first["metadata"][0]) == {"year": "1952"}


def test_a_broken_file_does_not_sink_the_corpus(workspace, messy_corpus, monkeypatch, capfd):
    monkeypatch.setenv(PROGRESS_TO_TERMINAL, "1")  # as under the CLI
    result = workspace.materialize("messy", selection=["documents", "base_text_units"])
    terminal = [line for line in capfd.readouterr().err.splitlines() if line.startswith("  [messy] warning: ")]
    assert len(terminal) == 6 and "and 5 more kinds" in terminal[-1]  # ten kinds of problem: five said, five counted
    assert all(": " in line.removeprefix("  [messy] warning: messy/") for line in terminal[:5])
    metadata = materialization_metadata(result, "documents")
    assert metadata["dagster/row_count"] == 4
    assert "latin1.txt" in metadata["problems"] and "table.csv" in metadata["problems"]
    assert set(workspace.sql("SELECT title FROM documents WHERE corpus = 'messy'")["title"]) == {
        "First",
        "Turing",
        "good.txt",
        "notes.md",
    }


def test_many_bad_rows_are_one_line_with_a_count_and_a_file_with_nothing_read_is_refused(tmp_path):
    folder = tmp_path / "rows"
    folder.mkdir()
    (folder / "bad.csv").write_text("title,text\n" + "".join(f"row {i},\n" for i in range(5000)))
    (folder / "broken.json").write_text("{not json")
    (folder / "good.txt").write_text("Grace Hopper wrote a compiler.")
    result = read_corpus(folder)
    summary = problem_summary(result.problems)
    assert len(result.problems) == 5001 and len(summary) == 2
    assert summary[0].startswith("5,000 times (bad.csv#") and summary[0].endswith(
        "and 4,997 more): empty 'text', skipped"
    )
    assert summary[1].startswith("broken.json: invalid JSON")
    assert result.files[".json"] == {"skipped": 1} and result.files[".csv"] == {"skipped": 1}  # nothing read from them
    assert result.files_read == 1
    many_kinds = [Problem(f"f{i}.txt", f"problem number {i}") for i in range(100)]
    assert problem_summary(many_kinds)[-1] == "and 80 more kinds of problem (80 problems)"


def test_a_corpus_with_nothing_readable_fails_with_the_reasons(workspace):
    folder = workspace.data / "hopeless"
    folder.mkdir()
    (folder / "empty.txt").write_text("")
    result = workspace.materialize("hopeless", selection=["documents", "base_text_units"], raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "has no readable documents" in failure.description
    assert "empty.txt" in failure.metadata["problems"].value


@pytest.mark.parametrize(
    "name,reason",
    [
        ("../outside", "not a safe identifier"),
        ("Upper Case", "not a safe identifier"),
        ("messy\n", "not a safe identifier"),
        ("escape", "outside"),
    ],
)
def test_unsafe_corpus_folders_are_refused(workspace, tmp_path, name, reason):
    (tmp_path / "elsewhere").mkdir()
    (workspace.data / "escape").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=reason):
        CorporaResource(root=str(workspace.data)).folder(name)


def test_a_file_linked_from_outside_the_corpus_is_refused(workspace, tmp_path):
    folder = workspace.data / "linked"
    folder.mkdir()
    (folder / "inside.txt").write_text("Ada Lovelace wrote the first program.")
    secret = tmp_path / "private.txt"
    secret.write_text("The payroll password is hunter2.")
    (folder / "notes.txt").symlink_to(secret)
    (folder / "sub").mkdir()
    (folder / "sub" / "again.txt").symlink_to(folder / "inside.txt")  # a link within the corpus is fine
    result = read_corpus(folder)
    problems = {p.path: p.message for p in result.problems}
    assert f"links to {secret}, outside the corpus folder; refused" == problems["notes.txt"]
    assert not result.documents["text"].str.contains("hunter2").any()
    assert "duplicate of inside.txt" in problems["sub/again.txt"]


def test_nul_bytes_after_the_first_8_kb_are_removed_with_a_warning(workspace):
    folder = workspace.data / "nul"
    folder.mkdir()
    (folder / "late.txt").write_bytes(b"Ada Lovelace wrote. " * 500 + b"\x00\x00Charles Babbage built.")
    (folder / "early.txt").write_bytes(b"Ada\x00Lovelace")
    result = read_corpus(folder)
    problems = {p.path: p for p in result.problems}
    assert "2 NUL byte(s) from offset 10000 on were removed" in problems["late.txt"].message
    assert not problems["late.txt"].skipped and problems["early.txt"].skipped
    (text,) = result.documents["text"]
    assert "\x00" not in text and text.endswith("Ada Lovelace wrote. Charles Babbage built.")
