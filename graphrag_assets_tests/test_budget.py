"""A budget in dollars that a run's requests never pass, with requests in flight and clients side by side."""

import asyncio
import re

import duckdb
import pytest

from graphrag_assets.models.client import ModelClient
from graphrag_assets.models.spending import BudgetReached
from graphrag_assets_tests.model_server import FakeOpenAIServer

from .test_model_client import PROMPTS, settings

# A token costs a tenth of a cent: a request of the test server's costs about $0.1-0.3, so a budget of a few
# dollars ends after some requests of many, with eight in flight.
PRICES = {"prompt_price_per_million": 1000.0, "completion_price_per_million": 1000.0, "max_tokens": 100}


def billed(server: FakeOpenAIServer) -> float:
    """What the endpoint served, at those prices: what a provider would bill."""
    served = server.tokens()
    return (served["prompt"] + served["completion"]) * 1000.0 / 1e6


def answer_all(*clients_settings):
    """Every prompt asked of each client at once, in one event loop; the clients' usages, and the first error."""

    async def main():
        clients = [ModelClient(s) for s in clients_settings]
        try:
            results = await asyncio.gather(
                *(asyncio.gather(*(c.complete(m) for m in PROMPTS)) for c in clients), return_exceptions=True
            )
            return [c.usage for c in clients], next((r for r in results if isinstance(r, BaseException)), None)
        finally:
            for client in clients:
                await client.close()

    return asyncio.run(main())


def test_two_clients_sharing_a_budget_never_pass_it_and_a_rerun_pays_only_the_rest(tmp_path):
    ledger = str(tmp_path / "spending.sqlite")
    budget = {**PRICES, "max_cost_usd": 2.0, "budget_key": "run-1", "spending_file": ledger, "max_concurrency": 8}
    with FakeOpenAIServer() as server:
        chat = settings(server, tmp_path, **budget)
        other = settings(server, tmp_path, **{**budget, "cache_dir": str(tmp_path / "other-cache")})
        _, error = answer_all(chat, other)
        spent = billed(server)
    assert isinstance(error, BudgetReached), error
    assert str(error).startswith("budget of $2.0000 reached after $") and "--budget" in str(error)
    assert 1.0 < spent <= 2.0  # most of it used, none of it passed

    # Run again with more: the replies paid for come from the cache, and only the rest is asked.
    with FakeOpenAIServer() as server:
        more = settings(server, tmp_path, **{**budget, "max_cost_usd": 50.0, "budget_key": "run-2"})
        (usage,), error = answer_all(more)
    assert error is None and usage.failures == 0
    # Only what the first run did not pay for is asked (besides the probe); what it paid for comes from the cache.
    assert usage.cache_hits > 0 and usage.calls - 1 == len(PROMPTS) - usage.cache_hits


