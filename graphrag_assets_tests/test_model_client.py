"""The model client against a real HTTP server: limits, retries, timeouts, checked replies, cache, usage, secrets."""

import asyncio
import multiprocessing
import re

import diskcache
import pytest

from graphrag_assets.method.embeddings.text import embed_with_model
from graphrag_assets.method.graph.claims import check_claims_reply, claims_prompt
from graphrag_assets.method.graph.extraction import check_graph_reply, extraction_prompt
from graphrag_assets.method.graph.records import check_free_text
from graphrag_assets.method.graph.summaries import summary_prompt
from graphrag_assets.method.ingest.tokens import count_tokens
from graphrag_assets.models import EndpointError, ModelClient, ModelSettings
from graphrag_assets.models.budgets import Budget, SpentLedger, ledger
from graphrag_assets.models.pacing import AdaptiveConcurrency
from graphrag_assets_tests.model_server import REFUSAL, FakeOpenAIServer, Faults, claims_reply, tagged


def summary_request(name: str, *descriptions: str) -> list[dict]:
    return [{"role": "user", "content": summary_prompt(name, list(descriptions), 100)}]


PROMPTS = [summary_request(f"E{i}", f"fact number {i}") for i in range(24)]


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
    return ModelSettings(
        **{
            "model": "test-model",
            "base_url": server.base_url,
            "cache_dir": str(tmp_path / "cache"),
            "max_retries": 3,
            "timeout_seconds": 5,
            **overrides,
        }
    )


def test_transient_faults_are_retried_to_the_same_answers(tmp_path):
    with FakeOpenAIServer() as clean:
        expected, _ = run(settings(clean, tmp_path / "a"), complete_all)
    with FakeOpenAIServer(Faults(transient_every=2, retry_after_seconds=0.01)) as faulty:
        answers, usage = run(settings(faulty, tmp_path / "b"), complete_all)
        faults = [s for s in faulty.served if s.kind == "fault"]
    assert answers == expected
    assert faults and {s.status for s in faults} == {429, 500}
    assert usage.retries == len(faults) and usage.failures == 0
    assert usage.calls == 1 + len(PROMPTS) + len(faults)  # the probe before the first request, too


def test_a_reply_slower_than_the_timeout_is_retried(tmp_path):
    with FakeOpenAIServer(Faults(slow_every=3, slow_seconds=2.0)) as server:
        # A third of the replies are slow: the breaker (tested on its own) must not read them as an outage.
        answers, usage = run(
            settings(server, tmp_path, timeout_seconds=0.5, circuit_breaker_failures=len(PROMPTS)), complete_all
        )
    assert all(answers) and usage.retries > 0 and usage.failures == 0


def test_a_call_that_keeps_failing_returns_none_and_never_leaks_the_key(tmp_path, caplog):
    secret = "sk-test-0123456789-SECRET"
    with FakeOpenAIServer(Faults(broken_every=1)) as server:
        answers, usage = run(settings(server, tmp_path, api_key=secret, max_retries=1), complete_all)
    assert answers == [None] * len(PROMPTS)
    assert usage.failures == len(PROMPTS) and usage.calls == 1 + 2 * len(PROMPTS)
    assert usage.errors and all(secret not in e for e in usage.errors)
    assert "***" in usage.errors[0]  # the proxy echoed the key; it was redacted
    assert secret not in caplog.text
    with FakeOpenAIServer(Faults(status=500)) as server, pytest.raises(EndpointError) as raised:
        run(settings(server, tmp_path, api_key=secret), complete_all)
    assert secret not in str(raised.value) and "***" in str(raised.value) and server.base_url in str(raised.value)


def test_the_cache_answers_a_rerun_without_calling_the_server(tmp_path):
    with FakeOpenAIServer() as server:
        first, first_usage = run(settings(server, tmp_path), complete_all)
        again, usage = run(settings(server, tmp_path), complete_all)
        served = len(server.served)
    assert again == first and usage.cache_hits == len(PROMPTS) and usage.calls == 0
    assert served == 1 + len(PROMPTS) and first_usage.prompt_tokens > 0  # the probe, then each prompt once


