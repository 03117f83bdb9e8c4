"""The plain rules of generation: the answer's text as tokens arrive (held back across
split characters and possible stop sequences, cut at a stop), and the checks of a
request's sampling against a model's limits."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sift_server.errors import InputTooLong, InvalidInput
from sift_server.generation.params import Limits, check_context, sampling
from sift_server.generation.text import AnswerText

# A toy vocabulary: each id is one piece of text; 9 and 10 are halves of one character.
PIECES = {1: "he", 2: "llo", 3: " wor", 4: "ld", 5: "END", 6: "E", 7: "ND", 8: "!", 9: "\xc3", 10: "\xa9"}


def decode(ids: Sequence[int]) -> str:
    raw = "".join(PIECES[i] for i in ids).encode("latin-1")
    return raw.decode("utf-8", errors="replace")


def feed(text: AnswerText, *steps: list[int]) -> list[str]:
    return [text.add(step) for step in steps]


def test_text_is_sent_as_it_comes_and_whole_at_the_end() -> None:
    text = AnswerText(decode)
    assert feed(text, [1], [2, 3], [4]) == ["he", "llo wor", "ld"]
    assert text.finish() == ""


def test_a_split_character_waits_for_its_second_half() -> None:
    text = AnswerText(decode)
    assert feed(text, [1], [9], [10]) == ["he", "", "é"]


def test_a_stop_sequence_ends_the_text_before_it() -> None:
    text = AnswerText(decode, ("END",))
    assert feed(text, [1, 2], [5, 8]) == ["hello", ""]
    assert text.stopped and text.finish() == ""


def test_a_stop_sequence_over_two_steps_is_held_back_then_cut() -> None:
    text = AnswerText(decode, ("END",))
    assert feed(text, [1, 6], [7]) == ["he", ""]
    assert text.stopped


def test_a_held_back_prefix_that_is_no_stop_is_sent() -> None:
    text = AnswerText(decode, ("END",))
    assert feed(text, [1, 6], [8]) == ["he", "E!"]


def decode_bytes(ids: Sequence[int]) -> str:
    """A byte-level vocabulary: id ``b`` is the byte ``b``."""
    return bytes(ids).decode("utf-8", errors="replace")


def test_bytes_that_can_never_complete_a_character_are_not_held_to_the_end() -> None:
    # A model that makes invalid UTF-8 (a random one does, a real one may): a trailing
    # replacement character can still become a character only within the last 3 bytes.
    text = AnswerText(decode_bytes)
    sent = "".join(feed(text, *([0xFF] for _ in range(8))))
    assert sent == "\ufffd" * 5
    assert sent + text.finish() == decode_bytes([0xFF] * 8)


def test_what_is_sent_is_never_taken_back_over_random_bytes() -> None:
    import random

    rng = random.Random(3)
    alphabet = "aé€😀"  # 1, 2, 3 and 4 bytes in UTF-8
    for _ in range(200):
        ids: list[int] = []
        while len(ids) < 40:
            if rng.random() < 0.3:
                ids.append(rng.choice([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF, 0x9F]))
            else:
                ids.extend(rng.choice(alphabet).encode())
        text = AnswerText(decode_bytes)
        sent, at = "", 0
        while at < len(ids):
            size = rng.randint(1, 3)
            sent += text.add(ids[at : at + size])
            at += size
            assert decode_bytes(ids[:at]).startswith(sent)
        assert sent + text.finish() == decode_bytes(ids)


def llama2_style_tokenizer(folder: Path) -> Path:
    """SentencePiece as Llama 2 and Mistral ship it: pieces with "▁" for spaces, bytes as
    ``<0xNN>`` pieces, and a decoder that strips the text's first space."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    pieces += [(f"<0x{b:02X}>", -10.0) for b in range(256)]
    pieces += [(w, -3.0) for w in ("▁the", "▁a", "▁cat", "sat", "▁on", "▁", "s", ".", "é", "▁mat")]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    tokenizer.decoder = decoders.Sequence(steps)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["byte-level BPE", "llama2 sentencepiece", "t5 metaspace"])