def test_a_budget_cannot_hold_for_a_model_with_no_price(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHRAG_PRICES", raising=False)
    with FakeOpenAIServer() as server:
        unpriced = settings(server, tmp_path, max_cost_usd=1.0, budget_key="run-3")
        with pytest.raises(Exception, match="cannot hold for model 'test-model', whose price is unknown"):
            answer_all(unpriced)
        assert server.count() == 0


@pytest.mark.slow
def test_an_index_stops_at_its_budget_in_one_line_and_a_rerun_pays_only_the_rest(tmp_path):
    from .test_cli import Cli
    from .test_small_corpora import write_corpus

    write_corpus(tmp_path / "data" / "tiny", "three files")
    prices = '{"gpt-4o-mini": [1000, 1000], "text-embedding-3-small": [1000, 0]}'  # a token: a tenth of a cent
    with FakeOpenAIServer() as server:
        cli = Cli(tmp_path, {"GRAPHRAG_API_BASE": server.base_url, "GRAPHRAG_PRICES": prices})
        stopped = cli.run("index", "--corpus", "tiny", "--budget", "3")
        first = billed(server)
        requests = server.count()
    assert stopped.returncode == 1
    failed = [line for line in stopped.stderr.splitlines() if line.startswith("failed:")]
    assert len(failed) == 1 and "budget of $3.0000 reached after $" in failed[0], stopped.stderr
    assert re.search(r"reached after \$[\d.]+, [a-z ]+: \d+ of \d+: the next request", failed[0]), failed[0]
    assert 0 < first <= 3.0
    # The step the budget stopped published nothing, and what it paid still counts: in the run's totals and in
    # the store's model_usage view, as a failed step.
    line = next(line for line in stopped.stdout.splitlines() if line.strip().startswith("spent"))
    assert line.split()[1] == f"{requests:,}", (line, requests)
    with duckdb.connect(str(cli.database), read_only=True) as conn:
        failed_steps = conn.execute("SELECT step, requests FROM model_usage WHERE failed").fetchall()
    assert len(failed_steps) == 1 and failed_steps[0][1] > 0, failed_steps
    with FakeOpenAIServer() as server:
        cli.env["GRAPHRAG_API_BASE"] = server.base_url
        done = cli.run("index", "--corpus", "tiny", "--budget", "100")
        again = server.count()
        assert done.returncode == 0, done.stderr
        # A question has a cap of its own: its first request would pass this one, so none is sent.
        question = ("ask", "--corpus", "tiny", "--method", "local", "Who wrote letters?")
        capped = cli.run(*question, "--budget", "0.0001")
        answered = cli.run(*question, "--budget", "50")
    assert capped.returncode == 1 and "budget of $0.0001 reached after $0.0000" in capped.stderr, capped.stderr
    assert answered.returncode == 0, answered.stderr
    spent = next(line for line in done.stdout.splitlines() if line.strip().startswith("spent"))
    assert "replies from cache" in spent and not spent.split("model requests")[1].startswith(" (")
    # what the first run paid for is not asked again: fewer requests than a run from nothing would send
    with FakeOpenAIServer() as server:
        (tmp_path / "fresh").mkdir()
        fresh = Cli(tmp_path / "fresh", {"GRAPHRAG_API_BASE": server.base_url, "GRAPHRAG_PRICES": prices})
        fresh.env["GRAPHRAG_DATA_DIR"] = str(tmp_path / "data")
        assert fresh.run("index", "--corpus", "tiny").returncode == 0
        whole = server.count()
    assert again < whole and requests > 1


def test_a_request_whose_prompt_fits_but_whose_longest_reply_would_not_is_not_sent(tmp_path):
    """The worst case of a request is its prompt and `max_tokens` of reply: at a tenth of a cent a token, a prompt of
    some 150 tokens fits in $0.50, but with 1,000 tokens of reply it could cost $1.15, so it is not sent."""
    with FakeOpenAIServer() as server:
        capped = settings(server, tmp_path, max_cost_usd=0.5, budget_key="run-4", **{**PRICES, "max_tokens": 1000})
        _, error = answer_all(capped)
        assert isinstance(error, BudgetReached)
        assert server.count() == server.count("probe")  # the endpoint's tiny probe alone, not one prompt
        roomy = settings(server, tmp_path, max_cost_usd=2.0, budget_key="run-5", **{**PRICES, "max_tokens": 1000})
        _, error = answer_all(roomy)
        assert server.count() > server.count("probe")  # with room for the longest reply, it is sent


def _reserve_and_settle(path: str, seed: int, threads: int, rounds: int) -> int:
    """Random reservations and settlements against one budget file from `threads` threads of this process;
    returns the micro-dollars it settled as spent."""
    import random
    import threading

    from graphrag_assets.models.spending import SpendingBudget, micro_dollars

    totals = []

    def work(thread: int) -> None:
        pick, budget, spent = random.Random(seed * 1000 + thread), SpendingBudget("shared", 1e9, path), 0

        async def rounds_of_work() -> None:
            nonlocal spent
            for _ in range(rounds):
                held = [pick.uniform(0, 0.03) * pick.choice((1, 1e-3, 1 / 3, 0.1)) for _ in range(pick.randint(1, 4))]
                for amount in held:
                    await budget.reserve(amount)
                for amount in held:
                    actual = amount * pick.random()
                    budget.settle(amount, actual)
                    spent += micro_dollars(actual)

        asyncio.run(rounds_of_work())
        budget.close()
        totals.append(spent)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(totals)


def test_thousands_of_reservations_from_processes_and_threads_leave_exactly_nothing_reserved(tmp_path):
    """Amounts are whole micro-dollars: however requests interleave, settling takes away exactly what reserving
    held. A float ledger kept 2.8e-18 in reserve after a run, and a stop at the limit then waited for it for ever."""
    import concurrent.futures
    import multiprocessing

    from graphrag_assets.models.spending import SpendingBudget

    path = str(tmp_path / "spending.sqlite")
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(3, mp_context=context) as pool:
        spent = sum(pool.map(_reserve_and_settle, [path] * 3, range(3), [3] * 3, [150] * 3))
    budget = SpendingBudget("shared", 1e9, path)
    assert budget.ledger() == (spent, 0)

    # At its limit, with nothing in flight, a budget refuses the next request at once: it does not wait.
    limited = SpendingBudget("limited", 0.3, path)

    async def spend_to_the_limit():
        for amount in (0.1, 0.2, 0.3 - 0.1 - 0.2 + 1e-12):  # amounts whose float sum is not what it seems
            await limited.reserve(amount)
            limited.settle(amount, amount)
        await asyncio.wait_for(limited.reserve(0.05), timeout=5)

    with pytest.raises(BudgetReached, match=r"budget of \$0.3000 reached after \$0.3000"):
        asyncio.run(spend_to_the_limit())
    assert limited.ledger()[1] == 0
