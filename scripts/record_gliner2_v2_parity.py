"""Re-record tests/fixtures/gliner2_v2_parity.json: gliner2 2.0.0's own answers (the release the
reference server runs GLiNER2 2.x checkpoints with) on the tiny GLiNER2 2.x model.

    PYTHONPATH=server/src:. HF_HUB_OFFLINE=1 .venv/bin/python scripts/record_gliner2_v2_parity.py

The model is built with the tests' builder (fixed seed) and answered by the library's
``batch_extract_entities``, both in a child interpreter with the side install first on its
path (tests/fixtures/tiny_gliner2_v2.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.fixtures.tiny_gliner2_v2 import CASES, FIXTURE, build_tiny_gliner2_v2, library_answers


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gliner2-v2-parity-") as tmp:
        answers = library_answers(build_tiny_gliner2_v2(Path(tmp)))
    fixture = {
        "recorded_with": "gliner2 2.0.0 AutoExtractor.batch_extract_entities (scripts/record_gliner2_v2_parity.py)",
        "cases": CASES,
        "answers": {case["name"]: answer for case, answer in zip(CASES, answers, strict=True)},
    }
    FIXTURE.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
