"""Text embeddings (entity descriptions, text units, community reports) and document embeddings.

With an embedding model: batched requests through the model client. Offline: TF-IDF with
truncated SVD fitted on the corpus's own texts, L2-normalised, so cosine similarity works the
same way in both cases. The fitted offline model is kept so questions can be embedded later.
"""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

EMBEDDING_COLUMNS = ["id", "kind", "embedding"]
DEFAULT_SEED = 42


def embedding_inputs(entities: pd.DataFrame, text_units: pd.DataFrame, reports: pd.DataFrame) -> pd.DataFrame:
    """What gets embedded: "title: description" for entities, text units, report full content."""
    ok = reports[reports["status"] == "ok"] if "status" in reports else reports
    return pd.concat([
        pd.DataFrame({"id": entities["id"], "kind": "entity",
                      "text": entities["title"] + ": " + entities["description"].fillna("")}),
        pd.DataFrame({"id": text_units["id"], "kind": "text_unit", "text": text_units["text"]}),
        pd.DataFrame({"id": ok["id"], "kind": "community_report", "text": ok["full_content"]}),
    ], ignore_index=True)


@dataclass
class LocalEmbedder:
    """TF-IDF + truncated SVD, fitted on one corpus."""

    pipeline: object
    dimensions: int

    @classmethod
    def fit(cls, texts: list[str], dimensions: int = 128, seed: int = DEFAULT_SEED) -> "LocalEmbedder":
        vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=1)
        features = vectorizer.fit_transform(texts)
        if min(features.shape) <= dimensions:
            raise ValueError(
                f"the offline embedding needs more than {dimensions} texts and distinct terms, the corpus has "
                f"{features.shape[0]} texts and {features.shape[1]} terms: lower the embedding dimensions")
        svd = TruncatedSVD(n_components=dimensions, random_state=seed)
        pipeline = make_pipeline(vectorizer, svd, Normalizer(copy=False))
        svd.fit(features)
        return cls(pipeline, dimensions)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.pipeline.transform(texts).astype(np.float32)

    def dumps(self) -> bytes:
        return pickle.dumps(self)

    @staticmethod
    def loads(blob: bytes) -> "LocalEmbedder":
        return pickle.loads(blob)


async def embed_with_model(client, texts: list[str], batch_size: int = 16) -> tuple[list[list[float] | None], int]:
    """Embeddings in batches sent concurrently; a batch that fails leaves None rows and is counted."""
    batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    results = await asyncio.gather(*(client.embed(batch) for batch in batches))
    vectors: list[list[float] | None] = []
    failed = 0
    for batch, result in zip(batches, results):
        if result is None:
            failed += 1
            vectors.extend([None] * len(batch))
        else:
            vectors.extend(result)
    return vectors, failed


def document_embeddings(text_units: pd.DataFrame, unit_embeddings: pd.DataFrame) -> pd.DataFrame:
    """Each document's embedding: the mean of its chunks' embeddings weighted by their token counts."""
    vectors = unit_embeddings.set_index("id")["embedding"]
    rows = []
    for document_id, units in text_units.groupby("document_id", sort=True):
        present = units[units["id"].isin(vectors.index)]
        if present.empty:
            continue
        matrix = np.stack([np.asarray(vectors[u], dtype=np.float64) for u in present["id"]])
        weights = present["n_tokens"].to_numpy(dtype=np.float64)
        mean = (matrix * weights[:, None]).sum(axis=0) / weights.sum()
        rows.append({"id": document_id, "n_tokens": int(weights.sum()), "embedding": mean.astype(np.float32).tolist()})
    return pd.DataFrame(rows, columns=["id", "n_tokens", "embedding"])
