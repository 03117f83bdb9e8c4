"""Varied inputs for embedding parity: short, long, over the model's maximum,
unicode, whitespace-only, code and numbers."""

from __future__ import annotations

_SHORT = [
    "hello world",
    "A",
    "What is a vector database?",
    "The cat sat on the mat.",
    "Sift batches concurrent requests into one forward.",
    "¿Dónde está la biblioteca?",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "emoji test 🚀🔥✨ with symbols ©®™",
    "numbers 3.14159 2.71828 1e-10 -42",
    "def f(x):\n    return x * 2",
    "SELECT * FROM items WHERE id = 7;",
    "https://example.com/path?query=value&x=1",
    "   ",
    "\t\n",
    "",
    "UPPER CASE SENTENCE WITH SHOUTING",
    "mixed\u00a0non-breaking\u2003spaces",
    "zero\u200bwidth\u200bjoiners",
    "a" * 50,
    "repeat " * 20,
    "Ünïcödé àccénts ñ ç ø å",
    "中文句子，用于测试。",
    "한국어 문장입니다.",
    "ελληνικά γράμματα",
    "hebrew עברית text",
    "tabs\tand\tnewlines\nhere",
    "punctuation!!! ??? ... ;;; :::",
]

_PARAGRAPH = (
    "Retrieval augmented generation combines a search step with a language model. "
    "The search step embeds the query, finds the nearest passages in a vector index, "
    "and hands them to the model as context. "
)


def corpus() -> list[str]:
    texts = list(_SHORT)
    for n in (1, 2, 4, 8, 16, 32):  # grows past the 256-token maximum
        texts.append(_PARAGRAPH * n)
    for i in range(14):
        texts.append(f"Document number {i}: " + " ".join(f"token{j}" for j in range(i * 7)))
    texts.append("word " * 2000)  # far over the maximum: truncated
    texts.append("🚀" * 400)
    return texts
