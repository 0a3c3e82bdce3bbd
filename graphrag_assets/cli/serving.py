"""graphrag-assets serve, mcp and key: answering over HTTP and MCP, and the keys that may ask."""

from .common import dagster_instance


def serve(
    host: str,
    port: int,
    keys: str | None,
    cors: list[str],
    poll_seconds: float,
    rate: int,
    question_budget: float | None = None,
) -> int:
    from ..server.app import ServerSettings, load_keys, run

    settings = ServerSettings(
        host=host,
        port=port,
        keys_file=keys,
        cors_origins=cors,
        poll_seconds=poll_seconds,
        rate=rate,
        question_budget=question_budget,
    )
    load_keys(settings)  # refused in one line before anything loads
    return run(settings, instance=dagster_instance())


def mcp_stdio() -> int:
    from ..server.mcp_tools import run_stdio

    run_stdio(instance=dagster_instance())
    return 0


def new_key(name: str, corpora: list[str], per_minute: int | None) -> int:
    from ..server.keys import new_key_entry

    key, entry = new_key_entry(name, corpora or ["*"], per_minute)
    print(f"key for {name} (shown once; give it to them, keep only the entry below):\n\n  {key}\n")
    print(f"add to your keys file (GRAPHRAG_SERVER_KEYS, or serve --keys FILE):\n\n{entry}")
    return 0
