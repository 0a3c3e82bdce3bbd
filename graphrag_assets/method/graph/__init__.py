"""The entity graph: reply formats, LLM extraction of entities, relationships and claims, summaries."""
