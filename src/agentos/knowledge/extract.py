"""Text out of an uploaded document: plain text, Markdown, HTML (stdlib parser) and PDF (pypdf,
imported only when a PDF arrives, so the server starts without it being loaded).

Every path is bounded: an upload is hostile until proven otherwise, and a PDF's compressed
streams can inflate far beyond its size (a decompression bomb), so the text taken out of one is
capped by pages and by characters."""

from __future__ import annotations

import io
import logging
from html.parser import HTMLParser

from agentos.errors import InvalidInput, UnsupportedMediaType

SUPPORTED_TYPES = ("text/plain", "text/markdown", "text/html", "application/pdf")

MAX_PDF_PAGES = 2000
# a PDF's text may legitimately exceed its bytes (compressed streams), but not by this much
PDF_TEXT_RATIO = 20
MIN_PDF_TEXT_CHARS = 4 << 20

# the elements whose text is never content
_DROPPED = frozenset({"script", "style", "head", "noscript", "template", "svg"})
# the elements that stand apart as paragraphs (a blank line around them: the chunker's boundary)
_BLOCKS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "details",
        "div",
        "dl",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "title",
        "ul",
    }
)
# the elements that start a new line within a block
_LINES = frozenset({"br", "dd", "dt", "li", "option", "tr"})

log = logging.getLogger(__name__)


def extract_text(content: bytes, content_type: str) -> str:
    """The document's text. Plain text and Markdown as UTF-8 (invalid bytes replaced); HTML
    without tags, scripts and styles (block elements become line breaks); PDF page by page
    (pypdf), pages separated by a blank line.

    Raises:
        UnsupportedMediaType: an unsupported type (415 `unsupported_media_type`).
        InvalidInput: a PDF that cannot be
            read (`unreadable_document`), or no text at all (`empty_document`).
    """
    kind = media_type(content_type)
    if kind in ("text/plain", "text/markdown"):
        text = _decode(content)
    elif kind == "text/html":
        text = html_text(_decode(content))
    elif kind == "application/pdf":
        text = pdf_text(content)
    else:
        raise UnsupportedMediaType(
            f"unsupported content type {content_type[:100]!r}; supported: {', '.join(SUPPORTED_TYPES)}"
        )
    text = text.replace("\x00", "")
    if not text.strip():
        raise InvalidInput("the document has no text", code="empty_document")
    return text


def media_type(content_type: str) -> str:
    """`Text/HTML; charset=utf-8` -> `text/html`: parameters and case do not matter."""
    return content_type.split(";", 1)[0].strip().lower()


def _decode(content: bytes) -> str:
    # a BOM is not text; utf-8-sig drops it
    return content.decode("utf-8-sig", errors="replace")


class _TextParser(HTMLParser):
    """Collects the character data outside dropped elements; block elements break lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.dropping = 0  # depth inside dropped elements

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.dropping = 0  # a `<head>` left open ends where the body starts (as browsers do)
        elif tag in _DROPPED:
            self.dropping += 1
        else:
            self._break(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._break(tag)  # `<br/>`, `<svg/>`: nothing to drop, but a line may break

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self.dropping = max(0, self.dropping - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n\n")

    def _break(self, tag: str) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n\n")
        elif tag in _LINES:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML page: runs of blanks within a line collapse (entities such as
    `&nbsp;` included), at most one blank line between blocks."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def pdf_text(content: bytes) -> str:
    """The text of each page, pages separated by a blank line; capped (see the module)."""
    try:
        from pypdf import PdfReader
    except ImportError as exc:  # an optional part: say so, do not crash
        raise UnsupportedMediaType("PDF documents are not supported here (pypdf is missing)") from exc
    limit = max(MIN_PDF_TEXT_CHARS, PDF_TEXT_RATIO * len(content))
    pages: list[str] = []
    total = 0
    try:
        reader = PdfReader(io.BytesIO(content), strict=False)
        # an encrypted PDF with an empty user password opens; any other is unreadable here
        if reader.is_encrypted and not reader.decrypt(""):
            raise InvalidInput("the PDF is encrypted", code="unreadable_document")
        for number, page in enumerate(reader.pages):
            if number >= MAX_PDF_PAGES or total >= limit:
                break
            text = page.extract_text() or ""
            pages.append(text[: limit - total])
            total += len(pages[-1])
    except InvalidInput:
        raise
    except Exception as exc:  # pypdf raises many kinds (and plain ValueError, KeyError...) on bad files
        log.info("unreadable PDF: %r", exc)
        raise InvalidInput("the PDF cannot be read", code="unreadable_document") from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())
