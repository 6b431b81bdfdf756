"""Agno's AgentOS pointed at the bench mock: run by the peer's own venv, never imported by Agent OS.

    <peers-dir>/agno/bin/python agno_app.py --mock-url http://127.0.0.1:P/v1 --port Q --db agno.db

One agent (`bench`) on the mock as an OpenAI-compatible model, its sessions in SQLite with the
history sent back to the model on every turn (what an Agent OS session does), telemetry off.
"""

import argparse
import os

os.environ.setdefault("AGNO_TELEMETRY", "false")  # before agno is imported: it reads the flag then

import uvicorn
from agno.agent import Agent
from agno.db.sqlite import SqliteDb
from agno.models.openai.like import OpenAILike
from agno.os import AgentOS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mock-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    agent = Agent(
        id="bench",
        name="bench",
        model=OpenAILike(id="mock-1", base_url=args.mock_url, api_key="bench"),
        db=SqliteDb(db_file=args.db),
        add_history_to_context=True,
        telemetry=False,
    )
    app = AgentOS(agents=[agent], telemetry=False).get_app()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
