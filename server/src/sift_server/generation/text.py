"""The answer's text as its tokens arrive: what can be sent now, and where a stop
sequence ends it. Plain code over a ``decode`` function (the model's tokenizer).

A token may end inside a UTF-8 character (byte-level vocabularies); its text (at
most the last 3 replacement characters) is held back until the character completes,
and so is any tail that could be the start of a stop sequence, so nothing sent is
ever taken back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Decode = Callable[[Sequence[int]], str]
INCOMPLETE = "\ufffd"
# A character still being made is at most its first 3 bytes (UTF-8's longest is 4), which
# decode to at most 3 replacement characters (one per byte where a decoder replaces byte by
# byte): a replacement character before the last 3 is final (invalid bytes, e.g. a random
# model's), so it is sent, not held until the answer ends.
MAX_INCOMPLETE = 3


@dataclass(slots=True)
class AnswerText:
    """The answer so far. Its text is decoded incrementally: the text of ``ids[:_read]`` is
    kept (``_head``), and each step decodes only the window ``ids[_start:]``, from the token
    before the last complete character (so a tokenizer's start-of-text rules, a stripped
    leading space, apply to both and cancel), and cuts off the text of ``ids[_start:_read]``
    decoded from the same start. Decoding the whole answer at every step cost a step's time
    growing with the answer (quadratic over it). Where the window's text does not begin with
    that prefix's (a tokenizer whose text is not local), the whole answer is decoded, as
    before, for the rest of this answer; ``finish`` always decodes it whole."""

    decode: Decode
    stops: tuple[str, ...] = ()
    ids: list[int] = field(default_factory=list)
    sent: int = 0  # characters of the decoded text already handed out
    stopped: bool = False
    _head: str = ""  # the text of ids[:_read]
    _start: int = 0
    _read: int = 0
    _prefix: str = ""  # ids[_start:_read] decoded on their own
    _whole: bool = False  # decode the whole answer at every step

    def add(self, new_ids: Sequence[int]) -> str:
        """Take the engine's next tokens; return the text that can be sent now
        (empty when it must wait, or once a stop sequence was met)."""
        if self.stopped:
            return ""
        self.ids.extend(new_ids)
        text = self._text()
        cut = self._stop_at(text)
        if cut is not None:
            self.stopped = True
            return self._take(text[:cut])
        safe = len(text) - self._held_back(text)
        return self._take(text[:safe])

    def finish(self) -> str:
        """The rest, once the engine is done (an incomplete character stays as decoded)."""
        if self.stopped:
            return ""
        text = self.decode(self.ids)
        cut = self._stop_at(text)
        return self._take(text if cut is None else text[:cut])

    def _text(self) -> str:
        """The whole answer's text, decoding only the window since the last complete character."""
        if self._whole:
            return self.decode(self.ids)
        window = self.decode(self.ids[self._start :])
        if not window.startswith(self._prefix):
            self._whole = True
            return self.decode(self.ids)
        text = self._head + window[len(self._prefix) :]
        if not text.endswith(INCOMPLETE):  # every character so far complete: move the window on
            prefix = self.decode(self.ids[self._read :])
            if prefix:
                self._start, self._prefix = self._read, prefix
            else:  # no text to anchor a start on (a stripped space, skipped tokens): keep the start
                self._prefix = window
            self._read, self._head = len(self.ids), text
        return text

    def _take(self, upto: str) -> str:
        if len(upto) <= self.sent:
            return ""
        piece = upto[self.sent :]
        self.sent = len(upto)
        return piece

    def _stop_at(self, text: str) -> int | None:
        # Search from a little before what was sent: a stop sequence may straddle it.
        start = max(0, self.sent - max((len(s) for s in self.stops), default=0))
        found = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _held_back(self, text: str) -> int:
        held = 0
        while held < min(MAX_INCOMPLETE, len(text)) and text[len(text) - 1 - held] == INCOMPLETE:
            held += 1
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:n]):
                    held = max(held, n)
                    break
        return min(held, max(0, len(text) - self.sent))
