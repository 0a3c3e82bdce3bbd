"""A chat front-end over `graphrag-assets serve`, in Chainlit, through the official openai client.

    pip install chainlit openai
    GRAPHRAG_SERVER=http://127.0.0.1:8000 chainlit run deploy/chainlit/app.py

Each `<corpus>:<method>` the server lists is a chat profile to pick; the conversation goes with every question, so a
follow-up continues it; the answer streams, and its passages and reports open beside it, read from the reply's
`graphrag` field. GRAPHRAG_SERVER_KEY is the key to send on a shared server.
"""

from __future__ import annotations

import os

import chainlit as cl
from openai import AsyncOpenAI

SERVER = os.environ.get("GRAPHRAG_SERVER", "http://127.0.0.1:8000").rstrip("/")
client = AsyncOpenAI(base_url=f"{SERVER}/v1", api_key=os.environ.get("GRAPHRAG_SERVER_KEY", "unused"))


@cl.set_chat_profiles
async def models(user=None, language=None) -> list[cl.ChatProfile]:
    listed = [model.id async for model in client.models.list()]
    return [
        cl.ChatProfile(
            name=model, markdown_description=f"Ask `{model.split(':')[0]}` with {model.split(':')[1]} search"
        )
        for model in listed
    ]


@cl.on_chat_start
async def start() -> None:
    cl.user_session.set("turns", [])


@cl.on_message
async def answer(message: cl.Message) -> None:
    turns = cl.user_session.get("turns")
    turns.append({"role": "user", "content": message.content})
    reply = cl.Message(content="")
    sources = []
    stream = await client.chat.completions.create(
        model=cl.user_session.get("chat_profile"), messages=turns, stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            await reply.stream_token(chunk.choices[0].delta.content)
        sources = (chunk.model_extra or {}).get("graphrag", {}).get("sources", sources)
    reply.elements = [
        cl.Text(name=_label(source), content=source["text"], display="side")
        for source in sources
        if source["kind"] in ("text_unit", "report")
    ]
    await reply.send()
    turns.append({"role": "assistant", "content": reply.content})


def _label(source: dict) -> str:
    """How the answer cites it: `Sources (3)`, `Reports (1)`."""
    return f"{'Sources' if source['kind'] == 'text_unit' else 'Reports'} ({source['number']})"
