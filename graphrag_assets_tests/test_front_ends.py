"""Chat front-ends against the OpenAI-compatible API: sources in the shape they render as citations, and their
housekeeping requests (titles, tags, follow-up suggestions) told apart from questions.

The in-process tests send the forms Open WebUI documents; the slow test drives Open WebUI itself in Chromium.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from graphrag_assets.answers.records import AnswerJournal
from graphrag_assets.server.front_end_tasks import front_end_task
from graphrag_assets.server.keys import KeyRing, digest

from .conftest import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    SAMPLE_CORPUS,
    TOOL_CACHE,
    chat_resource,
    embedding_resource,
    require_chromium,
)
from .model_server import FakeOpenAIServer, Faults
from .test_server import METHODS, answer_count, client_of, rows, running_server, service_for
from .test_webserver import free_port


def task_prompt(task: str, output: str, *turns: tuple[str, str]) -> str:
    """A housekeeping request in the form Open WebUI sends (its own wording aside): the task, the JSON wanted
    under `### Output:`, the chat quoted as USER/ASSISTANT lines."""
    history = "\n".join(f"{role}: {text}" for role, text in turns)
    return (
        f"### Task:\n{task}\n### Guidelines:\n- Reply with the JSON object only.\n### Output:\nJSON format: {output}\n"
        f"### Chat History:\n<chat_history>\n{history}\n</chat_history>"
    )


CHAT = (("USER", "Who is Bob Cratchit?"), ("ASSISTANT", "Scrooge's clerk, who keeps a large family."))
TITLE = task_prompt("Name this chat in a few words.", '{ "title": "a short title" }', *CHAT)
TAGS = task_prompt("Tag the themes of this chat.", '{ "tags": ["tag1", "tag2"] }', *CHAT)
FOLLOW_UPS = task_prompt("Suggest what to ask next.", '{ "follow_ups": ["Question 1?", "Question 2?"] }', *CHAT)
QUERIES = task_prompt("Write search queries for this chat.", '{ "queries": ["query1"] }', *CHAT)


def ask(client, content: str, model: str = f"{SAMPLE_CORPUS}:local", **more):
    return client.post(
        "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": content}], **more}
    )


@pytest.fixture
def store(offline_index, tmp_path) -> Path:
    database = tmp_path / "graphrag.duckdb"
    shutil.copy(offline_index[0].database, database)
    return database


def test_housekeeping_requests_are_recognised_by_their_documented_form():
    task = front_end_task(TITLE)
    assert task is not None and task.key == "title" and task.user_turns == ["Who is Bob Cratchit?"]
    assert front_end_task(FOLLOW_UPS).key == "follow_ups" and front_end_task(TAGS).is_list
    # A question that mentions a task, or JSON, is still a question.
    assert front_end_task('Who wrote "### Task:" in the ledger?') is None
    assert front_end_task('Explain the JSON { "title": "x" } Scrooge keeps') is None
    assert front_end_task("### Task:\nSummarise the book.\n### Output:\nA paragraph.") is None


def test_offline_housekeeping_gets_plain_replies_and_is_neither_recorded_nor_rate_counted(store, tmp_path):
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(f"keys:\n  - {{name: webui, sha256: {digest('sk-front-end')}, per_minute: 2}}\n")
    service = service_for(store, journal=AnswerJournal(tmp_path / "queue.sqlite"))
    headers = {"Authorization": "Bearer sk-front-end"}
    with client_of(service, KeyRing.load(keys_file)) as client:
        client.headers.update(headers)
        assert ask(client, "Who is Bob Cratchit?").status_code == 200
        replies = {
            name: ask(client, prompt) for name, prompt in (("title", TITLE), ("tags", TAGS), ("queries", QUERIES))
        }
        follow_ups = ask(client, FOLLOW_UPS, stream=True)
        assert ask(client, "And his son?").status_code == 200  # the second question of two a minute
        assert ask(client, "And his wife?").status_code == 429  # the tasks did not count
    contents = {name: json.loads(r.json()["choices"][0]["message"]["content"]) for name, r in replies.items()}
    assert contents == {
        "title": {"title": "Who is Bob Cratchit"},
        "tags": {"tags": [SAMPLE_CORPUS]},
        "queries": {"queries": ["Who is Bob Cratchit?"]},
    }
    assert all(r.json()["graphrag"] == {"front_end_task": name} for name, r in replies.items())
    assert "sources" not in replies["title"].json()
    streamed = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in follow_ups.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    suggested = json.loads(streamed)["follow_ups"]
    assert suggested and all(q.endswith("?") for q in suggested)  # the question-generation method's templates
    assert answer_count(store) == 2  # the two questions, none of the tasks


def test_housekeeping_with_a_model_is_written_by_it_and_checked(llm_index, tmp_path):
    database = tmp_path / "graphrag.duckdb"
    shutil.copy(llm_index[0].database, database)
    with FakeOpenAIServer() as server:
        service = service_for(
            database,
            journal=AnswerJournal(tmp_path / "queue.sqlite"),
            chat=chat_resource(server.base_url, tmp_path / "cache").settings(),
            embeddings=embedding_resource(server.base_url, tmp_path / "cache").settings(),
        )
        with client_of(service) as client:
            title = ask(client, TITLE).json()
            tags = ask(client, TAGS).json()
            follow_ups = ask(client, FOLLOW_UPS).json()
        asked = [s.kind for s in server.served if s.kind != "probe"]
    assert json.loads(title["choices"][0]["message"]["content"]) == {"title": "Who Is Bob"}
    assert json.loads(tags["choices"][0]["message"]["content"]) == {"tags": ["Literature", "Victorian London"]}
    assert title["usage"]["completion_tokens"] > 0
    assert json.loads(follow_ups["choices"][0]["message"]["content"])["follow_ups"]  # the model's own questions
    assert asked.count("front_end_task") == 2 and "questions" in asked  # no retrieval for title and tags
    assert len(service.journal) == 0


def test_a_model_reply_that_does_not_hold_falls_back_to_the_plain_one(llm_index, tmp_path):
    database = tmp_path / "graphrag.duckdb"
    shutil.copy(llm_index[0].database, database)
    with FakeOpenAIServer(Faults(refusal_every=1, heeds_corrections=False)) as server:
        chat = chat_resource(server.base_url, tmp_path / "cache", max_retries=0).settings()
        service = service_for(database, journal=AnswerJournal(tmp_path / "queue.sqlite"), chat=chat)
        with client_of(service) as client:
            reply = ask(client, TITLE)
    assert reply.status_code == 200
    assert json.loads(reply.json()["choices"][0]["message"]["content"]) == {"title": "Who is Bob Cratchit"}


def test_sources_travel_as_open_webui_citations_and_in_full_under_our_own_field(store, tmp_path):
    service = service_for(store, journal=AnswerJournal(tmp_path / "queue.sqlite"))
    with client_of(service) as client:
        whole = ask(client, "Who is Bob Cratchit?").json()
        streamed = ask(client, "Who is Marley?", model=f"{SAMPLE_CORPUS}:global", stream=True).text
    ours = whole["graphrag"]["sources"]
    assert whole["graphrag"]["answer_id"] and {s["kind"] for s in ours} >= {"text_unit"}
    citations = whole["sources"]
    passages = [s for s in ours if s["kind"] in ("text_unit", "report")]
    assert len(citations) == len(passages)
    for citation, source in zip(citations, passages):
        assert citation["document"] == [source["text"]] and len(citation["metadata"]) == 1
        assert citation["source"]["name"] and citation["metadata"][0]["source"] == citation["source"]["id"]
        if source["kind"] == "text_unit":
            assert citation["source"]["name"] == "a-christmas-carol.txt"
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    events = [c["event"] for c in chunks if "event" in c]
    assert events and all(e["type"] == "source" and e["data"]["document"] for e in events)
    assert any(e["data"]["source"]["name"].startswith("Report ") for e in events)  # global search cites reports
    assert all(c["choices"] and "delta" in c["choices"][0] for c in chunks if "event" in c)


OPEN_WEBUI = "0.12.4"
CHAINLIT = "2.12.0"


def installed(program: str, version: str, *packages: str) -> Path:
    """A front-end's program, installed once into a virtual environment of its own outside the checkout (Open WebUI
    brings several hundred packages the project does not need, torch among them); the test is skipped, with pip's
    reason, where it cannot be installed."""
    venv = TOOL_CACHE / f"{program}-{version}"
    path = venv / "bin" / program
    if path.exists():
        return path
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted install
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", *packages], capture_output=True, text=True, timeout=1200
    )
    if done.returncode != 0 or not path.exists():
        shutil.rmtree(venv, ignore_errors=True)
        reason = [line for line in done.stderr.splitlines() if not line.startswith("WARNING")][-3:]
        pytest.skip(f"{program} {version} could not be installed here: {' '.join(reason)}")
    return path


def served(process: subprocess.Popen, url: str, log: Path, what: str) -> None:
    """Wait until a front-end answers at `url` (5 minutes: the first start of Open WebUI sets up its database)."""
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{what} did not start in 5 minutes"
        time.sleep(0.5)


@contextmanager
def running_open_webui(program: Path, base_url: str, root: Path) -> Iterator[str]:
    """Open WebUI as its documentation starts it against an OpenAI-compatible endpoint, offline, without sign-in."""
    port = free_port()
    root.mkdir()
    env = {
        **os.environ,
        "DATA_DIR": str(root),
        "PORT": str(port),
        "OPENAI_API_BASE_URL": f"{base_url}/v1",
        "OPENAI_API_KEY": "unused",
        "ENABLE_OLLAMA_API": "false",
        "WEBUI_AUTH": "false",
        "WEBUI_SECRET_KEY": "test-only",
        "OFFLINE_MODE": "true",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "false",
        "DEFAULT_MODELS": f"{SAMPLE_CORPUS}:local",
    }
    log = root / "open-webui.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [str(program), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=root,
            stdout=output,
            stderr=output,
        )
    try:
        served(process, f"http://127.0.0.1:{port}/health", log, "Open WebUI")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=60)


def answered(page, count: int) -> None:
    """Wait until the chat shows `count` finished answers: the Stop button gone, each answer's toolbar shown."""
    page.get_by_role("button", name="Regenerate").nth(count - 1).wait_for(timeout=60_000)
    page.get_by_role("button", name="Stop").wait_for(state="detached", timeout=30_000)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first run installs Open WebUI
