"""A one-node LangGraph graph on the bench mock: loaded by the LangGraph server in the peer's own
venv (`langgraph.json` names `graph` here), never imported by Agent OS.

The node sends the thread's whole message history to the mock through ChatOpenAI, streamed, and
adds the answer to the thread (what an Agent OS session does). The mock's URL comes from the
environment the bench starts the server with (`AGENTOS_BENCH_MOCK_URL`).
"""

import os

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import SecretStr

MODEL = ChatOpenAI(
    model="mock-1",
    base_url=os.environ["AGENTOS_BENCH_MOCK_URL"],
    api_key=SecretStr("bench"),  # the mock takes any key
    streaming=True,
    max_retries=0,  # a failed call is the turn's failure, as on the other targets
)


async def answer(state: MessagesState) -> dict[str, list[object]]:
    return {"messages": [await MODEL.ainvoke(state["messages"])]}


graph = StateGraph(MessagesState).add_node("answer", answer).add_edge(START, "answer").compile()
