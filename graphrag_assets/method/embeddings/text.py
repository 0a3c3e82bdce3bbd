"""Text embeddings (entity descriptions, text units, community reports) and document embeddings.

With an embedding model: batched requests through the model client. Offline: TF-IDF with
truncated SVD fitted on the corpus's own texts, L2-normalised, so cosine similarity works the
same way in both cases. The fitted offline model is kept, as plain arrays and a vocabulary
(nothing in it can run code when it is loaded), so questions can be embedded later.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..defaults import EMBEDDING_SEED
from ..ingest.tokens import count_tokens
from ..schema import frame, vector_matrix


def embedding_inputs(entities: pl.DataFrame, text_units: pl.DataFrame, reports: pl.DataFrame) -> pl.DataFrame:
    """What gets embedded: "title: description" for entities, text units, report full content."""
    ok = reports.filter(pl.col("status") == "ok") if "status" in reports.columns else reports
    return pl.concat(
        [
            entities.select(
                "id",
                kind=pl.lit("entity"),
                text=pl.col("title") + ": " + pl.col("description").fill_null(""),
            ),
            text_units.select("id", kind=pl.lit("text_unit"), text="text"),
            ok.select("id", kind=pl.lit("community_report"), text="full_content"),
        ]
    )


# Words of one letter or more: a tiny corpus may have few words of the default two.
_TOKEN_PATTERN = r"(?u)\b\w+\b"
_TOKENS = re.compile(_TOKEN_PATTERN)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a row of zeros stays zeros), as scikit-learn's normalize does."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


MIN_SVD_DIMENSIONS = 2
MAX_TERMS = 200_000
# The fit reads at most this much text, spread over the corpus: counting every word of 200 MB of text in
# scikit-learn holds a Python int per (text, term) pair, gigabytes, while the most frequent terms' weights and the
# SVD's directions settle long before. A corpus under it is fitted whole, exactly as before.
FIT_CHARACTERS = 24 * 2**20
# Texts embedded at a time: each one's term counts are Python objects until its batch is a sparse matrix.
EMBED_BATCH = 4096
# Where the fitted model is stored (method/schema.py): the model's row, and a row per term.
EMBEDDING_MODEL_TABLES = ("embedding_models", "embedding_model_terms")


@dataclass(frozen=True)
class LocalEmbedder:
    """TF-IDF (sublinear tf, smoothed idf, L2) and truncated SVD fitted on one corpus, as plain arrays.

    `components` is None when the corpus is too small to reduce: the vectors are then the TF-IDF
    vectors themselves, one dimension per term.
    """

    vocabulary: tuple[str, ...]
    idf: np.ndarray  # (terms,)
    components: np.ndarray | None  # (dimensions, terms)
    stop_words: bool

    @property
    def dimensions(self) -> int:
        return len(self.vocabulary) if self.components is None else int(self.components.shape[0])

    @classmethod
    def fit(
        cls, texts: Sequence[str], dimensions: int = 128, seed: int = EMBEDDING_SEED, max_terms: int | None = MAX_TERMS
    ) -> LocalEmbedder:
        """Fit on the corpus. Fewer dimensions than asked when the corpus has too few texts or terms for them.

        The vocabulary keeps the `max_terms` most frequent terms: a real corpus's vocabulary grows without end
        (half a million distinct words in 50 MB of text), and the SVD's memory and the stored model grow with it,
        while a term seen a handful of times moves no vector of 128 dimensions. A corpus of more than
        FIT_CHARACTERS is fitted on an even spread of its texts (`fit_sample`), in single precision: the SVD's
        double-precision work took 1.1 GB for 24 MB of text, and the vectors are stored as float32 anyway. `texts`
        may be a polars Series: only the sample becomes Python strings."""
        from sklearn.decomposition import TruncatedSVD  # scikit-learn and SciPy cost ~75 MB: only steps that embed
        from sklearn.feature_extraction.text import TfidfVectorizer

        features, sample = None, fit_sample(texts)
        precision = np.float32 if len(sample) < len(texts) else np.float64
        for stop_words in (True, False):  # a corpus of nothing but stop words keeps them
            vectorizer = TfidfVectorizer(
                sublinear_tf=True,
                stop_words="english" if stop_words else None,
                token_pattern=_TOKEN_PATTERN,
                max_features=max_terms,
                dtype=precision,
            )
            try:
                features = vectorizer.fit_transform(sample)
                break
            except ValueError:  # empty vocabulary
                continue
        if features is None:
            raise ValueError(f"the offline embedding found no words in {len(texts)} texts")
        vocabulary = tuple(sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.get))
        reducible = min(dimensions, features.shape[1] - 1, features.shape[0])
        components = None
        if reducible >= MIN_SVD_DIMENSIONS and features.shape[1] > dimensions:
            svd = TruncatedSVD(n_components=reducible, random_state=seed).fit(features)
            components = svd.components_.astype(np.float32)
        return cls(vocabulary, vectorizer.idf_.astype(np.float64), components, stop_words)

    @functools.cached_property
    def _columns(self) -> dict[str, int]:
        return {term: column for column, term in enumerate(self.vocabulary)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of the texts, EMBED_BATCH at a time into one float32 array: the memory of the counting is one
        batch's, whatever the corpus."""
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), EMBED_BATCH):
            vectors[start : start + EMBED_BATCH] = self._embed_batch(texts[start : start + EMBED_BATCH])
        return vectors

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Vectors of new texts in the fitted space, as scikit-learn's vectorizer would count them: lowercased
        words of the token pattern, those of the vocabulary (which holds no stop words when they were left out, and
        only single words, so dropping stop words first would change nothing). Without scikit-learn: importing it
        costs a question a second and more."""
        from scipy.sparse import csr_matrix, diags

        columns, rows, counts = self._columns, [], []
        for text in texts:
            found = Counter(c for c in map(columns.get, _TOKENS.findall(text.lower())) if c is not None)
            rows.append(sorted(found.items()))
        indptr = np.cumsum([0, *(len(row) for row in rows)])
        indices = np.fromiter((c for row in rows for c, _ in row), dtype=np.int64, count=int(indptr[-1]))
        counts = np.fromiter((n for row in rows for _, n in row), dtype=np.float64, count=int(indptr[-1]))
        tfidf = csr_matrix(((1.0 + np.log(counts)) * self.idf[indices], indices, indptr), (len(texts), len(columns)))
        lengths = np.sqrt(np.asarray(tfidf.multiply(tfidf).sum(axis=1)).ravel())
        tfidf = diags(1.0 / np.where(lengths == 0, 1.0, lengths)) @ tfidf
        vectors = tfidf @ self.components.T if self.components is not None else tfidf.toarray()
        return _unit_rows(np.asarray(vectors)).astype(np.float32)

    def to_tables(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The model as rows of embedding_models (one) and embedding_model_terms (one per term); the arrays go
        over whole, not a float at a time."""
        model = frame(
            "embedding_models",
            [{"id": "offline", "dimensions": self.dimensions, "stop_words": self.stop_words, "terms": len(self.idf)}],
        )
        terms = pl.DataFrame(
            {
                "id": pl.Series(self.vocabulary, dtype=pl.String),
                "position": pl.Series(np.arange(len(self.vocabulary)), dtype=pl.Int32),
                "idf": pl.Series(self.idf, dtype=pl.Float64),
                "components": (
                    pl.Series(np.ascontiguousarray(self.components.T)).cast(pl.List(pl.Float32))
                    if self.components is not None
                    else pl.Series([None] * len(self.vocabulary), dtype=pl.List(pl.Float32))
                ),
            }
        )
        return model, terms

    @classmethod
    def from_tables(cls, model: pl.DataFrame, terms: pl.DataFrame) -> LocalEmbedder:
        """The model from its stored rows (from_tables(*to_tables()) is the same model)."""
        if "terms" not in model.columns or not len(model) or model["terms"][0] is None:
            raise ValueError(
                "the stored offline embedding model is from an older version: materialize text_embeddings again"
            )
        if len(terms) != model["terms"][0]:
            raise ValueError(
                f"the stored offline embedding model has {len(terms)} of its {model['terms'][0]} terms: "
                "materialize text_embeddings again"
            )
        terms = terms.sort("position")
        components = None
        if len(terms) and terms["components"][0] is not None:
            components = np.ascontiguousarray(vector_matrix(terms["components"]).T)
        return cls(
            tuple(terms["id"].to_list()),
            terms["idf"].to_numpy().astype(np.float64),
            components,
            bool(model["stop_words"][0]),
        )


