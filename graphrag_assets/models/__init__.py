"""Chat and embedding clients for any OpenAI-compatible endpoint: limits, retries, cache, usage.

The client is imported when first used (PEP 562): it brings the openai package, which an offline answer and a
quick command do without.
"""

from importlib import import_module

_WHERE = {
    "EndpointError": ".errors",
    "ModelClient": ".client",
    "ModelSettings": ".endpoint",
    "Usage": ".endpoint",
    "usage_scope": ".endpoint",
}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name], __name__), name)
