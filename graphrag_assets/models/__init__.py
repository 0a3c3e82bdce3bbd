"""Chat and embedding clients for any OpenAI-compatible endpoint: limits, retries, cache, usage."""

from .client import EndpointError, ModelClient, ModelSettings, Usage, usage_scope

__all__ = ["EndpointError", "ModelClient", "ModelSettings", "Usage", "usage_scope"]