class SimulatedTime:
    """A clock that moves only when the code under test sleeps: a window of the budget passes at once."""

    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def spend_in_turn(budget: Budget, clock: SimulatedTime, costs: list[int]) -> list[tuple[float, int]]:
    """Spend each cost in turn; when each was let through, and what it cost."""

    async def spend_all():
        let_through = []
        for cost in costs:
            await budget.spend(cost)
            let_through.append((clock.now, cost))
        return let_through

    return asyncio.run(spend_all())


def most_in_any_window(let_through: list[tuple[float, int]], window: float) -> int:
    return max(sum(cost for at, cost in let_through if start <= at < start + window) for start, _ in let_through)


def test_a_requests_budget_spends_its_whole_window_at_once_and_never_more():
    clock = SimulatedTime()
    budget = Budget("requests", 10, 4, SpentLedger(None, clock=clock), sleep=clock.sleep)
    let_through = spend_in_turn(budget, clock, [1] * 31)
    started = let_through[0][0]
    assert [at for at, _ in let_through[:10]] == [started] * 10  # the budget in full, not sliced per second
    assert most_in_any_window(let_through, 4) <= 10  # the provider's own window never sees more
    assert let_through[-1][0] - started >= 3 * 4  # 31 requests: the fourth window's first is the 31st


def test_a_tokens_budget_holds_costs_of_every_size_within_the_window():
    clock = SimulatedTime()
    budget = Budget("tokens", 200, 2, SpentLedger(None, clock=clock), sleep=clock.sleep)
    costs = [37, 120, 55, 81, 9, 150, 64, 33, 99, 12, 140, 70]
    let_through = spend_in_turn(budget, clock, costs)
    assert [cost for _, cost in let_through] == costs and most_in_any_window(let_through, 2) <= 200
    whole = spend_in_turn(budget, clock, [500])  # more than the whole budget: let through alone, once it is empty
    assert most_in_any_window(let_through + whole, 2) == 500 and whole[0][0] >= let_through[-1][0] + 2


def test_processes_sharing_a_ledger_file_share_one_budget(tmp_path):
    clock = SimulatedTime()
    file = str(tmp_path / "limits.sqlite")
    first, second = (Budget("requests", 6, 10, SpentLedger(file, clock=clock), sleep=clock.sleep) for _ in range(2))
    spend_in_turn(first, clock, [1] * 4)
    assert second.spent() == 4  # the other process's spending, read from the file
    before = clock.now
    let_through = spend_in_turn(second, clock, [1] * 4)
    # The first process's four leave the window 11 s on (10 s, 5% longer, in whole seconds): then the last two go.
    assert [at for at, _ in let_through] == pytest.approx([before, before, before + 11, before + 11], abs=0.05)


def test_spending_already_done_is_counted_as_far_as_it_fits_and_an_announcement_catches_up():
    clock = SimulatedTime()
    budget = Budget("tokens", 100, 60, SpentLedger(None, clock=clock), sleep=clock.sleep)
    budget.count(70)
    budget.count(50)  # only 30 of these fit: the window cannot hold more than the budget
    assert budget.spent() == 100
    clock.now += 70  # the window is 63 s (5% longer than asked); all of it has left
    budget.catch_up(40)  # the endpoint says 40 are spent: none of them counted by us yet
    budget.catch_up(25)  # already counted
    assert budget.spent() == 40


@pytest.mark.slow  # real windows of a real server; the arithmetic is tested above on a simulated clock
def test_a_requests_per_minute_budget_equal_to_the_servers_limit_never_meets_a_429(tmp_path):
    """The window is 2 s here instead of a minute, so the test takes seconds: 11 requests (the probe and 10
    prompts) against a limit of 5 per window take three windows and are never refused. (How the budget spends
    its windows is tested above on a simulated clock; this is the client spending it against a real server.)"""
    prompts = [summary_request(f"R{i}", f"r{i}") for i in range(10)]
    with FakeOpenAIServer(requests_per_minute=5, rate_window_seconds=2, rate_limit_headers=False) as server:
        answers, usage = run(
            settings(server, tmp_path, requests_per_minute=5, rate_window_seconds=2, tokens_per_minute=1_000_000),
            lambda c: asyncio.gather(*(c.complete(m) for m in prompts)),
        )
        refused = server.count("rate_limited")
    # The server counts in its own windows: not one refusal means no window of its saw more than the limit.
    assert all(answers) and refused == 0 and usage.retries == 0 and usage.paced > 0


