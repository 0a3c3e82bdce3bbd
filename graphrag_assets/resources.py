"""Dagster resources: the corpora folder and the model endpoints."""

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import dagster as dg
import diskcache
import duckdb
from dagster._utils.backoff import backoff
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from .failures import step_failure
from .method.corpus_folder import SAFE_CORPUS_NAME, graphrag_output
from .method.ingest.documents import has_documents
from .method.ingest.object_storage import corpus_names, is_object_storage, mirror
from .models import EndpointError, ModelSettings, Usage
from .models.endpoint import BatchLedger
from .models.interrupts import run_interruptibly
from .models.spending import BudgetReached
from .naming import bare
from .settings import RATE_LIMITS_FILE, SPENDING_FILE, STATE_DIR
from .store.connection import connect, is_local_file
from .store.document_query import DocumentQuery, write_corpora
from .store.tables import stage_name, use_stage

if TYPE_CHECKING:
    from .models import ModelClient

T = TypeVar("T")
PUBLISHED_INDEX = "published_index"  # the index job's last step: see assets/publication.py
PARTITION_TAG = "dagster/partition"
# A run tag: true sends the run's index requests to the Batch API, false one at a time (assets/run_plan.py).
BATCH_API_TAG = "graphrag/batch_api"
# A run's cap in dollars on what its model requests spend together (CLI --budget; a tag in the launchpad)
MAX_COST_TAG = "graphrag/max_cost_usd"


def max_cost_of(tags: dict) -> float | None:
    """The run's budget, from its tag; a tag that is no positive number is refused in one line."""
    value = tags.get(MAX_COST_TAG)
    if value is None or not str(value).strip():
        return None
    try:
        budget = float(value)
    except ValueError:
        budget = -1.0
    if not budget > 0:
        raise dg.Failure(f"the run's {MAX_COST_TAG} tag is {value!r}: it must be a number of dollars above 0")
    return budget


class CorporaResource(dg.ConfigurableResource):
    """Each folder under `root` is one corpus and one partition; or, with `root` in object storage
    (`s3://bucket/corpora/`, `gs://...`, `az://...`), each prefix under it, mirrored to `mirror_dir` when read."""

    root: str = Field("data", description="A folder, or an object-storage prefix (s3://, gs://, az://).")
    mirror_dir: str = Field(
        f"{STATE_DIR}/mirrors",
        description="Where corpora in object storage are mirrored, fetching only the objects whose ETag changed.",
    )
    conversion_cache_dir: str | None = Field(
        f"{STATE_DIR}/conversions",
        description="Where PDF and Office files are kept once converted to text, by content (None: convert each run).",
    )
    run_budget_usd: float | None = Field(
        None,
        gt=0,
        description="Dollars each automatic run (new corpus, nightly re-index, changed prompts or aliases) may spend "
        "on a paid model; unset, GRAPHRAG_RUN_BUDGET_USD. Without either, a paid model gets no automatic run.",
    )

    @contextmanager
    def conversion_cache(self):
        """The converted-file cache (a mapping), or None when it is turned off."""
        if not self.conversion_cache_dir:
            yield None
            return
        with diskcache.Cache(self.conversion_cache_dir) as cache:
            yield cache

    @staticmethod
    def _check_name(corpus: str) -> None:
        if not SAFE_CORPUS_NAME.fullmatch(corpus):
            raise ValueError(
                f"corpus name {corpus!r} is not a safe identifier: use lowercase letters, digits, '-' and '_' "
                "(at most 64, starting with a letter or digit)"
            )

    def folder(self, corpus: str) -> Path:
        """The corpus's folder: under a local root, itself; under an object-storage root, its mirror, brought up
        to date."""
        self._check_name(corpus)
        if is_object_storage(self.root):
            return self._mirrored(corpus)
        root = Path(self.root).resolve()
        folder = (Path(self.root) / corpus).resolve()
        if root not in folder.parents:
            raise ValueError(f"corpus folder {Path(self.root) / corpus} resolves to {folder}, outside {root}")
        if not folder.is_dir():
            raise FileNotFoundError(f"corpus folder {Path(self.root) / corpus} does not exist")
        return folder

    def _mirrored(self, corpus: str) -> Path:
        # One mirror folder per root, so two roots with a corpus of the same name never share files.
        folder = Path(self.mirror_dir) / hashlib.sha256(self.root.encode()).hexdigest()[:16] / corpus
        if not mirror(self.root, corpus, folder).listed:
            raise FileNotFoundError(f"corpus prefix {self.root.rstrip('/')}/{corpus}/ holds no objects")
        return folder

    def graphrag_output(self, corpus: str) -> Path | None:
        """Where the corpus holds a Microsoft GraphRAG output to import, or None for a folder of documents."""
        return graphrag_output(self.folder(corpus))

    def scan(self) -> tuple[list[str], dict[str, str]]:
        """(corpus names, {refused folder: why}) for the folders under the root; a folder with nothing to index
        yet is left out, with the reason."""
        names, refused = [], {}
        for name in self._entries():
            try:
                folder = self.folder(name)
            except (ValueError, FileNotFoundError) as problem:
                refused[name] = str(problem)
                continue
            if has_documents(folder):
                names.append(name)
            else:
                refused[name] = "it holds no documents yet: it is indexed once files are added to it"
        return names, refused

    def _entries(self) -> list[str]:
        """The names under the root that may be corpora: folders, or prefixes in object storage."""
        if is_object_storage(self.root):
            return corpus_names(self.root)
        root = Path(self.root)
        entries = sorted(root.iterdir()) if root.is_dir() else []
        return [entry.name for entry in entries if entry.is_dir() and not entry.name.startswith(".")]

    def names(self) -> list[str]:
        return self.scan()[0]


