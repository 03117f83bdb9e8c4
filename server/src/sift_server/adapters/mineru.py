"""MinerU2.5 (``opendatalab/MinerU2.5-Pro-2604-1.2B``, a Qwen2-VL checkpoint) on
transformers' own classes (``Qwen2VLForConditionalGeneration``, ``Qwen2VLProcessor``):
a page image to text by task, as the reference server's ``mineru_vl`` adapter answers
it: one user turn with the image and the task's prompt (``options.task`` ``[default]``,
``table``, ``equation``, ``image``, ``chart``, ``[layout]``; the instruction replaces
the prompt), greedy (or beam) ``generate`` with repeats of any 100-token sequence
banned (transformers' own ``no_repeat_ngram_size``) and a neutral repetition penalty,
one entity labelled ``mineru_<task>`` (adapters/_chat_ocr.py, adapters/_ocr_vl_rules.py;
docs/models.md, "OCR vision-language models").

The processor is built from its parts with no video processor
(adapters/_image_only_processor.py): the stock one needs torchvision.
"""

from __future__ import annotations

from typing import Any

from sift_server.adapters._chat_ocr import ChatOcrAdapter, catalog_settings
from sift_server.adapters._image_generation import catalog_count
from sift_server.adapters._image_only_processor import load_image_only_processor
from sift_server.adapters._ocr_vl_rules import (
    MINERU_DEFAULT_TASK,
    MINERU_MAX_NEW_TOKENS,
    MINERU_NO_REPEAT_NGRAM_SIZE,
    ChatOcrRequest,
    mineru_request,
    mineru_task,
    user_turn,
)
from sift_server.adapters.base import ExtractTask, LoadContext


class MinerUAdapter(ChatOcrAdapter):
    family = "mineru"
    model_kind = "MinerU2.5"
    task: str = MINERU_DEFAULT_TASK
    no_repeat_ngram_size: int = MINERU_NO_REPEAT_NGRAM_SIZE

    @classmethod
    def load(cls, ctx: LoadContext) -> MinerUAdapter:
        from transformers import Qwen2VLForConditionalGeneration, Qwen2VLProcessor
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        settings = catalog_settings(
            ctx,
            adapter="mineru",
            model_type="qwen2_vl",
            hint="MinerU2.5 is a Qwen2-VL checkpoint",
            max_new_tokens=MINERU_MAX_NEW_TOKENS,
        )
        # Bad catalog defaults fail the load, not every request.
        task = mineru_task(ctx.options.get("task", MINERU_DEFAULT_TASK))
        ngram = catalog_count(ctx.options, "no_repeat_ngram_size", MINERU_NO_REPEAT_NGRAM_SIZE)
        mineru_request(
            {}, None, default_task=task, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams
        )
        processor = load_image_only_processor(ctx.path, Qwen2VLProcessor, Qwen2VLImageProcessorPil, "mineru")
        adapter = cls.assemble(ctx, settings, Qwen2VLForConditionalGeneration, processor, "mineru")
        adapter.task = task
        adapter.no_repeat_ngram_size = ngram
        return adapter

    def resolve(self, task: ExtractTask) -> ChatOcrRequest:
        return mineru_request(
            task.options,
            task.instruction,
            default_task=self.task,
            max_new_tokens=self.max_new_tokens,
            num_beams=self.num_beams,
        )

    def messages(self, request: ChatOcrRequest) -> list[dict[str, Any]]:
        return user_turn(request.text)

    def generate_options(self) -> dict[str, Any]:
        # The reference's settings over the checkpoint's generation config: its own
        # penalty reset to none, and the n-gram ban.
        return {"repetition_penalty": 1.0, "no_repeat_ngram_size": self.no_repeat_ngram_size, "use_cache": True}