def test_incremental_decoding_sends_what_decoding_the_whole_answer_sends(kind: str, tmp_path: Path) -> None:
    import random

    from transformers import AutoTokenizer

    from sift_server.generation.adapter import plain_decode
    from tests.fixtures import tiny_translator
    from tests.fixtures.tiny_decoder import build_tokenizer

    if kind == "byte-level BPE":
        build_tokenizer(tmp_path, append_eos=False)
    elif kind == "llama2 sentencepiece":
        llama2_style_tokenizer(tmp_path)
    else:
        tiny_translator.build_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    direct = plain_decode(tokenizer)

    def decode_ids(ids: Sequence[int]) -> str:
        return str(direct(list(ids), skip_special_tokens=True))

    rng = random.Random(5)
    incremental_steps = 0
    for case in range(60):
        ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, 40))]
        stops = ("e", "at ") if case % 3 == 0 else ()
        fast, whole = AnswerText(decode_ids, stops), AnswerText(decode_ids, stops, _whole=True)
        at = 0
        while at < len(ids):
            size = rng.randint(1, 3)
            assert fast.add(ids[at : at + size]) == whole.add(ids[at : at + size])
            at += size
        assert fast.finish() == whole.finish()
        incremental_steps += not fast._whole
    assert incremental_steps > 0  # the window was used, not only the whole answer


LIMITS = Limits(context_tokens=100, max_new_tokens_cap=50)


def wanted(**given: object) -> object:
    args: dict[str, object] = {
        "max_new_tokens": 10,
        "default_max_new_tokens": 16,
        "temperature": None,
        "top_p": None,
        "seed": None,
        "stop": None,
        "grammar": None,
        "limits": LIMITS,
    }
    return sampling(**{**args, **given})  # type: ignore[arg-type]


def test_sampling_defaults_to_greedy() -> None:
    chosen = sampling(
        max_new_tokens=None,
        default_max_new_tokens=16,
        temperature=None,
        top_p=None,
        seed=None,
        stop="x",
        grammar=None,
        limits=LIMITS,
    )
    assert chosen.greedy and chosen.max_new_tokens == 16 and chosen.stop == ("x",)


@pytest.mark.parametrize(
    "given",
    [{"max_new_tokens": 0}, {"max_new_tokens": 51}, {"temperature": 3.0}, {"top_p": 0.0}, {"stop": [""]}],
)
def test_out_of_range_sampling_is_refused(given: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        wanted(**given)


def test_the_prompt_and_answer_must_fit_the_context() -> None:
    chosen = sampling(
        max_new_tokens=40,
        default_max_new_tokens=16,
        temperature=None,
        top_p=None,
        seed=None,
        stop=None,
        grammar=None,
        limits=LIMITS,
    )
    check_context(60, chosen, LIMITS, max_field="max_tokens")
    with pytest.raises(InvalidInput, match="at most 39"):
        check_context(61, chosen, LIMITS, max_field="max_tokens")
    with pytest.raises(InputTooLong):
        check_context(100, chosen, LIMITS, max_field="max_tokens")


def test_response_format_takes_the_references_regex_and_grammar() -> None:
    import msgspec

    from sift_server.generation.grammar import from_response_format
    from sift_server.generation.params import GrammarSpec
    from sift_server.generation.wire import ResponseFormat

    def read(raw: dict[str, object]) -> ResponseFormat:
        return msgspec.convert(raw, ResponseFormat)

    assert from_response_format(read({"type": "regex", "regex": "(yes|no)"})) == GrammarSpec("regex", "(yes|no)")
    ebnf = 'root ::= "a" | "b"'
    assert from_response_format(read({"type": "grammar", "grammar": ebnf, "syntax": "ebnf"})) == GrammarSpec(
        "ebnf", ebnf
    )
    with pytest.raises(InvalidInput, match=r"response_format\.regex"):
        from_response_format(read({"type": "regex"}))
    with pytest.raises(InvalidInput, match="does not compile"):
        from_response_format(read({"type": "grammar", "grammar": "root ::= ("}))