@pytest.mark.slow  # real windows of a real server; the arithmetic is tested above on a simulated clock
def test_a_tokens_per_minute_budget_paces_the_calls(tmp_path):
    with FakeOpenAIServer() as server:
        answers, usage = run(
            settings(server, tmp_path, tokens_per_minute=200, rate_window_seconds=2),
            lambda c: asyncio.gather(*(c.complete(m) for m in PROMPTS[:6])),
        )
    assert all(answers) and usage.paced > 0 and usage.prompt_tokens + usage.completion_tokens > 200


@pytest.mark.slow  # real windows of a real server; the arithmetic is tested above on a simulated clock
def test_without_configured_limits_the_client_paces_to_the_endpoints_headers(tmp_path):
    """No RPM or TPM set: the limit the server announces in its x-ratelimit headers keeps 11 requests
    (the probe and 10 prompts) against 5 per 2-second window from meeting a 429, window by window.
    (The window is the endpoint's, a minute unless set: 2 s here, so the test takes seconds.)"""
    prompts = [summary_request(f"H{i}", f"h{i}") for i in range(10)]
    with FakeOpenAIServer(requests_per_minute=5, rate_window_seconds=2) as server:
        answers, usage = run(
            settings(server, tmp_path, rate_window_seconds=2),
            lambda c: asyncio.gather(*(c.complete(m) for m in prompts)),
        )
        refused = server.count("rate_limited")
    assert all(answers) and refused == 0 and usage.rate_limited == 0 and usage.paced > 0


@pytest.mark.slow  # real windows of a real server; the arithmetic is tested above on a simulated clock
def test_the_tokens_header_paces_too(tmp_path):
    with FakeOpenAIServer(tokens_per_minute=400, rate_window_seconds=2) as server:
        answers, usage = run(
            settings(server, tmp_path, rate_window_seconds=2),
            lambda c: asyncio.gather(*(c.complete(m) for m in PROMPTS[:8])),
        )
        refused = server.count("rate_limited")
    # About 100 server-counted tokens a call: 9 calls need three windows of 400 tokens. The first reply
    # announces the limit while the others are in flight: at most that first round can be refused.
    assert all(answers) and refused <= 1 and usage.paced > 0


def test_concurrency_rises_while_the_endpoint_keeps_up_and_halves_on_429():
    now = [0.0]  # a clock of the test's own: a cut waits a round trip, and the test moves time on itself
    concurrency = AdaptiveConcurrency(start=8, ceiling=64, clock=lambda: now[0])
    for _ in range(200):
        concurrency.in_flight = int(concurrency.limit)  # every slot in use, as under load
        concurrency.succeeded(seconds=0.5, completion_tokens=100)
    assert concurrency.limit > 20
    before = concurrency.limit
    concurrency.rate_limited()
    concurrency.rate_limited()  # news of the same round trip cuts once
    assert concurrency.limit == pytest.approx(before / 2)
    for _ in range(20):
        concurrency.succeeded(seconds=0.0, completion_tokens=100)  # replies come fast, then slow
    for _ in range(20):
        concurrency.succeeded(seconds=0.0, completion_tokens=100)
    slower = concurrency.limit
    now[0] += 0.06
    for _ in range(20):
        concurrency.succeeded(seconds=0.05, completion_tokens=100)
    assert concurrency.limit < slower
    fixed = AdaptiveConcurrency(start=8, ceiling=12, adaptive=False)
    fixed.rate_limited()
    assert fixed.limit == 12


