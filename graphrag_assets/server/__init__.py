"""`graphrag-assets serve` and `graphrag-assets mcp`: the answering path (answers/) over HTTP, the OpenAI chat API,
MCP and a chat page."""
