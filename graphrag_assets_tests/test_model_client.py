"""The model client against a real HTTP server: limits, retries, timeouts, cache, usage, secrets."""

import asyncio

from graphrag_assets.models import ModelClient, ModelSettings
from graphrag_assets_tests.model_server import Faults, FakeOpenAIServer

PROMPTS = [[{"role": "user", "content": f"Entity name: E{i}\nDescription List:\n- fact number {i}\n#######"}]
           for i in range(24)]


def run(settings: ModelSettings, work):
    async def main():
        client = ModelClient(settings)
        try:
            return await work(client), client.usage
        finally:
            await client.close()
    return asyncio.run(main())


def complete_all(client):
    return asyncio.gather(*(client.complete(messages) for messages in PROMPTS))


def settings(server, tmp_path, **overrides) -> ModelSettings:
    return ModelSettings(**{"model": "test-model", "base_url": server.base_url, "cache_dir": str(tmp_path / "cache"),
                            "max_retries": 3, "timeout_seconds": 5, **overrides})


def test_transient_faults_are_retried_to_the_same_answers(tmp_path):
    with FakeOpenAIServer() as clean:
        expected, _ = run(settings(clean, tmp_path / "a"), complete_all)
    with FakeOpenAIServer(Faults(transient_every=2, retry_after_seconds=0.01)) as faulty:
        answers, usage = run(settings(faulty, tmp_path / "b"), complete_all)
        faults = [s for s in faulty.served if s.kind == "fault"]
    assert answers == expected
    assert faults and {s.status for s in faults} == {429, 500}
    assert usage.retries == len(faults) and usage.failures == 0
    assert usage.calls == len(PROMPTS) + len(faults)


def test_a_reply_slower_than_the_timeout_is_retried(tmp_path):
    with FakeOpenAIServer(Faults(slow_every=3, slow_seconds=2.0)) as server:
        answers, usage = run(settings(server, tmp_path, timeout_seconds=0.5), complete_all)
    assert all(answers) and usage.retries > 0 and usage.failures == 0


def test_a_call_that_keeps_failing_returns_none_and_never_leaks_the_key(tmp_path, caplog):
    secret = "sk-test-0123456789-SECRET"
    with FakeOpenAIServer(Faults(broken_every=1)) as server:
        answers, usage = run(settings(server, tmp_path, api_key=secret, max_retries=1), complete_all)
    assert answers == [None] * len(PROMPTS)
    assert usage.failures == len(PROMPTS) and usage.calls == 2 * len(PROMPTS)
    assert usage.errors and all(secret not in e for e in usage.errors)
    assert "***" in usage.errors[0]  # the proxy echoed the key; it was redacted
    assert secret not in caplog.text


def test_the_cache_answers_a_rerun_without_calling_the_server(tmp_path):
    with FakeOpenAIServer() as server:
        first, first_usage = run(settings(server, tmp_path), complete_all)
        again, usage = run(settings(server, tmp_path), complete_all)
        served = len(server.served)
    assert again == first and usage.cache_hits == len(PROMPTS) and usage.calls == 0
    assert served == len(PROMPTS) and first_usage.prompt_tokens > 0


def test_calls_run_concurrently_within_the_limit(tmp_path):
    with FakeOpenAIServer(latency_seconds=0.05) as server:
        run(settings(server, tmp_path, max_concurrency=3), complete_all)
        assert 1 < server.max_in_flight <= 3


def test_embeddings_and_azure_style_endpoints(tmp_path):
    with FakeOpenAIServer(embedding_dimensions=16) as server:
        vectors, usage = run(settings(server, tmp_path), lambda c: c.embed(["one text", "another text"]))
        azure = settings(server, tmp_path / "azure", base_url=server.base_url.removesuffix("/v1"),
                         api_version="2024-06-01", api_key="azure-key")
        answer, _ = run(azure, lambda c: c.complete(PROMPTS[0]))
    assert len(vectors) == 2 and len(vectors[0]) == 16 and usage.prompt_tokens > 0
    assert answer == "E0: fact number 0"