def test_a_429_while_requests_wait_for_the_announced_budget_does_not_halve_concurrency():
    """Two steps share an endpoint's minute, each pacing by its headers: a 429 while this client is already
    waiting for that budget is the other step's spending, and the pace waits for it; a 429 when nothing waited
    says the endpoint takes less than we send, and halves concurrency."""
    now = 0.0
    concurrency = AdaptiveConcurrency(start=8, ceiling=400, clock=lambda: now)
    concurrency.in_flight = 8
    concurrency.succeeded(seconds=5.0, completion_tokens=100, room=300)
    assert concurrency.limit == 300
    now += 1.0
    concurrency.constrained()  # a request waited for the announced budget
    now += 2.0
    concurrency.rate_limited()
    assert concurrency.limit == 300
    now += 10.0  # a round trip with no wait for the budget
    concurrency.rate_limited()
    assert concurrency.limit == 150


def test_after_waiting_for_the_shared_budget_concurrency_still_follows_the_room_the_limits_leave():
    """Extraction and claims share the endpoint's minute, so each waits for the budget; when claims finish, the
    room left to extraction doubles, and it must take it at once, not grow into it by one per round trip."""
    concurrency = AdaptiveConcurrency(start=8, ceiling=None)
    concurrency.in_flight = 8
    concurrency.succeeded(seconds=5.0, completion_tokens=100, room=150)
    assert concurrency.limit == 150
    concurrency.constrained()  # a request waited for the budget the two steps share
    concurrency.in_flight = 150
    concurrency.succeeded(seconds=5.0, completion_tokens=100, room=300)  # the other step has finished
    assert concurrency.limit == 300
    concurrency.rate_limited()  # a 429 while the budget binds is not the endpoint taking less than we send
    assert concurrency.limit == 300


def test_a_reply_wakes_only_as_many_queued_requests_as_there_are_free_slots():
    """Thousands of requests queue for a few slots; each reply must not wake them all (that was quadratic)."""
    concurrency = AdaptiveConcurrency(start=4, ceiling=4, adaptive=False)
    wake_ups = 0

    class CountingCondition(asyncio.Condition):
        async def wait(self):
            nonlocal wake_ups
            await super().wait()
            wake_ups += 1

    async def request(peak: list[int]) -> None:
        async with concurrency:
            peak.append(concurrency.in_flight)
            await asyncio.sleep(0)

    async def main() -> list[int]:
        concurrency._changed = CountingCondition()
        peak: list[int] = []
        await asyncio.gather(*(request(peak) for _ in range(2000)))
        return peak

    peak = asyncio.run(main())
    assert len(peak) == 2000 and max(peak) == 4
    assert wake_ups < 3 * 2000  # waking every waiter on every reply: about 2000 * 2000 / 2


def simulated_peak_concurrency(capacity: int | None, replies: int = 3000, latency: float = 0.05) -> int:
    """Drive the adaptive limit with a simulated endpoint and clock: no wall time, so no machine load, in it.

    The endpoint works on `capacity` requests at once (None: all of them) and queues the rest, so a reply takes
    `latency` times the share of a round the requests in flight need beyond its capacity.
    """
    now = 0.0
    concurrency = AdaptiveConcurrency(start=8, ceiling=64, clock=lambda: now)
    peak = 0
    for _ in range(replies):
        concurrency.in_flight = int(concurrency.limit)  # a long queue of work keeps every slot busy
        peak = max(peak, concurrency.in_flight)
        seconds = latency * (1 if capacity is None else max(1.0, concurrency.in_flight / capacity))
        now += seconds / concurrency.in_flight  # replies arrive spread over the round trip
        concurrency.succeeded(seconds=seconds, completion_tokens=20)
    return peak


def test_replies_that_grow_longer_are_not_taken_for_a_queue():
    """An endpoint that answers in 0.4 s plus 30 ms per token, never queueing: a step whose replies go from a few
    tokens (claims found, then "done" from their gleaning) to hundreds must not make concurrency back off."""
    now = 0.0
    concurrency = AdaptiveConcurrency(start=8, ceiling=64, clock=lambda: now)
    cuts = 0
    for tokens in [3] * 500 + [300] * 500 + [3, 300] * 250:
        concurrency.in_flight = int(concurrency.limit)
        seconds = 0.4 + 0.03 * tokens
        now += seconds / concurrency.in_flight
        before = concurrency.limit
        concurrency.succeeded(seconds=seconds, completion_tokens=tokens)
        cuts += concurrency.limit < before
    assert cuts == 0 and concurrency.limit > 40


