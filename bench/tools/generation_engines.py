"""Time to first token and tokens/s of text generation at 1, 8 and 32 concurrent
streams: OpenVINO GenAI's ContinuousBatchingPipeline alone, the same engine behind
``sift serve`` (streamed /v1/completions over HTTP), and transformers' ``generate``
one request at a time. docs/generation.md reports a run.

    python bench/tools/generation_engines.py OUT_DIR [--streams 1,8,32] [--tokens 64] [--rounds N]

The engine-alone and Sift arms run interleaved (per stream count, ``--rounds`` times), so
both see the same machine; the median of Sift's tokens/s over the engine's is reported.
On a shared machine that wall-clock ratio is as noisy as the load (and favours the arm with
more processes), so each arm's CPU time per token is reported too (Linux ``/proc``): the
engine alone (this process), and for Sift the engine's child, the server's own process and
the client; the server's CPU per token over the engine's is Sift's overhead in CPU.

The model is built offline with a fixed seed and exported with optimum-intel, so nothing is
downloaded; its answers are noise. ``--shape tiny`` (the default): a random Qwen2 (hidden 512,
8 layers) over the tests' 264-token vocabulary, whose tokens cost what a ~25M-parameter decoder's
do. ``--shape qwen3-0.6b``: a random Qwen3 of Qwen3-0.6B's configuration (hidden 1024, 28
layers, 16 query and 8 key/value heads of 128, intermediate 3072, 151,936 tokens, tied
embeddings), the smallest generator of the reference catalog, with a byte-level tokenizer of
the same size (the byte symbols, filler words, three of Qwen's special tokens), so that both the
engine's and the server's work per token (the output layer, the detokenizer's table) are a
real small model's. Pin it with ``taskset``, or give
``--engine-cpus`` and ``--client-cpus``: the engine alone and Sift's server and engine child
then run on the first set, and the Sift arm's HTTP client on the second (so that the client's
own work is not counted against the server, as the engine-alone arm has no client). The server
starts on those CPUs (its engine child inherits them), and both arms' engines get one inference
thread per CPU: an engine pinned after it started would run more threads than its cores."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPT = "The quick brown fox jumps over the lazy dog while " * 2


# Qwen3-0.6B's vocabulary: its 151,643 ordinary entries, then its special tokens.
QWEN3_ORDINARY = 151_643
QWEN3_VOCAB = 151_936


def build(folder: Path, shape: str) -> tuple[Path, Path]:
    hf, ov = folder / shape / "hf", folder / shape / "ov"
    if (ov / "openvino_model.xml").exists():
        return hf, ov
    hf.mkdir(parents=True, exist_ok=True)
    (build_qwen3_06b if shape == "qwen3-0.6b" else build_tiny)(hf)
    from tests.fixtures.tiny_generator import export_openvino

    export_openvino(hf, ov)
    return hf, ov


def build_tiny(hf: Path) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tests.fixtures.tiny_decoder import _vocab_size, build_tokenizer
    from tests.fixtures.tiny_generator import CHATML

    build_tokenizer(hf, append_eos=False)
    tokenizer = AutoTokenizer.from_pretrained(hf)
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(hf)
    config = Qwen2Config(
        vocab_size=_vocab_size(), hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024, initializer_range=0.02,
        tie_word_embeddings=True, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(7)
    Qwen2ForCausalLM(config).eval().save_pretrained(hf)


def filler(n: int) -> str:
    """The ``n``-th filler word: a space (ByteLevel's ``Ġ``) and letters, unique per ``n``."""
    letters = ""
    while True:
        n, digit = divmod(n, 26)
        letters += chr(ord("a") + digit)
        if n == 0:
            return "Ġ" + letters


def build_qwen3_06b(hf: Path) -> None:
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from tests.fixtures.tiny_decoder import MERGES, SPECIAL_TOKENS, _byte_symbols
    from tests.fixtures.tiny_generator import CHATML

    vocab = {symbol: i for i, symbol in enumerate(_byte_symbols())}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    n = 0
    while len(vocab) < QWEN3_ORDINARY:  # words the model may answer with; no text tokenizes to them
        vocab.setdefault(filler(n), len(vocab))
        n += 1
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<|endoftext|>", eos_token="<|im_end|>", model_max_length=40960
    )
    fast.chat_template = CHATML
    fast.save_pretrained(hf)
    config = Qwen3Config(
        vocab_size=QWEN3_VOCAB, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1_000_000.0, tie_word_embeddings=True, initializer_range=0.02,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(7)
    Qwen3ForCausalLM(config).eval().save_pretrained(hf)


def summary(ttfts: list[float], tokens: int, wall: float, streams: int) -> dict[str, Any]:
    return {
        "streams": streams,
        "ttft_ms_median": round(statistics.median(ttfts) * 1000, 1),
        "tokens": tokens,
        "tokens_per_s_total": round(tokens / wall, 1),
        "tokens_per_s_per_stream": round(tokens / wall / streams, 1),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def child_pids(pid: int) -> list[int]:
    """A process's children (every thread's), e.g. the server's engine child."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` (and of its children) onto ``cpus``: the engine's own worker
    threads already exist, and ``sched_setaffinity`` moves one thread at a time."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)
    for child in child_pids(pid):
        pin(child, cpus)


def cpu_per_token(seconds: float, tokens: int) -> float:
    return round(seconds * 1000 / max(tokens, 1), 3)


def transformers_arm(hf: Path, n_tokens: int, requests: int = 4) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    ids = tokenizer(PROMPT, return_tensors="pt")
    kwargs = {"do_sample": False, "min_new_tokens": n_tokens}
    with torch.no_grad():
        model.generate(**ids, max_new_tokens=2, **kwargs | {"min_new_tokens": 2})
        ttfts, tokens, started = [], 0, time.perf_counter()
        for _ in range(requests):
            t0 = time.perf_counter()
            model.generate(**ids, max_new_tokens=1, do_sample=False)
            ttfts.append(time.perf_counter() - t0)
        started = time.perf_counter()
        for _ in range(requests):
            out = model.generate(**ids, max_new_tokens=n_tokens, **kwargs)
            tokens += out.shape[1] - ids["input_ids"].shape[1]
        wall = time.perf_counter() - started
    return summary(ttfts, tokens, wall, 1)


def engine_pipeline(ov: Path, threads: int) -> Any:
    """The engine alone, as Sift's child builds it (fp32, 32 sequences, 1 GiB of KV cache,
    ``threads`` inference threads: the count Sift's server is given)."""
    import openvino_genai as og

    from sift_server.generation.openvino_engine import FP32

    scheduler = og.SchedulerConfig()
    scheduler.cache_size = 1
    scheduler.max_num_seqs = 32
    properties: dict[str, Any] = dict(FP32) | {"INFERENCE_NUM_THREADS": threads}
    return og.ContinuousBatchingPipeline(str(ov), scheduler, "CPU", properties)


def engine_arm(pipe: Any, ov: Path, n_tokens: int, streams: int) -> dict[str, Any]:
    import numpy as np
    import openvino as ov_runtime
    import openvino_genai as og
    from transformers import AutoTokenizer

    # The prompt's ids as Sift's server makes them (the folder's transformers tokenizer), so that
    # both arms prefill the same tokens (the converted tokenizer splits the qwen3-0.6b shape's
    # filler words, which have no merges, differently).
    ids = [AutoTokenizer.from_pretrained(ov)(PROMPT)["input_ids"]]
    config = og.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = n_tokens
    config.do_sample = False
    for _ in range(2):  # warm-up, then the measured round
        cpu = own_cpu_seconds()
        started = time.perf_counter()
        handles = [pipe.add_request(i, ov_runtime.Tensor(np.asarray(ids)), config) for i in range(streams)]
        first: dict[int, float] = {}
        tokens = 0
        while pipe.has_non_finished_requests():
            pipe.step()
            for i, handle in enumerate(handles):
                if handle.can_read():
                    for output in handle.read().values():
                        tokens += len(output.generated_ids)
                    first.setdefault(i, time.perf_counter() - started)
        wall = time.perf_counter() - started
        cpu = own_cpu_seconds() - cpu
    measured = summary(list(first.values()), tokens, wall, streams)
    return measured | {"engine_cpu_ms_per_token": cpu_per_token(cpu, tokens)}


async def sift_arm(url: str, model: str, n_tokens: int, streams: int, server_pid: int) -> dict[str, Any]:
    import httpx

    body = {"model": model, "prompt": PROMPT, "max_tokens": n_tokens, "stream": True, "temperature": 0}
    body["stream_options"] = {"include_usage": True}

    async def one(client: httpx.AsyncClient, started: float) -> tuple[float, int]:
        first = 0.0
        tokens = 0
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and not first:
                    first = time.perf_counter() - started
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
        return first, tokens

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as client:
        # A warm-up at the same concurrency, as the engine-alone arm has: the engine's first
        # steps at a new batch size cost more than the later ones.
        await asyncio.gather(*(one(client, time.perf_counter()) for _ in range(streams)))
        engines = child_pids(server_pid)
        cpu = [cpu_seconds(server_pid), sum(map(cpu_seconds, engines)), own_cpu_seconds()]
        started = time.perf_counter()
        results = await asyncio.gather(*(one(client, started) for _ in range(streams)))
        wall = time.perf_counter() - started
        after = [cpu_seconds(server_pid), sum(map(cpu_seconds, engines)), own_cpu_seconds()]
    server, engine, client = (b - a for a, b in zip(cpu, after, strict=True))
    tokens = sum(r[1] for r in results)
    return summary([r[0] for r in results], tokens, wall, streams) | {
        "engine_cpu_ms_per_token": cpu_per_token(engine, tokens),
        "server_cpu_ms_per_token": cpu_per_token(server, tokens),
        "client_cpu_ms_per_token": cpu_per_token(client, tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--streams", default="1,8,32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1, help="engine and Sift arms interleaved this many times")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--shape", choices=("tiny", "qwen3-0.6b"), default="tiny", help="the random model's size")
    parser.add_argument("--engine-cpus", help="CPUs of the engine alone and of Sift's server (e.g. 0)")
    parser.add_argument("--client-cpus", help="CPUs of the Sift arm's client (e.g. 1)")
    args = parser.parse_args()
    if (args.engine_cpus is None) != (args.client_cpus is None):
        parser.error("--engine-cpus and --client-cpus go together")
    engine_cpus = {int(c) for c in args.engine_cpus.split(",")} if args.engine_cpus else None
    client_cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None
    hf, ov = build(args.out, args.shape)
    streams = [int(s) for s in args.streams.split(",")]
    report: dict[str, Any] = {}
    if not args.skip_transformers:
        report["transformers_one_at_a_time"] = transformers_arm(hf, args.tokens)
    from tests.fixtures.server_process import start_server
    from tests.fixtures.tiny_generator import catalog_entry

    catalog = args.out / "catalog"
    catalog.mkdir(exist_ok=True)
    # The engine child at the bench process's own priority, like the engine-alone arm: the
    # comparison is of Sift's overhead, not of engine_nice (which matters beside other work).
    (catalog / "g.yaml").write_text(catalog_entry("bench/generator", ov, "options:\n  engine_nice: 0\n"))
    # Both arms' engines get one inference thread per CPU they run on. The server starts already
    # pinned (its engine child inherits the CPUs), and serves the generator as its default model:
    # no embedder, and no backend-deciding child beside the engine on its CPUs.
    if engine_cpus is not None:
        pin(os.getpid(), engine_cpus)  # the engine alone is built and runs in this process
    threads = len(os.sched_getaffinity(0))
    serve_args = ["--catalog", str(catalog), "--model", "bench/generator", "--torch-threads", str(threads)]
    server = start_server(serve_args, args.out / "server.log")
    pipe = engine_pipeline(ov, threads)
    report["engine_alone"], report["sift"] = [], []
    try:
        # Interleaved (engine, Sift) per stream count and round: both arms see the same load.
        for _ in range(args.rounds):
            for s in streams:
                if engine_cpus is not None:
                    pin(os.getpid(), engine_cpus)
                report["engine_alone"].append(engine_arm(pipe, ov, args.tokens, s))
                if client_cpus is not None:
                    pin(os.getpid(), client_cpus)
                report["sift"].append(
                    asyncio.run(sift_arm(server.url, "bench/generator", args.tokens, s, server.process.pid))
                )
    finally:
        server.stop()
    report["sift_over_engine_tokens_per_s"] = {
        str(s): statistics.median(
            sift["tokens_per_s_total"] / engine["tokens_per_s_total"]
            for engine, sift in zip(report["engine_alone"], report["sift"], strict=True)
            if engine["streams"] == s
        )
        for s in streams
    }
    pairs = list(zip(report["engine_alone"], report["sift"], strict=True))
    report["sift_server_cpu_over_engine_cpu"] = {
        str(s): statistics.median(
            sift["server_cpu_ms_per_token"] / engine["engine_cpu_ms_per_token"]
            for engine, sift in pairs
            if engine["streams"] == s
        )
        for s in streams
    }
    # All of Sift's CPU per token (its engine child and its server) over the engine alone's: on
    # one core, where every process of an arm shares it, this is the tokens/s the arm can keep.
    report["sift_cpu_over_engine_cpu"] = {
        str(s): statistics.median(
            (sift["engine_cpu_ms_per_token"] + sift["server_cpu_ms_per_token"]) / engine["engine_cpu_ms_per_token"]
            for engine, sift in pairs
            if engine["streams"] == s
        )
        for s in streams
    }
    (args.out / "generation_engines.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
