"""Chat and embedding clients for any OpenAI-compatible endpoint: limits, retries, cache, usage."""

from .client import ModelClient, ModelSettings, Usage

__all__ = ["ModelClient", "ModelSettings", "Usage"]
