"""Text out of uploads: each supported type, and every bad upload a clear 422 code, never a crash."""

from __future__ import annotations

import zlib

import pytest

from agentos.errors import InvalidInput, UnsupportedMediaType
from agentos.knowledge import extract
from agentos.knowledge.extract import extract_text, media_type
from tests.knowledge.pdfs import make_pdf


def expect_invalid(content: bytes, content_type: str, code: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        extract_text(content, content_type)
    assert caught.value.code == code
    assert caught.value.status == 422
    return caught.value


def test_plain_text_and_markdown_are_utf8_with_bad_bytes_replaced() -> None:
    assert extract_text("héllo wörld".encode(), "text/plain") == "héllo wörld"
    assert extract_text(b"# Title\n\nbody", "text/markdown") == "# Title\n\nbody"
    assert extract_text(b"ok \xff\xfe end", "text/plain; charset=utf-8") == "ok \ufffd\ufffd end"
    assert extract_text(b"\xef\xbb\xbfbom", "TEXT/PLAIN") == "bom"  # the BOM is not text
    assert extract_text(b"nul\x00s\x00", "text/plain") == "nuls"


def test_media_type_ignores_parameters_and_case() -> None:
    assert media_type("Text/HTML ; charset=UTF-8") == "text/html"
    assert media_type("application/pdf") == "application/pdf"


def test_html_keeps_visible_text_only() -> None:
    html = b"""<!doctype html><html><head><title>T</title><meta charset="utf-8"><style>p{color:red}</style>
    <script>var secret = "nope";</script></head>
    <body><h1>Heading</h1><p>First &amp; second&nbsp;para<br>next line</p>
    <script type="text/javascript">alert("x")</script><div>  spaced    out  </div><ul><li>one</li><li>two</li></ul>
    </body></html>"""
    text = extract_text(html, "text/html; charset=utf-8")
    assert text == "Heading\n\nFirst & second para\nnext line\n\nspaced out\n\none\ntwo"
    assert "secret" not in text and "alert" not in text and "color" not in text and "T\n" not in text


def test_html_with_unclosed_tags_still_gives_its_text() -> None:
    assert extract_text(b"<p>open <b>bold <i>italic", "text/html") == "open bold italic"
    assert extract_text(b"<head><title>t</title><body>the body", "text/html") == "the body"


def test_pdf_pages_are_separated_by_a_blank_line() -> None:
    pdf = make_pdf(["Hello PDF world\nsecond line", "Page (two)"])
    assert extract_text(pdf, "application/pdf") == "Hello PDF world\nsecond line\n\nPage (two)"
    assert extract_text(make_pdf(["deflated text"], compress=True), "application/pdf") == "deflated text"


@pytest.mark.parametrize(
    "content",
    [b"", b"%PDF-1.4\n garbage", b"not a pdf at all", make_pdf(["x"])[:60], b"%PDF-1.7\n" + bytes(range(256)) * 10],
)
def test_a_corrupt_pdf_is_unreadable_document(content: bytes) -> None:
    expect_invalid(content, "application/pdf", "unreadable_document")


def test_a_pdf_without_text_is_empty_document() -> None:
    expect_invalid(make_pdf([""]), "application/pdf", "empty_document")


def test_pdf_text_is_capped_against_decompression_bombs(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "bomb " * 200
    pdf = make_pdf(["\n".join([line] * 50)] * 3, compress=True)
    assert len(zlib.compress(pdf)) < len(pdf)  # the pages inflate far beyond the upload
    monkeypatch.setattr(extract, "MIN_PDF_TEXT_CHARS", 1000)
    monkeypatch.setattr(extract, "PDF_TEXT_RATIO", 1)
    text = extract_text(pdf, "application/pdf")
    assert len(text) <= max(1000, len(pdf))
    assert text.startswith("bomb bomb")


def test_pdf_pages_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract, "MAX_PDF_PAGES", 2)
    assert extract_text(make_pdf(["one", "two", "three"]), "application/pdf") == "one\n\ntwo"


@pytest.mark.parametrize("content_type", ["image/png", "application/json", "", "text", "application/pdfx"])
def test_unsupported_types(content_type: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        extract_text(b"data", content_type)
    assert (caught.value.status, caught.value.code) == (415, "unsupported_media_type")
    assert "text/plain" in caught.value.message  # the message says what is supported


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"", "text/plain"),
        (b"  \n\t ", "text/markdown"),
        (b"\x00\x00", "text/plain"),
        (b"<script>only()</script><style>x{}</style>", "text/html"),
    ],
)
def test_no_text_is_empty_document(content: bytes, content_type: str) -> None:
    expect_invalid(content, content_type, "empty_document")