def test_open_webui_unchanged_shows_answers_citations_titles_and_follow_ups(store, tmp_path):
    require_chromium()
    # torch 2.13.0 is the CPU build this kind of machine keeps on disk; any other torch is a download of gigabytes
    program = installed("open-webui", OPEN_WEBUI, "torch==2.13.0", f"open-webui=={OPEN_WEBUI}")
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("GRAPHRAG_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with (
        running_server(store, tmp_path) as (url, _),
        running_open_webui(program, url, tmp_path / "open-webui") as webui,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(webui)
        welcome = page.get_by_role("button", name="Okay, Let's Go!")  # the release notes, shown once
        with contextlib.suppress(PlaywrightTimeout):
            welcome.click(timeout=15_000)
        page.get_by_role("button", name=f"Selected model: {SAMPLE_CORPUS}:local").click()
        listed = page.get_by_role("option").all_inner_texts()
        assert {f"{SAMPLE_CORPUS}:{method}" for method in METHODS} <= {text.strip() for text in listed}
        page.keyboard.press("Escape")

        page.locator("#chat-input").click()
        page.keyboard.type("Who is Bob Cratchit?")
        page.keyboard.press("Enter")
        answered(page, 1)
        assert "Cratchit" in page.locator("#response-content-container").first.inner_text()
        assert page.get_by_role("button", name="Copy").count() >= 1

        chips = page.get_by_role("button", name=re.compile(r"Toggle \d+ sources?"))
        chips.first.click()
        # local search cites community reports and passages: a chip opens each, the passages under their document
        for name, shown in (("a-christmas-carol.txt", "Cratchit"), ("Report ", "Community of")):
            page.locator("button[id^=source-]", has_text=name).first.click()
            dialog = page.get_by_role("dialog")
            assert name in dialog.inner_text() and shown in dialog.inner_text(), dialog.inner_text()
            page.keyboard.press("Escape")
            dialog.wait_for(state="detached")
        # the chat's title, and the suggestions under the answer, from the server's housekeeping replies
        page.get_by_text("Who is Bob Cratchit", exact=True).first.wait_for(timeout=30_000)
        page.get_by_role("button", name=re.compile("^Follow up: ")).first.wait_for(timeout=30_000)

        page.locator("#chat-input").click()
        page.keyboard.type("And his son?")
        page.keyboard.press("Enter")
        answered(page, 2)
        page.screenshot(path=shots / "open_webui.png")
        browser.close()
    assert not errors, errors
    recorded = rows(
        store, "SELECT question, conversation FROM query_answers WHERE asked_by = 'local' ORDER BY created_at"
    )
    assert [r[0] for r in recorded] == ["Who is Bob Cratchit?", "And his son?"]  # no title, tag or follow-up
    assert json.loads(recorded[1][1])[0]["content"] == "Who is Bob Cratchit?"  # the follow-up continued it


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_chainlit_front_end_streams_answers_opens_sources_and_follows_up(store, tmp_path):
    """deploy/chainlit/app.py, a Chainlit app over the openai client, as its README section runs it."""
    require_chromium()
    program = installed("chainlit", CHAINLIT, f"chainlit=={CHAINLIT}", "openai")
    from playwright.sync_api import expect, sync_playwright

    app = Path(__file__).resolve().parents[1] / "deploy" / "chainlit" / "app.py"
    (tmp_path / "chainlit").mkdir()
    errors: list[str] = []
    with running_server(store, tmp_path) as (url, _), sync_playwright() as playwright:
        port = free_port()
        log = tmp_path / "chainlit" / "chainlit.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [str(program), "run", str(app), "--headless", "--host", "127.0.0.1", "--port", str(port)],
                env={**os.environ, "GRAPHRAG_SERVER": url},
                cwd=tmp_path / "chainlit",
                stdout=output,
                stderr=output,
            )
        try:
            served(process, f"http://127.0.0.1:{port}/", log, "Chainlit")
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"http://127.0.0.1:{port}/")
            page.locator("#chat-profiles").click()
            listed = {text.strip() for text in page.get_by_role("option").all_inner_texts()}
            assert {f"{SAMPLE_CORPUS}:{method}" for method in METHODS} <= listed
            page.get_by_role("option", name=f"{SAMPLE_CORPUS}:local").click()
            expect(page.locator("#chat-profiles")).to_have_text(f"{SAMPLE_CORPUS}:local")
            for number, question in enumerate(("Who is Bob Cratchit?", "And his son?"), start=1):
                expect(page.locator("#chat-input")).to_be_editable()
                page.locator("#chat-input").fill(question)
                page.locator("#chat-submit").click()
                page.get_by_text(question, exact=True).wait_for(timeout=20_000)  # sent
                page.get_by_text("Sources", exact=True).nth(number - 1).wait_for(timeout=60_000)  # answered
            cited = page.get_by_text(re.compile(r"^Sources \(\d+\)$")).first  # a citation, linked to its passage
            cited.click()
            page.get_by_text("Bob Cratchit", exact=False).last.wait_for()
            page.screenshot(path=tmp_path / "chainlit.png")
            browser.close()
        finally:
            process.terminate()
            process.wait(timeout=60)
    assert not errors, errors
    recorded = rows(
        store, "SELECT question, conversation FROM query_answers WHERE asked_by = 'local' ORDER BY created_at"
    )
    assert [r[0] for r in recorded] == ["Who is Bob Cratchit?", "And his son?"]
    assert json.loads(recorded[1][1])[0]["content"] == "Who is Bob Cratchit?"
