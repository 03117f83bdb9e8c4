"""PaddleOCR-VL on transformers' own classes (``PaddleOCRVLForConditionalGeneration``,
``PaddleOCRVLProcessor``: a NaViT-style SigLIP encoder and an ERNIE-4.5 decoder): a
page image to text by task, as the reference server's ``paddleocr_vl`` adapter answers
it: one user turn with the image and the task's prompt (``options.task`` ``ocr``,
``table``, ``formula``, ``chart``, ``spotting``, ``seal``; the instruction replaces the
prompt), one entity labelled ``markdown`` (or the task's name for ``spotting`` and
``seal``) (adapters/_chat_ocr.py, adapters/_ocr_vl_rules.py; docs/models.md, "OCR
vision-language models").

The reference runs the checkpoint's own repository code under ``trust_remote_code``;
Sift never runs it, only transformers' native classes. The processor is built from
its parts (the tokenizer, the PIL image processor, the chat template):
``PaddleOCRVLProcessor.from_pretrained`` resolves its image processor through
``AutoImageProcessor``, which asks for torchvision, which the lean install lacks.
"""

from __future__ import annotations

from typing import Any

from sift_server.adapters._chat_ocr import ChatOcrAdapter, catalog_settings
from sift_server.adapters._ocr_vl_rules import (
    PADDLE_DEFAULT_TASK,
    PADDLE_MAX_NEW_TOKENS,
    ChatOcrRequest,
    paddle_messages,
    paddle_request,
    paddle_task,
)
from sift_server.adapters.base import ExtractTask, LoadContext


class PaddleOcrVlAdapter(ChatOcrAdapter):
    family = "paddleocr_vl"
    model_kind = "PaddleOCR-VL"
    task: str = PADDLE_DEFAULT_TASK

    @classmethod
    def load(cls, ctx: LoadContext) -> PaddleOcrVlAdapter:
        from transformers import AutoTokenizer, PaddleOCRVLForConditionalGeneration, PaddleOCRVLProcessor
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
            PaddleOCRVLImageProcessorPil,
        )

        settings = catalog_settings(
            ctx,
            adapter="paddleocr-vl",
            model_type="paddleocr_vl",
            hint="PaddleOCR-VL",
            max_new_tokens=PADDLE_MAX_NEW_TOKENS,
        )
        # A bad catalog default fails the load, not every request.
        task = paddle_task(ctx.options.get("task", PADDLE_DEFAULT_TASK))
        paddle_request(
            {}, None, default_task=task, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams
        )
        tokenizer: Any = AutoTokenizer.from_pretrained(ctx.path, local_files_only=True)
        if not tokenizer.chat_template:
            raise ValueError(f"paddleocr-vl cannot serve {ctx.path}: its tokenizer has no chat template")
        processor: Any = PaddleOCRVLProcessor(
            image_processor=PaddleOCRVLImageProcessorPil.from_pretrained(ctx.path, local_files_only=True),
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )
        adapter = cls.assemble(ctx, settings, PaddleOCRVLForConditionalGeneration, processor, "paddleocr-vl")
        adapter.task = task
        return adapter

    def resolve(self, task: ExtractTask) -> ChatOcrRequest:
        return paddle_request(
            task.options,
            task.instruction,
            default_task=self.task,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )

    def messages(self, request: ChatOcrRequest) -> list[dict[str, Any]]:
        return paddle_messages(request.text)