def test_concurrency_eases_off_when_the_endpoint_queues():
    """An endpoint that works on 6 requests at a time makes the rest wait: latency climbs, and concurrency stops
    near where the wait doubles the best seen; against one that keeps up it climbs on to the ceiling."""
    assert simulated_peak_concurrency(capacity=6) <= 23 < simulated_peak_concurrency(capacity=None)


def test_concurrency_stays_bounded_against_a_real_queueing_server(tmp_path):
    """The same against a real server. Only the bound is asserted: a loaded machine makes replies slower, which
    can only hold concurrency lower, while how high it climbs against a free server depends on the machine."""
    prompts = [summary_request(f"Q{i}", f"q{i}") for i in range(300)]
    with FakeOpenAIServer(latency_seconds=0.05, capacity=6) as server:
        answers, queued = run(settings(server, tmp_path), lambda c: asyncio.gather(*(c.complete(m) for m in prompts)))
    assert all(answers) and queued.peak_concurrency <= 23


def test_calls_run_concurrently_within_the_limit(tmp_path):
    with FakeOpenAIServer(latency_seconds=0.05) as server:
        run(settings(server, tmp_path, max_concurrency=3), complete_all)
        assert 1 < server.max_in_flight <= 3


def test_embeddings_and_an_openai_key(tmp_path):
    with FakeOpenAIServer(embedding_dimensions=16, api_key="sk-right") as server:
        vectors, usage = run(settings(server, tmp_path, api_key="sk-right"), lambda c: c.embed(["one", "two"]))
        with pytest.raises(EndpointError, match="refused the API key"):
            run(settings(server, tmp_path / "wrong", api_key="sk-wrong"), lambda c: c.embed(["one"]))
    assert len(vectors) == 2 and len(vectors[0]) == 16 and usage.prompt_tokens > 0


def test_azure_openai_deployments_api_version_and_key(tmp_path):
    with FakeOpenAIServer(api_key="azure-key", azure_deployments=frozenset({"test-model"})) as server:
        endpoint = server.base_url.removesuffix("/v1")
        azure = settings(server, tmp_path, base_url=endpoint, api_version="2024-06-01", api_key="azure-key")
        answer, _ = run(azure, lambda c: c.complete(PROMPTS[0]))
        assert answer == "E0: fact number 0"
        for wrong, words in (
            (dict(api_key="other-key"), "refused the API key (HTTP 401)"),
            (dict(model="no-such-deployment"), "HTTP 404"),
            (dict(api_version=None), "HTTP 404"),
        ):  # without it the client speaks OpenAI's /v1 paths
            with pytest.raises(EndpointError, match=re.escape(words)):  # a fresh cache: the answer above is cached
                run(ModelSettings(**{**azure.__dict__, "cache_dir": None, **wrong}), lambda c: c.complete(PROMPTS[0]))


@pytest.mark.parametrize("in_ms", [False, True])
def test_a_429_is_retried_no_sooner_than_its_retry_after(tmp_path, in_ms):
    faults = Faults(transient_every=1, transient_status=429, retry_after_seconds=0.4, retry_after_in_ms=in_ms)
    with FakeOpenAIServer(faults) as server:
        answers, usage = run(settings(server, tmp_path), complete_all)
        served = list(server.served)
    assert all(answers) and usage.failures == 0
    first_at = {s.key: s.at for s in served if s.kind == "fault"}
    retried_at = {s.key: s.at for s in served if s.status == 200}
    assert len(first_at) == len(PROMPTS) + 1  # every prompt and the probe were refused once
    assert all(retried_at[key] - at >= 0.39 for key, at in first_at.items())


