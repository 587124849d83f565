# Streaming with asyncio: tokens printed as they are generated, several requests at once on one engine.
import asyncio
import os

from peregrine import AsyncEngineArgs, AsyncLLMEngine, SamplingParams
from peregrine.sampling_params import RequestOutputKind

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "pycoder-tiny")


async def stream(engine, prompt, request_id):
    # DELTA: each output holds only the text generated since the previous one.
    sampling_params = SamplingParams(temperature=0.0, max_tokens=40, output_kind=RequestOutputKind.DELTA)
    pieces = []
    async for output in engine.generate(prompt, sampling_params, request_id=request_id):
        for completion in output.outputs:
            pieces.append(completion.text)
            print(f"[{request_id}] {completion.text!r}", flush=True)
        if output.finished:
            print(f"[{request_id}] finished: {''.join(pieces)!r}")


async def main():
    engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model=MODEL))
    try:
        await asyncio.gather(stream(engine, "def binary_search(items, target):\n", "search"),
                             stream(engine, "class Queue:\n", "queue"))
    finally:
        engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
