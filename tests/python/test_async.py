"""AsyncLLM: streaming under asyncio. Deltas add up to what LLM.generate returns; cumulative and final-only kinds;
concurrent streams; a stream closed or cancelled early aborts its request in the engine; the event loop never
blocks while the engine works."""

from __future__ import annotations

import asyncio
import time

import pytest

import peregrine
from peregrine import AsyncEngineArgs, AsyncLLM, RequestOutputKind, SamplingParams

from conftest import MODEL

PROMPTS = ["def fibonacci(n):\n", "class Stack:\n", "import os\n", "x = [1, 2, 3]\n"]


@pytest.fixture(scope="module")
def engine():
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(MODEL), device="cpu", max_model_len=512,
                                                  num_gpu_blocks_override=512, generation_config="vllm"))
    yield e
    e.shutdown()


async def collect(engine, prompt, params, request_id):
    return [out async for out in engine.generate(prompt, params, request_id=request_id)]


def test_deltas_add_up_to_the_offline_result(engine, llm):
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=1, output_kind=RequestOutputKind.DELTA)
    expected = llm.generate(PROMPTS, params, use_tqdm=False)

    async def main():
        return await asyncio.gather(*(collect(engine, p, params, f"delta-{i}") for i, p in enumerate(PROMPTS)))

    streams = asyncio.run(main())
    for outs, ref in zip(streams, expected):
        assert len(outs) > 1, "expected several deltas"
        assert all(not o.finished for o in outs[:-1]) and outs[-1].finished
        assert "".join(c.text for o in outs for c in o.outputs) == ref.outputs[0].text
        assert [t for o in outs for c in o.outputs for t in c.token_ids] == ref.outputs[0].token_ids
        assert sum(len(c.logprobs) for o in outs for c in o.outputs) == len(ref.outputs[0].token_ids)
        assert outs[-1].outputs[-1].finish_reason == "length"
        assert all(o.prompt_token_ids == ref.prompt_token_ids for o in outs)


def test_cumulative_and_final_only(engine, llm):
    ref = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, n=2), use_tqdm=False)[0]

    async def main():
        cumulative = await collect(engine, PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, n=2), "cum")
        final = await collect(engine, PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, n=2,
                                                                 output_kind=RequestOutputKind.FINAL_ONLY), "fin")
        return cumulative, final

    cumulative, final = asyncio.run(main())
    lengths = [len(o.outputs[0].token_ids) for o in cumulative]
    assert lengths == sorted(lengths) and len(cumulative) > 1
    assert [c.text for c in cumulative[-1].outputs] == [c.text for c in ref.outputs]
    assert len(final) == 1 and final[0].finished
    assert [c.token_ids for c in final[0].outputs] == [c.token_ids for c in ref.outputs]


def test_closing_or_cancelling_a_stream_aborts_its_request(engine):
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True, output_kind=RequestOutputKind.DELTA)

    async def main():
        before = engine._engine.stats()["requests_finished_abort"]
        gen = engine.generate(PROMPTS[1], long, request_id="closed")
        first = await gen.__anext__()
        assert not first.finished
        await gen.aclose()  # the consumer stops reading

        async def consume():
            async for _ in engine.generate(PROMPTS[2], long, request_id="cancelled"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if engine._engine.stats()["requests_finished_abort"] >= before + 2:
                break
            await asyncio.sleep(0.01)
        assert engine._engine.stats()["requests_finished_abort"] >= before + 2
        # The ids are free again and the engine keeps serving.
        outs = await collect(engine, PROMPTS[1], SamplingParams(temperature=0, max_tokens=3), "closed")
        assert outs[-1].finished

    asyncio.run(main())


def test_abort_ends_the_stream(engine):
    async def main():
        outs = []
        async for out in engine.generate(PROMPTS[0], SamplingParams(max_tokens=400, ignore_eos=True),
                                         request_id="aborted"):
            outs.append(out)
            if len(outs) == 2:
                await engine.abort("aborted")
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    assert len(outs[-1].outputs[0].token_ids) < 400


def test_the_event_loop_keeps_running(engine):
    """A ticker on the same loop keeps ticking while a batch streams (nothing blocks the loop)."""
    async def main():
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0.005)

        t = asyncio.create_task(ticker())
        start = time.monotonic()
        await asyncio.gather(*(collect(engine, p, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True),
                                       f"tick-{i}") for i, p in enumerate(PROMPTS)))
        elapsed = time.monotonic() - start
        done = True
        await t
        return ticks, elapsed

    ticks, elapsed = asyncio.run(main())
    assert ticks >= max(2, int(elapsed / 0.005 * 0.3))


def test_errors(engine):
    async def main():
        with pytest.raises(TypeError, match="request_id"):
            await collect(engine, "x", SamplingParams(), None)
        with pytest.raises(ValueError, match="logit_bias: token id 40000 is out of the vocabulary"):
            await collect(engine, "x", SamplingParams(max_tokens=5, logit_bias={40000: 1.0}), "bad")
        gen = engine.generate("x", SamplingParams(max_tokens=50, ignore_eos=True), request_id="dup")
        await gen.__anext__()
        with pytest.raises(ValueError, match="already in use"):
            await collect(engine, "x", SamplingParams(), "dup")
        await gen.aclose()

    with pytest.raises(TypeError):
        AsyncLLM(str(MODEL), bogus=1)
    asyncio.run(main())


def test_tokenizer_is_async(engine):
    tok = asyncio.run(engine.get_tokenizer())
    assert tok.encode("x")[0] == 1
    assert isinstance(engine, peregrine.AsyncLLMEngine)