def test_a_429_that_persists_past_the_retries_fails_the_call(tmp_path):
    # The probe and one prompt, then 429 (Retry-After: 1), from an endpoint that sends no x-ratelimit headers.
    with FakeOpenAIServer(requests_per_minute=2, rate_limit_headers=False) as server:
        answers, usage = run(settings(server, tmp_path, max_retries=1), lambda c: complete_all(c))
        refused = server.count("rate_limited")
    assert answers.count(None) == len(PROMPTS) - 1 and usage.failures == len(PROMPTS) - 1
    assert refused == 2 * (len(PROMPTS) - 1) and "RateLimitError" in usage.errors[0]


TEXTS = (
    "Marley met Scrooge and Marley again. Scrooge laughed.",
    "Fezziwig danced with Belle while Fezziwig sang to Belle.",
    "Fred visited Scrooge, and Fred smiled at Scrooge.",
)
EXTRACTION = [[{"role": "user", "content": extraction_prompt(text, ("person",))}] for text in TEXTS]
CLAIMS = [[{"role": "user", "content": claims_prompt(text, ("person",), "any claim")}] for text in TEXTS]


@pytest.mark.parametrize(
    "faults,problem",
    [
        (Faults(truncated_every=1, heeds_corrections=False), "cut off at max_tokens"),
        (Faults(malformed_every=1, heeds_corrections=False), "cut off or is not in the record format"),
        (Faults(refusal_every=1, heeds_corrections=False), "cut off or is not in the record format"),
    ],
)
def test_an_invalid_reply_is_asked_again_never_cached_and_fails_when_it_stays_invalid(tmp_path, faults, problem):
    """Every re-ask of these stays invalid (the fault hits every request), so each prompt fails, loudly."""
    work = lambda c: asyncio.gather(*(c.complete(m, parse=check_graph_reply) for m in EXTRACTION))  # noqa: E731
    with FakeOpenAIServer(faults) as server:
        answers, usage = run(settings(server, tmp_path, invalid_reply_retries=2), work)
        asked = server.count("extract", "extract_corrected")
    assert answers == [None] * len(EXTRACTION)
    assert asked == 3 * len(EXTRACTION)  # the request, the same again, then with a note saying what was wrong
    assert usage.invalid_replies == 3 * len(EXTRACTION) and usage.reasked == 2 * len(EXTRACTION)
    assert usage.failures == len(EXTRACTION) and problem in usage.errors[0]
    with diskcache.Cache(str(tmp_path / "cache")) as cache:
        assert len(cache) == 0  # nothing invalid was cached


def test_a_reply_that_becomes_valid_when_asked_again_is_the_one_cached(tmp_path):
    work = lambda c: asyncio.gather(*(c.complete(m, parse=check_claims_reply) for m in CLAIMS))  # noqa: E731
    with FakeOpenAIServer(Faults(wrong_kind_every=1)) as server:  # entity records to a claims prompt
        answers, usage = run(settings(server, tmp_path), work)
        corrected = server.count("claims_corrected")
    expected = [claims_reply(tagged(m[0]["content"], "text")) for m in CLAIMS]
    assert answers == expected and corrected == len(CLAIMS) and usage.failures == 0
    with FakeOpenAIServer() as healthy:
        again, usage = run(settings(healthy, tmp_path), work)
        assert healthy.count() == 0  # the corrected replies were cached under the original requests
    assert again == expected and usage.cache_hits == len(CLAIMS)


def test_an_old_cache_entry_that_fails_the_check_is_asked_for_again(tmp_path):
    work = lambda c: c.complete(EXTRACTION[0], parse=check_graph_reply)  # noqa: E731
    with FakeOpenAIServer(Faults(truncated_every=1)) as server:
        run(settings(server, tmp_path, invalid_reply_retries=0), lambda c: c.complete(EXTRACTION[0]))  # no check
    with FakeOpenAIServer() as server:
        # Without a check the first call accepted nothing cut off at max_tokens either: nothing was cached...
        answer, usage = run(settings(server, tmp_path), work)
    assert usage.cache_hits == 0 and answer.endswith("<|COMPLETE|>")
    with diskcache.Cache(str(tmp_path / "cache")) as cache:  # ...and a poisoned entry from an older version
        key = next(iter(cache))
        cache.set(key, '("entity"<|>MARLEY<|>PERSON<|>cut off')
    with FakeOpenAIServer() as server:
        answer, usage = run(settings(server, tmp_path), work)
        assert server.count("extract") == 1
    assert usage.cache_hits == 0 and answer.endswith("<|COMPLETE|>")


