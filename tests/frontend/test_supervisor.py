"""What ``sift serve --frontends`` refuses before it starts any process."""

from __future__ import annotations


def test_a_generation_model_is_refused_before_anything_starts() -> None:
    from sift_server.config import Settings
    from sift_server.frontend.supervisor import refusal

    assert refusal(Settings(frontends=2)) is None
    reason = refusal(Settings(frontends=2, preload=["google/madlad400-3b-mt"]))
    assert reason is not None and "google/madlad400-3b-mt generates text" in reason