def fit_sample(texts: Sequence[str], characters: int | None = None) -> list[str]:
    """The texts themselves when they hold at most `characters` (FIT_CHARACTERS by default); otherwise every k-th
    text, k chosen so the sample holds about that much, so that every part of the corpus (and every kind of text) is
    in it. `texts` may be a polars Series."""
    series = isinstance(texts, pl.Series)
    total, characters = texts.str.len_chars().sum() if series else sum(map(len, texts)), characters or FIT_CHARACTERS
    sample = texts if total <= characters else texts[:: math.ceil(total / characters)]
    return sample.to_list() if series else sample


async def embed_with_model(
    client, texts: list[str], batch_size: int = 256, batch_tokens: int = 50_000
) -> tuple[list[list[float] | None], int]:
    """Embeddings of the texts not in the cache, in batches sent concurrently; (vectors, texts that failed).

    A batch holds at most `batch_size` texts and `batch_tokens` tokens (a text longer than that goes
    alone): few requests, each well inside what providers accept. A batch that fails leaves None in its
    texts' rows.
    """
    vectors = client.cached_embeddings(texts)
    batches: list[list[int]] = []
    tokens = 0
    for i, vector in enumerate(vectors):
        if vector is not None:
            continue
        n = count_tokens(texts[i])
        if not batches or tokens + n > batch_tokens or len(batches[-1]) >= batch_size:
            batches.append([])
            tokens = 0
        batches[-1].append(i)
        tokens += n
    results = await asyncio.gather(*(client.embed([texts[i] for i in batch]) for batch in batches))
    for batch, result in zip(batches, results):
        for i, vector in zip(batch, result or [None] * len(batch)):
            vectors[i] = vector
    return vectors, sum(vector is None for vector in vectors)


def document_embeddings(text_units: pl.DataFrame, unit_embeddings: pl.DataFrame) -> pl.DataFrame:
    """Each document's embedding: the mean of its chunks' embeddings weighted by their token counts."""
    present = text_units.select("id", "document_id", "n_tokens").join(
        unit_embeddings.select("id", "embedding"), on="id", how="inner", maintain_order="left"
    )
    rows = []
    for (document_id,), units in present.sort("document_id", maintain_order=True).group_by(
        "document_id", maintain_order=True
    ):
        matrix = vector_matrix(units["embedding"]).astype(np.float64)
        weights = units["n_tokens"].to_numpy().astype(np.float64)
        mean = (matrix * weights[:, None]).sum(axis=0) / weights.sum()
        rows.append({"id": document_id, "n_tokens": int(weights.sum()), "embedding": mean.astype(np.float32)})
    return frame("document_embeddings", rows)
