"""GLM-OCR on transformers' own classes (``GlmOcrForConditionalGeneration``, the
checkpoint's ``Glm46VProcessor``: a CogViT vision encoder and a GLM-0.5B decoder): a
page image to Markdown, as the reference server's ``transformers`` profile answers it
(its ``glm_ocr`` adapter): one user turn with the image and the catalog's user text
(by default ``Text Recognition:``; the request's instruction replaces it), greedy (or
beam) ``generate``, one ``markdown`` entity (adapters/_chat_ocr.py,
adapters/_ocr_vl_rules.py; docs/models.md, "OCR vision-language models").

The processor is built from its parts with no video processor
(adapters/_image_only_processor.py): the stock one needs torchvision.
"""

from __future__ import annotations

from typing import Any

from sift_server.adapters._chat_ocr import ChatOcrAdapter, catalog_settings
from sift_server.adapters._image_only_processor import load_image_only_processor
from sift_server.adapters._ocr_vl_rules import (
    GLM_MAX_NEW_TOKENS,
    GLM_USER_TEXT,
    ChatOcrRequest,
    glm_request,
    user_turn,
)
from sift_server.adapters.base import ExtractTask, LoadContext


class GlmOcrAdapter(ChatOcrAdapter):
    family = "glm_ocr"
    model_kind = "GLM-OCR"
    user_text: str = GLM_USER_TEXT

    @classmethod
    def load(cls, ctx: LoadContext) -> GlmOcrAdapter:
        from transformers import Glm46VProcessor, GlmOcrForConditionalGeneration
        from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil

        settings = catalog_settings(
            ctx, adapter="glm-ocr", model_type="glm_ocr", hint="GLM-OCR", max_new_tokens=GLM_MAX_NEW_TOKENS
        )
        user_text = ctx.options.get("user_text", GLM_USER_TEXT)
        if not isinstance(user_text, str) or not user_text.strip():
            raise ValueError(f"catalog option user_text must be a non-empty string, not {user_text!r}")
        # A bad catalog default fails the load, not every request.
        glm_request({}, None, user_text=user_text, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams)
        processor = load_image_only_processor(ctx.path, Glm46VProcessor, Glm46VImageProcessorPil, "glm-ocr")
        adapter = cls.assemble(ctx, settings, GlmOcrForConditionalGeneration, processor, "glm-ocr")
        adapter.user_text = user_text
        return adapter

    def resolve(self, task: ExtractTask) -> ChatOcrRequest:
        return glm_request(
            task.options,
            task.instruction,
            user_text=self.user_text,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )

    def messages(self, request: ChatOcrRequest) -> list[dict[str, Any]]:
        return user_turn(request.text)
