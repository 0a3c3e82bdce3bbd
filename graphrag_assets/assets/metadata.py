"""What a person reads of a step: metadata in the UI (tables, images, usage and cost) and lines in the log and
the terminal."""

from __future__ import annotations

import base64
import os
import sys

import dagster as dg
import polars as pl
from tabulate import tabulate

from ..method.progress import PROGRESS_TO_TERMINAL, Progress
from ..models import Usage
from ..resources import (
    EmbeddingModelResource,
    ModelEndpointResource,
)


def markdown(df: pl.DataFrame, floatfmt: str = "g") -> str:
    """A frame as a markdown table (what a person reads in the UI)."""
    return tabulate(df.rows(), headers=df.columns, tablefmt="pipe", floatfmt=floatfmt)


def percent_table(df: pl.DataFrame, index: list[str], on: str, values: str, decimals: int = 0) -> str:
    """The mean of `values` per `index` (rows) and `on` (columns), as a rounded percentage: a markdown table."""
    table = (
        df.group_by(*index, on)
        .agg(pl.col(values).mean())
        .pivot(on=on, index=index, values=values, sort_columns=True)
        .sort(index)
    )
    return markdown(table.with_columns((pl.exclude(index) * 100).round(decimals)))


def markdown_table(df: pl.DataFrame, columns: list[str], rows: int = 10) -> dg.MetadataValue:
    """The first rows of some columns, long texts cut."""
    preview = df.select(columns).head(rows)
    shortened = preview.with_columns(
        pl.when(pl.col(name).str.len_chars() > 120).then(pl.col(name).str.slice(0, 120) + "…").otherwise(pl.col(name))
        for name, kind in preview.schema.items()
        if kind == pl.String
    )
    return dg.MetadataValue.md(markdown(shortened) if len(preview) else "_(no rows)_")


def top_rows(df: pl.DataFrame, by: list[str], rows: int = 10) -> pl.DataFrame:
    """The rows with the largest values of `by`, ties in the table's order. Not the table sorted: that copied the
    1.3M relationships of 200 MB of text, descriptions and all, for the ten rows a preview shows."""
    first = df.select(pl.arg_sort_by(by, descending=[True] * len(by), maintain_order=True).head(rows))
    return df[first.to_series()]


def png(image: bytes, caption: str) -> dg.MetadataValue:
    """An image shown inline in the asset's metadata."""
    return dg.MetadataValue.md(f"![{caption}](data:image/png;base64,{base64.b64encode(image).decode()})")


def usage_metadata(model: ModelEndpointResource, usage: Usage | None) -> dict:
    """Calls and tokens for the UI. Embedding tokens are named apart: they cost an order of magnitude less."""
    if usage is None:
        return {}
    figures = usage.as_metadata(model.settings())
    tokens = (
        {"embedding_tokens": figures["prompt_tokens"]}
        if isinstance(model, EmbeddingModelResource)
        else {
            "prompt_tokens": figures["prompt_tokens"],
            # Served from the endpoint's prompt cache (OpenAI, Azure, vLLM): gleaning re-sends the first
            # request as the prefix of its own, so only the new part is paid at the full rate.
            "cached_prompt_tokens": figures["cached_prompt_tokens"],
            "completion_tokens": figures["completion_tokens"],
        }
    )
    batch = (
        {
            "batches": figures["batches"],
            "batches_waited_for_again": figures["batches_reattached"],
            "batch_calls": figures["batch_calls"],
            "synchronous_calls": figures["calls"] - figures["batch_calls"],
            "batch_tokens": figures["batch_prompt_tokens"] + figures["batch_completion_tokens"],
            "batch_lines_asked_again": figures["batch_lines_failed"],
            "batch_wait_seconds": round(figures["batch_wait_seconds"], 1),
        }
        if figures["batches"] or figures["batches_reattached"] or figures["batch_calls"] or figures["batch_sent_alone"]
        else {}
    )
    return {
        "model_calls": figures["calls"],
        "cache_hits": figures["cache_hits"],
        **batch,
        **tokens,
        "retries": figures["retries"],
        "rate_limited": figures["rate_limited"],
        "paced_by_rate_limits": figures["paced"],
        "peak_concurrency": figures["peak_concurrency"],
        "invalid_replies": figures["invalid_replies"],
        "reasked": figures["reasked"],
        "failed_calls": figures["failures"],
        "estimated_cost_usd": cost_value(figures["estimated_cost_usd"], model.model),
    }


def cost_value(cost: float | None, model: str) -> dg.MetadataValue:
    """A cost for the UI: a number, or why there is none."""
    if cost is None:
        return dg.MetadataValue.text(f"unknown: no price for model {model!r} (set GRAPHRAG_PRICES, see the README)")
    return dg.MetadataValue.float(float(cost))


def tell(context: dg.AssetExecutionContext, line: str, warning: bool = False) -> None:
    """A line for the run's event log and, under the CLI, for the terminal too."""
    (context.log.warning if warning else context.log.info)(line)
    if os.environ.get(PROGRESS_TO_TERMINAL):
        print(f"  [{context.partition_key}] {'warning: ' if warning else ''}{line}", file=sys.stderr, flush=True)


def step_progress(context: dg.AssetExecutionContext, what: str, total: int, client=None) -> Progress:
    """How far the step is, in the run's event log (the run page shows it) at most every 10 s and at the end."""
    progress = Progress(
        what, total, lambda line: tell(context, line), usage=client.usage if client is not None else None
    )
    if client is not None:
        client.progress = progress  # so a budget that stops the step can say how far it got
    return progress