def test_a_refused_summary_is_not_kept_as_a_description(tmp_path):
    prompt = summary_request("E", "one", "two")
    with FakeOpenAIServer(Faults(refusal_every=1, heeds_corrections=False)) as server:
        answer, usage = run(
            settings(server, tmp_path, invalid_reply_retries=1), lambda c: c.complete(prompt, parse=check_free_text)
        )
    assert (
        answer is None
        and usage.invalid_replies == 2
        and "declined" in usage.errors[0]
        and REFUSAL[:8] in usage.errors[0]
    )


def test_a_garbled_http_body_is_retried(tmp_path):
    with FakeOpenAIServer(Faults(garbled_every=1)) as server:
        answers, usage = run(settings(server, tmp_path), complete_all)
    assert all(answers) and usage.retries >= len(PROMPTS) and usage.failures == 0


@pytest.mark.parametrize(
    "faults,words,retryable",
    [
        (Faults(status=401), "refused the API key (HTTP 401)", False),
        (Faults(status=404), "HTTP 404", False),
        (Faults(hang=True), "did not answer within 1 s", True),
    ],
)
def test_a_misconfigured_or_hanging_endpoint_fails_fast_naming_it(tmp_path, faults, words, retryable):
    secret = "sk-never-shown-0123456789"
    with FakeOpenAIServer(faults) as server:
        with pytest.raises(EndpointError) as raised:
            run(settings(server, tmp_path, timeout_seconds=1, api_key=secret), complete_all)
        requests = server.count()
    message = str(raised.value)
    assert words in message and server.base_url in message and secret not in message
    assert raised.value.retryable == retryable
    assert requests <= 3  # the probe alone (and its retries), never a request, or a timeout, per prompt


def test_a_down_endpoint_fails_on_its_probe_not_on_every_prompt(tmp_path):
    with FakeOpenAIServer() as server:
        url = server.base_url
    client = ModelClient(ModelSettings(model="m", base_url=url, cache_dir=str(tmp_path)))

    async def ask_then_close():
        try:
            await complete_all(client)
        finally:
            await client.close()

    with pytest.raises(EndpointError, match="cannot connect to model endpoint http://127.0.0.1"):
        asyncio.run(ask_then_close())
    # The probe's three tries (a second apart at most), then every prompt refused at once: no prompt's retries.
    assert client.usage.calls == 3 and client.usage.retries == 2


def test_the_circuit_breaker_stops_a_step_when_the_endpoint_starts_hanging(tmp_path):
    with FakeOpenAIServer() as server:

        async def work(client):
            await client.complete(PROMPTS[0])  # the probe and one call succeed
            server.faults.hang = True
            return await complete_all(client)

        with pytest.raises(EndpointError, match="requests in a row failed"):
            run(settings(server, tmp_path, timeout_seconds=1, max_retries=6, max_concurrency=8), work)
        hung = server.count("hang")
    # About one hung request per slot, not 23 prompts x 7 attempts: counted, not timed.
    assert hung < 8 + 5


@pytest.mark.parametrize(("batch_size", "batch_tokens", "requests"), [(8, 10_000, 4), (100, 450, 8), (100, 10_000, 1)])
def test_embedding_batches_hold_at_most_their_texts_and_tokens(tmp_path, batch_size, batch_tokens, requests):
    texts = [f"text {i} " + "word " * 96 for i in range(30)]  # 100 tokens each
    assert {count_tokens(t) for t in texts} == {100}
    with FakeOpenAIServer(embedding_dimensions=8) as server:
        (vectors, failed), _ = run(
            settings(server, tmp_path), lambda c: embed_with_model(c, texts, batch_size, batch_tokens)
        )
        assert server.count("embed") == requests
        run(settings(server, tmp_path), lambda c: embed_with_model(c, texts, batch_size, batch_tokens))
        assert server.count("embed") == requests  # the second run is answered from the cache
    assert failed == 0 and all(len(v) == 8 for v in vectors)


