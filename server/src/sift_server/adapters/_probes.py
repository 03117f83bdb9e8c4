"""The fixed probe set ``auto`` compares backends on: varied lengths, casing,
punctuation, digits and a little non-English text, so a backend that only
agrees on easy inputs does not pass. Changing it changes
``backends.PROBE_VERSION``."""

from __future__ import annotations

PROBE_TEXTS: tuple[str, ...] = (
    "hello",
    "What is the capital of France?",
    "The quick brown fox jumps over the lazy dog.",
    "Sift batches requests dynamically and serves embeddings, scores and extractions over HTTP.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong and Buzz Aldrin walked on its surface.",
    "A short note.",
    "Mix of CASE and numbers: 42, 3.14159, 2026-11-30 and $1,000,000!",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Tokenizers split rare words like antidisestablishmentarianism into several word pieces.",
    "Rain is expected tomorrow afternoon, so bring an umbrella if you go out.",
    "the the the the the the the the the the the the the the the the",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules, "
    "releasing oxygen as a by-product of splitting water inside the chloroplasts of plant cells.",
    "Où est la bibliothèque ?",
    "email me at someone@example.com or call +1 (555) 010-9999",
    "Graph neural networks aggregate messages from neighbouring nodes.",
    "OK",
)

PROBE_QUERY = "how do plants make energy from sunlight"
BATCH = 8

# GLiNER's probe: texts with names, places, organisations and dates in them (and a
# few without), and the labels asked for. ``gliner.graph.PROBE_VERSION`` names it.
GLINER_PROBE_TEXTS: tuple[str, ...] = (
    PROBE_TEXTS[4],  # Apollo 11, Neil Armstrong, Buzz Aldrin, 1969
    "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine.",
    "Paris is the capital of France and home to the Louvre museum.",
    "Zoë met the CEO of Acme-Corp in São Paulo, Brazil, on 3 March 2024!",
    "The World Health Organization, based in Geneva, published the report on Monday.",
    PROBE_TEXTS[1],
    PROBE_TEXTS[5],
    "Angela Merkel spoke with Emmanuel Macron in Berlin before the European Council summit in Brussels.",
    "Tokyo, Osaka and Kyoto are cities in Japan; Toyota is headquartered in Aichi.",
    PROBE_TEXTS[13],
)
GLINER_PROBE_LABELS: tuple[str, ...] = ("person", "location", "organization", "date")

# GLiClass's probe: the general texts above against topic labels, so the scores spread
# out and a candidate that reorders two close labels is caught.
# ``gliclass.graph.PROBE_VERSION`` names it.
GLICLASS_PROBE_LABELS: tuple[str, ...] = ("science", "travel", "technology", "history", "language", "weather")