class QueryCorporaResource(CorporaResource):
    """The corpora a SQL query returns: all its rows as one corpus, or a corpus per value of `corpus_column`. Each
    is written as a parquet file in `mirror_dir` (rewritten only when its rows change) and indexed from there."""

    root: str = Field("sql", description="What messages call the source (a query has no folder).")
    query: str = Field(description="The SQL that returns the documents, one row each.")
    query_database: str | None = Field(None, description="A DuckDB file to run it in (None: an in-memory DuckDB).")
    postgres: str | None = Field(
        None, description="A PostgreSQL connection string, attached as pg (the query reads pg.<schema>.<table>)."
    )
    text_column: str = "text"
    title_column: str | None = "title"
    id_column: str | None = None
    metadata_columns: list[str] = []
    corpus_column: str | None = None
    corpus: str = Field("documents", description="The corpus all rows index as, without a corpus_column.")

    _written: dict[str, Path] | None = PrivateAttr(default=None)
    _returned: list[str] = PrivateAttr(default_factory=list)

    def document_query(self) -> DocumentQuery:
        return DocumentQuery(
            sql=self.query,
            database=self.query_database,
            postgres=self.postgres,
            text_column=self.text_column,
            title_column=self.title_column,
            id_column=self.id_column,
            metadata_columns=tuple(self.metadata_columns),
            corpus_column=self.corpus_column,
            corpus=self.corpus,
        )

    def _corpora(self) -> dict[str, Path]:
        """The corpora's folders, queried once per process (a step reads its corpus's folder more than once)."""
        if self._written is None:
            source = f"{self.query_database}\0{self.query}".encode()
            folder = Path(self.mirror_dir) / "queries" / hashlib.sha256(source).hexdigest()[:16]
            self._written, self._returned = write_corpora(self.document_query(), folder)
        return self._written

    def folder(self, corpus: str) -> Path:
        self._check_name(corpus)
        found = self._corpora().get(corpus)
        if found is None:
            raise FileNotFoundError(f"the documents' query returns no rows for corpus {corpus!r}")
        return found

    def _entries(self) -> list[str]:
        self._corpora()
        return self._returned  # with the names no folder may take, for scan() to refuse by name