def test_where_the_endpoint_announces_room_concurrency_goes_straight_to_it():
    """The first full round goes to what the limits sustain, which also sets the ceiling; a 429 ends that, and
    growth is one per round trip again. Without announced limits nothing changes."""
    sized = AdaptiveConcurrency(start=8, ceiling=None)
    replies = 0
    while sized.limit < 400 and replies < 1000:
        sized.in_flight = int(sized.limit)
        sized.succeeded(seconds=0.5, completion_tokens=100, room=500.0)
        replies += 1
    assert sized.ceiling == 1000 and sized.limit == 500 and replies == 1  # not 400 round trips of adding one
    sized.rate_limited()
    halved = sized.limit
    for _ in range(50):
        sized.in_flight = int(sized.limit)
        sized.succeeded(seconds=0.5, completion_tokens=100, room=500.0)
    assert halved < sized.limit < halved + 1  # additive again: about one per round of `limit` replies
    unannounced = AdaptiveConcurrency(start=8, ceiling=None)
    for _ in range(200):
        unannounced.in_flight = int(unannounced.limit)
        unannounced.succeeded(seconds=0.5, completion_tokens=100)
    assert unannounced.ceiling == 64 and unannounced.limit < 30


@pytest.mark.slow
def test_a_high_announced_limit_is_used_beyond_64_requests_in_flight_without_a_429(tmp_path):
    prompts = [summary_request(f"H{i}", f"h{i}") for i in range(800)]
    with FakeOpenAIServer(latency_seconds=0.5, requests_per_minute=100_000, tokens_per_minute=50_000_000) as server:
        answers, usage = run(settings(server, tmp_path), lambda c: asyncio.gather(*(c.complete(m) for m in prompts)))
        peak = server.max_in_flight
    assert all(answers) and usage.rate_limited == 0
    assert peak > 64 and usage.peak_concurrency > 64


def test_a_large_token_budget_counts_exactly_what_was_spent(tmp_path):
    """Counted in blocks, 300-token replies once made a 2M-token budget spend a quarter less than it allowed."""
    tokens = Budget("test|exact", 2_000_000, 60, ledger(str(tmp_path / "limits.sqlite")))
    for _ in range(1000):
        tokens.count(300)
    for _ in range(999):
        asyncio.run(tokens.spend(1_250))
    assert tokens.spent() == 300_000 + 999 * 1_250
    tokens.catch_up(1_000_000)  # the endpoint says it counted less than we did: nothing to add
    tokens.catch_up(1_600_000)
    assert tokens.spent() == 1_600_000
    tokens.count(500_000)  # what does not fit is dropped
    assert tokens.spent() == 2_000_000


def _spend_in_another_process(path: str, units: int) -> None:
    Budget("test|shared", 100, 60, ledger(path)).count(units)


def test_processes_on_one_machine_spend_one_budget(tmp_path):
    """A run launched from the UI runs each step in a process of its own: what one step spent of an endpoint's
    limit must hold back the other, or the two together exceed it (and each counts the other's spending late)."""
    path = str(tmp_path / "limits.sqlite")
    process = multiprocessing.get_context("spawn").Process(target=_spend_in_another_process, args=(path, 80))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    here = Budget("test|shared", 100, 60, ledger(path))
    assert here.spent() == 80
    assert asyncio.run(asyncio.wait_for(here.spend(20), 5)) is False  # fits: counted at once
    with pytest.raises(TimeoutError):  # the window is full until the other process's units leave it
        asyncio.run(asyncio.wait_for(here.spend(1), 2))
    alone = Budget("test|shared", 100, 60, ledger(None))  # a budget of this process alone knows nothing of them
    assert alone.spent() == 0
