"""LightOnOCR-2 on transformers' own classes (``LightOnOcrForConditionalGeneration``,
``LightOnOcrProcessor``: a Pixtral vision encoder and a Qwen3 decoder): a page image
to Markdown, as the reference server's ``transformers`` profile answers it: the chat
template over the catalog's system prompt, the image and the request's instruction;
one ``markdown`` entity (adapters/_chat_ocr.py, adapters/_ocr_vl_rules.py;
docs/models.md, "OCR vision-language models").

LightOnOCR-3 (a Qwen3.5 checkpoint, sampled) is another architecture: a folder whose
config is not ``lighton_ocr`` is refused at load.
"""

from __future__ import annotations

from typing import Any

from sift_server.adapters._chat_ocr import ChatOcrAdapter, catalog_settings
from sift_server.adapters._ocr_vl_rules import (
    LIGHTON_MAX_NEW_TOKENS,
    LIGHTON_SYSTEM_PROMPT,
    ChatOcrRequest,
    lighton_messages,
    lighton_request,
)
from sift_server.adapters.base import ExtractTask, LoadContext


class LightOnOcrAdapter(ChatOcrAdapter):
    family = "lighton_ocr"
    model_kind = "LightOnOCR"
    system_prompt: str = LIGHTON_SYSTEM_PROMPT

    @classmethod
    def load(cls, ctx: LoadContext) -> LightOnOcrAdapter:
        from transformers import LightOnOcrForConditionalGeneration, LightOnOcrProcessor
        from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

        settings = catalog_settings(
            ctx,
            adapter="lighton-ocr",
            model_type="lighton_ocr",
            hint=(
                "LightOnOCR-2; LightOnOCR-3 is a Qwen3.5 checkpoint the reference samples from unseeded, "
                "so Sift has no answer to match (docs/models.md, 'OCR vision-language models')"
            ),
            max_new_tokens=LIGHTON_MAX_NEW_TOKENS,
        )
        system_prompt = ctx.options.get("system_prompt", LIGHTON_SYSTEM_PROMPT)
        if not isinstance(system_prompt, str) or not system_prompt.strip():
            raise ValueError(f"catalog option system_prompt must be a non-empty string, not {system_prompt!r}")
        # A bad catalog default fails the load, not every request.
        lighton_request({}, None, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams)
        # The PIL image path (no torchvision), as the other image adapters.
        image_processor = PixtralImageProcessorPil.from_pretrained(ctx.path, local_files_only=True)
        processor: Any = LightOnOcrProcessor.from_pretrained(
            ctx.path, local_files_only=True, image_processor=image_processor
        )
        adapter = cls.assemble(ctx, settings, LightOnOcrForConditionalGeneration, processor, "lighton-ocr")
        adapter.system_prompt = system_prompt
        return adapter

    def resolve(self, task: ExtractTask) -> ChatOcrRequest:
        return lighton_request(
            task.options, task.instruction, max_new_tokens=self.max_new_tokens, num_beams=self.num_beams
        )

    def messages(self, request: ChatOcrRequest) -> list[dict[str, Any]]:
        return lighton_messages(self.system_prompt, request.text)