class DuckDBStoreResource(DuckDBResource):
    """dagster-duckdb's resource, able to open a DuckLake catalog too (see store/connection.py).

    The database file's folder is made when a run starts, not when code is imported.
    """

    ducklake_data_path: str | None = Field(
        None, description="Where a DuckLake store (database 'ducklake:...') keeps its data files."
    )
    vector_index_dir: str = Field(
        f"{STATE_DIR}/vector-index",
        description="Where HNSW indexes of large corpora are kept (derived files, rebuilt when missing or stale).",
    )

    memory_limit: str = Field(
        "256MiB",
        description="What DuckDB may keep in memory in an index run: past it, it evicts and writes to a temporary "
        "folder beside the store rather than growing the step's process (publishing an index copies every table in "
        "one transaction). A target, never a reason to fail: one allocation larger than it raises it for that "
        "connection. A `memory_limit` in connection_config wins.",
    )

    _stage: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if is_local_file(self.database):
            Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        run = context.dagster_run
        if run is not None and context.instance is not None and run.execution_plan_snapshot_id:
            plan = context.instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
            # A run that will publish the index stages every table it writes until then (store/tables.py).
            if any(bare(step.key) == PUBLISHED_INDEX for step in plan.steps):
                self._stage = stage_name(run.tags[PARTITION_TAG], run.root_run_id or run.run_id)

    @property
    def stage(self) -> str | None:
        """The schema this run stages the index in, or None when it writes the published tables directly."""
        return self._stage

    @contextmanager
    def get_connection(self):
        # As dagster-duckdb does: a file another process holds is retried for a while before failing.
        conn = backoff(
            fn=connect,
            retry_on=(duckdb.IOException,),
            args=(self.database,),
            kwargs={
                "data_path": self.ducklake_data_path,
                "config": {
                    **({"memory_limit": self.memory_limit} if self.memory_limit else {}),
                    **self.connection_config,
                },
            },
            max_retries=10,
        )
        try:
            if self._stage:
                use_stage(conn, self._stage)
            yield conn
        finally:
            conn.close()


# Told, when a step's model work fails, what each endpoint's client spent before it did (a run's totals count it).
SpentOnFailure = Callable[["ModelEndpointResource", Usage], None]


class ModelEndpointResource(dg.ConfigurableResource):
    """Any OpenAI-compatible endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's server)."""

    # Defaults are ModelSettings' own, so each is written once.
    base_url: str | None = None
    api_key: str | None = None
    api_version: str | None = None
    model: str
    max_concurrency: int | None = Field(
        ModelSettings.max_concurrency,
        description="Most requests in flight; they start at 8 and rise while the endpoint keeps up. Unset: twice "
        "what the endpoint's announced rate limits sustain at its latency (64 when it announces none).",
    )
    adaptive_concurrency: bool = Field(
        ModelSettings.adaptive_concurrency,
        description="Adapt requests in flight to 429s and latency; false keeps the ceiling in flight.",
    )
    requests_per_minute: int | None = Field(
        ModelSettings.requests_per_minute,
        description="A budget of our own; unset, requests pace to the endpoint's x-ratelimit headers and 429s.",
    )
    tokens_per_minute: int | None = Field(
        ModelSettings.tokens_per_minute,
        description="A budget of our own; unset, tokens pace to the endpoint's x-ratelimit headers and 429s.",
    )
    max_retries: int = ModelSettings.max_retries
    invalid_reply_retries: int = Field(
        ModelSettings.invalid_reply_retries, description="Re-asks after a reply that is cut off, refused or malformed."
    )
    circuit_breaker_failures: int = Field(
        ModelSettings.circuit_breaker_failures,
        description="Consecutive connection failures or timeouts after which a step stops calling the endpoint.",
    )
    timeout_seconds: float = ModelSettings.timeout_seconds
    step_deadline_seconds: float | None = Field(
        None, description="Fail a step whose model calls take longer than this; replies so far stay cached."
    )
    cache_dir: str | None = ModelSettings.cache_dir
    rate_limits_file: str | None = Field(
        RATE_LIMITS_FILE,
        description="Where the processes on this machine (a run's steps, concurrent runs) count what they spent of "
        "each endpoint's limits, so that together they stay within them (None: each process counts its own).",
    )
    prompt_price_per_million: float | None = Field(
        ModelSettings.prompt_price_per_million,
        ge=0,
        description="USD per million prompt tokens. Unset: GRAPHRAG_PRICES, else the model's listed price "
        "(genai-prices), else unknown. 0 marks the model free.",
    )
    completion_price_per_million: float | None = Field(
        ModelSettings.completion_price_per_million,
        ge=0,
        description="USD per million completion tokens; unset as for the prompt price.",
    )
    batch_api: bool = Field(
        False,
        description="Index through the Batch API: half the price, answered within 24 h (a run's graphrag/batch_api "
        "tag overrides it). Queries never use it.",
    )
    batch_min_requests: int = Field(
        ModelSettings.batch_min_requests,
        description="A round of fewer chat requests than this (a last level of reports, retries) goes one at a time.",
    )
    batch_poll_seconds: float = Field(
        ModelSettings.batch_poll_seconds, description="First wait between checks of a batch; doubles up to a minute."
    )
    batch_price_factor: float = Field(
        ModelSettings.batch_price_factor,
        description="Batch price as a fraction of a price set here (listed prices carry their own batch rates).",
    )

    _max_cost_usd: float | None = PrivateAttr(default=None)
    _budget_key: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.dagster_run
        if run is not None:
            self._max_cost_usd = max_cost_of(run.tags)
            # A run and its retries share one budget: a retry goes on from what the run spent.
            self._budget_key = run.root_run_id or run.run_id

    @property
    def configured(self) -> bool:
        """With neither a base URL nor a key there is no endpoint, and the offline engine runs."""
        return bool(self.base_url or self.api_key)

    @property
    def engine(self) -> str:
        return f"llm:{self.model}" if self.configured else "offline"

    def settings(self, **overrides: object) -> ModelSettings:
        fields = {name: getattr(self, name) for name in ModelSettings.__dataclass_fields__ if hasattr(self, name)}
        budget = dict(max_cost_usd=self._max_cost_usd, budget_key=self._budget_key, spending_file=SPENDING_FILE)
        return ModelSettings(**{**fields, **budget, **overrides})

    def run(
        self,
        work: Callable[["ModelClient | None"], Awaitable[T]],
        batch_ledger: BatchLedger | None = None,
        on_failure: SpentOnFailure | None = None,
    ) -> tuple[T, Usage | None]:
        """Run async work with a fresh client in its own event loop; returns its result and the usage.

        With no endpoint configured, `work` gets None (the offline engine) and the usage is None. With
        `batch_ledger` (index steps that run in batch mode), requests go to the Batch API. `on_failure` is told
        what the client spent when the work fails.
        """
        result, (usage,) = run_with_models([self], work, batch_ledger, on_failure)
        return result, usage


