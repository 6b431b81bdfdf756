"""An accepted document survives the process dying right after `insert_document` returned
(`kill -9`: nothing closed, nothing flushed by us), and the file commits with synchronous=FULL
(the setting that makes the same hold for a power cut)."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from pathlib import Path

from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
from tests.conftest import child_env

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from agentos.knowledge.sqlite_storage import SqliteKnowledgeStorage
    from tests.knowledge.test_storage import collection, document

    async def main() -> None:
        s = SqliteKnowledgeStorage(Path(sys.argv[1]))
        await s.open()
        col = await s.create_collection(collection(), max_per_tenant=5)
        await s.insert_document(document(col, "doc_1", {"k": "v"}), b"accepted body", max_documents=10)
        os.kill(os.getpid(), signal.SIGKILL)  # the 202 would go out now; then the process dies

    asyncio.run(main())
    """
)


async def test_accepted_document_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "knowledge.db"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, str(path), env=child_env())
    assert await asyncio.wait_for(child.wait(), 60) == -signal.SIGKILL
    storage = SqliteKnowledgeStorage(path)
    await storage.open()
    try:
        doc = await storage.get_document("acme", "col_acme_docs", "doc_1")
        assert doc is not None and (doc.status, doc.metadata) == ("queued", {"k": "v"})
        assert await storage.pending() == 1
        claimed = await storage.claim_documents("w", 100, 1000, 5)
        assert [(d.document_id, body) for d, _, body in claimed] == [("doc_1", b"accepted body")]
        level = await storage._writer.submit(apply=lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 2  # FULL
    finally:
        await storage.close()