def run_with_models(
    endpoints: list[ModelEndpointResource],
    work: Callable[..., Awaitable[T]],
    batch_ledger: BatchLedger | None = None,
    on_failure: SpentOnFailure | None = None,
) -> tuple[T, list[Usage | None]]:
    """Run `work(client, ...)` with one client per endpoint (None where none is configured) in one event loop.

    An endpoint that cannot serve the step, or a step past its deadline, fails the step with a message
    that names the endpoint and the problem.
    """
    deadlines = [e.step_deadline_seconds for e in endpoints if e.configured and e.step_deadline_seconds]
    deadline = min(deadlines) if deadlines else None

    from .models import ModelClient  # here: the openai package loads only when a step calls a model

    made: list[ModelClient] = []
    owners: list[ModelEndpointResource] = []

    async def main() -> tuple[T, list[Usage | None]]:
        clients = [ModelClient(e.settings(), batch_ledger=batch_ledger) if e.configured else None for e in endpoints]
        made.extend(c for c in clients if c is not None)
        owners.extend(e for e, c in zip(endpoints, clients) if c is not None)
        try:
            return await asyncio.wait_for(work(*clients), deadline), [c.usage if c else None for c in clients]
        finally:
            for client in clients:
                if client is not None:
                    await client.close()

    try:
        try:
            return run_interruptibly(main())
        except BaseException:
            for endpoint, client in zip(owners, made) if on_failure else ():
                on_failure(endpoint, client.usage)
            raise
    except BudgetReached as reached:  # says itself what was kept and how to go on
        progress = next((c.progress for c in made if c.progress is not None), None)
        how_far = f"{progress.what}: {progress.done} of {progress.total}" if progress else ""
        raise step_failure(reached.saying(how_far), retryable=False) from None
    except EndpointError as error:
        raise step_failure(
            f"{error}. Replies received so far are cached; a re-run continues from them.", retryable=error.retryable
        ) from None
    except TimeoutError:
        raise step_failure(
            f"the step's model calls passed step_deadline_seconds ({deadline:g} s); replies received "
            "so far are cached, so a re-run continues from them"
            + ("; submitted batches are recorded, and a re-run waits for them again" if batch_ledger else ""),
            retryable=True,
        ) from None


class ChatModelResource(ModelEndpointResource):
    model: str = "gpt-4o-mini"
    temperature: float = ModelSettings.temperature
    max_tokens: int = ModelSettings.max_tokens


class EmbeddingModelResource(ModelEndpointResource):
    model: str = "text-embedding-3-small"
    batch_size: int = Field(256, description="Texts per embedding request at most (OpenAI accepts up to 2048).")
    batch_tokens: int = Field(
        50_000, description="Tokens per embedding request at most (OpenAI accepts up to 300,000 in one request)."
    )
