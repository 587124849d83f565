#!/usr/bin/env python3
"""Soak: N requests (default 10,000) of every kind a client sends, closed-loop at a fixed concurrency, against one
Peregrine server; the server's memory is sampled as it goes and must not grow once warm (issue 14: "a soak of 10,000
requests with no growth in device or host memory"). Standard library only, so it runs on the GPU machine too.

The mix, by request index (deterministic; prompts from a pool that shares prefixes, so the prefix cache hits and
evicts): completions and chat completions, streamed and not; n = 2 with logprobs; stop strings with min_tokens;
structured outputs (a JSON schema, a regex, a choice); streams the client drops after their first chunk (aborts
mid-generation); long prompts (~700 tokens); malformed requests (each must get a 400). Every answer is checked
(status, choices, finish_reason, [DONE], usage within max_tokens).

Memory: every --sample-every finished requests, the server's RSS and descriptors (/proc) and its /metrics (on CUDA,
peregrine:device_memory_used_bytes). Growth is measured from the first sample at or after --warmup requests
(allocator pools, caches and CUDA graphs fill first) to the last, taken once the server is idle; a least-squares
slope over the samples after warm-up tells a steady leak from a step. Exit 0 when every request got its expected
answer, the server stayed up and exited 0 on SIGTERM, and neither memory grew by more than --max-growth-mb after
warm-up.

  python3 scripts/stress/soak.py [--requests 10000] [--concurrency 32] [--device cpu|cuda] [--model DIR]
      [--bin build/current/peregrine] [--server-args "..."] [--warmup 1000] [--sample-every 250]
      [--max-growth-mb 32] [--json-out FILE] [--timeout-s 7200]
Loopback only; bounded in requests, connections and time.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_NAME = "soak"


def parse_args():
    p = argparse.ArgumentParser(description="Soak a Peregrine server with a mix of requests and watch its memory.")
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default=os.path.join(ROOT, "models", "pycoder-tiny"))
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "current", "peregrine"))
    p.add_argument("--server-args", default="", help="extra `serve` flags, space-separated")
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--sample-every", type=int, default=250)
    p.add_argument("--max-growth-mb", type=float, default=32)
    p.add_argument("--json-out", default="")
    p.add_argument("--timeout-s", type=float, default=7200)
    a = p.parse_args()
    a.requests = max(1, min(a.requests, 1000000))
    a.concurrency = max(1, min(a.concurrency, 512))
    return a


class Server:
    """`peregrine serve` on a free port; keeps the last 16 KB of its log."""

    def __init__(self, a):
        args = [a.bin, "serve", a.model, "--port", "0", "--device", a.device, "--served-model-name", MODEL_NAME,
                "--chat-template", os.path.join(ROOT, "tests", "e2e", "fixtures", "server_chat_template.jinja"),
                "--max-model-len", "2048", "--max-num-seqs", str(max(a.concurrency, 8))]
        if a.device == "cpu":
            args += ["--num-gpu-blocks-override", "2048"]
        args += a.server_args.split()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.tail = b""
        self.port = None
        started = threading.Event()

        def read():
            for line in iter(self.proc.stderr.readline, b""):
                self.tail = (self.tail + line)[-16384:]
                m = re.search(rb"serving .* on http://[^:]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    started.set()
            started.set()

        threading.Thread(target=read, daemon=True).start()
        if not started.wait(300) or self.port is None:
            raise SystemExit("server did not start:\n" + self.tail.decode(errors="replace"))

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self):
        return self.tail.decode(errors="replace")


def send(port, method, path, body=None, stream=False, drop_after_first_chunk=False, timeout=600):
    """One request on its own connection; returns dict(status, body, dropped, error)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        headers = {} if data is None else {"content-type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        res = conn.getresponse()
        if stream and drop_after_first_chunk and res.status == 200:
            first = res.readline()  # the first line of the event stream: the client then goes away mid-generation
            conn.sock.close()
            return {"status": res.status, "body": first.decode(errors="replace"), "dropped": True}
        return {"status": res.status, "body": res.read().decode(errors="replace")}
    except (OSError, http.client.HTTPException) as e:
        return {"status": 0, "body": "", "error": repr(e)}
    finally:
        conn.close()


# ---- the request mix ------------------------------------------------------------------------------------------------
HEADS = ["import os\nimport sys\n\n", "from typing import List, Optional\n\n", "import numpy as np\n\n", ""]
BODIES = [f"def func_{i}(values, scale={i % 7 + 1}):\n    \"\"\"Return the scaled values of task {i}.\"\"\"\n"
          f"    result = []\n    for v in values:\n        result.append(v * scale + {i})\n    return result\n\n"
          for i in range(48)]
LONG_FILE = "".join(BODIES[i % len(BODIES)] for i in range(12))  # ~700 tokens
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}},
          "required": ["name", "count"], "additionalProperties": False}
KINDS = ["completion", "completion_stream", "chat", "chat_stream", "n2_logprobs", "stop_min_tokens", "structured",
         "dropped_stream", "long_prompt", "malformed"]
MALFORMED = ['{"model": "soak", "prompt": "x", "max_tokens": -3}', '{"model": "soak", "prompt": ', "[1, 2, 3]",
             '{"model": "soak", "messages": "not a list"}', '{"model": "soak", "prompt": "x", "temperature": "hot"}']


def make_request(i):
    r = random.Random(i * 7919 + 17)
    kind = KINDS[i % len(KINDS)]
    prompt = r.choice(HEADS) + r.choice(BODIES) + f"def task_{i % 97}("
    max_tokens = 4 + r.randrange(40)
    sampling = {"temperature": 0} if r.random() < 0.5 else {"temperature": 0.8, "top_p": 0.95, "seed": i}
    base = {"model": MODEL_NAME, "max_tokens": max_tokens, **sampling}

    def chat(content):
        return {**base, "messages": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": content}]}

    q = {"kind": kind, "path": "/v1/completions"}
    if kind == "completion":
        q["body"] = {**base, "prompt": prompt}
    elif kind == "completion_stream":
        q.update(stream=True, body={**base, "prompt": prompt, "stream": True})
    elif kind == "chat":
        q.update(path="/v1/chat/completions", body=chat(prompt))
    elif kind == "chat_stream":
        q.update(path="/v1/chat/completions", stream=True,
                 body={**chat(prompt), "stream": True, "stream_options": {"include_usage": True}})
    elif kind == "n2_logprobs":
        q.update(n=2, body={**base, "prompt": prompt, "n": 2, "logprobs": 3, "temperature": 0.7, "seed": i})
    elif kind == "stop_min_tokens":
        q["body"] = {**base, "prompt": prompt, "stop": ["\n\n", "return"], "min_tokens": 2}
    elif kind == "structured":
        extra = [{"response_format": {"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA}}, "max_tokens": 60},
                 {"structured_outputs": {"regex": f"[a-z]{{2,5}}-{i % 10}"}},
                 {"guided_choice": ["yes", "no", "maybe"]}][i % 3]
        q.update(path="/v1/chat/completions", body={**chat("Answer."), **extra})
    elif kind == "dropped_stream":
        q.update(stream=True, drop=True, body={**base, "prompt": prompt, "stream": True, "max_tokens": 200, "ignore_eos": True})
    elif kind == "long_prompt":
        q["body"] = {**base, "prompt": LONG_FILE + prompt}
    else:
        q.update(raw=MALFORMED[i % 5], path="/v1/chat/completions" if i % 5 == 3 else "/v1/completions")
    return q


def check(q, res):
    """An error string, or '' when the answer is what the request must get."""
    if q["kind"] == "malformed":
        if res["status"] != 400:
            return f"status {res['status']} (expected 400): {res['body'][:200]}"
        try:
            return "" if json.loads(res["body"])["error"]["message"] else "no error message"
        except (ValueError, KeyError, TypeError):
            return "error body not an OpenAI error"
    if res["status"] != 200:
        return f"status {res['status']}: {(res.get('error') or res['body'])[:300]}"
    if q.get("drop"):
        return "" if res["body"].startswith("data: ") else f"first line {res['body'][:100]!r}"
    max_tokens = q["body"]["max_tokens"]
    if q.get("stream"):
        if not res["body"].rstrip().endswith("data: [DONE]"):
            return "stream without [DONE]"
        finish, usage = None, None
        for line in res["body"].split("\n"):
            if not line.startswith("data: {"):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                return f"stream error: {json.dumps(ev['error'])[:200]}"
            for c in ev.get("choices") or []:
                finish = c.get("finish_reason") or finish
            usage = ev.get("usage") or usage
        if not finish:
            return "stream without finish_reason"
        if q["kind"] == "chat_stream" and (not usage or usage["completion_tokens"] > max_tokens):
            return f"usage {usage}"
        return ""
    try:
        j = json.loads(res["body"])
    except ValueError:
        return "body not JSON"
    n = q.get("n", 1)
    choices = j.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        return f"choices {str(choices)[:200]}"
    if not all(c.get("finish_reason") for c in choices):
        return "no finish_reason"
    if not j.get("usage") or j["usage"]["completion_tokens"] > n * max_tokens:
        return f"usage {j.get('usage')}"
    if q["kind"] == "n2_logprobs" and not all(
            c.get("logprobs") and len(c["logprobs"]["tokens"]) == len(c["logprobs"]["top_logprobs"]) for c in choices):
        return "logprobs missing"
    if q["kind"] == "structured" and choices[0]["finish_reason"] == "stop":
        text = choices[0]["message"]["content"]
        if "guided_choice" in q["body"] and text not in q["body"]["guided_choice"]:
            return f"choice {text!r}"
        if "response_format" in q["body"]:
            try:
                json.loads(text)
            except ValueError:
                return f"not JSON: {text[:100]!r}"
    return ""


# ---- memory samples -------------------------------------------------------------------------------------------------
def metrics(port):
    out = {}
    for line in send(port, "GET", "/metrics")["body"].split("\n"):
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)

    def get(name, label=""):
        for k, v in out.items():
            if (k == name or k.startswith(name + "{")) and label in k:
                return v
        return None
    return get


def proc_stats(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, AttributeError):
        return None, None


def main():
    a = parse_args()
    t0 = time.time()
    server = Server(a)
    samples, failures = [], []
    by_kind = {k: 0 for k in KINDS}
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "next_sample": a.sample_every}

    def sample(done):
        m = metrics(server.port)
        rss, fds = proc_stats(server.proc.pid)
        s = {"requests": done, "seconds": round(time.time() - t0, 1), "rss": rss, "fds": fds,
             "device_used": m("peregrine:device_memory_used_bytes"), "rss_metric": m("process_resident_memory_bytes"),
             "running": m("vllm:num_requests_running"), "kv_usage": m("vllm:kv_cache_usage_perc"),
             "prefix_hits": m("vllm:prefix_cache_hits_total"),
             "aborted": m("vllm:request_success_total", 'finished_reason="abort"')}
        samples.append(s)
        mb = lambda b: "-" if b is None else f"{b / 1048576:.1f}"
        print(f"{done:7d} req {s['seconds']:7.0f} s  rss {mb(rss):>8} MB  fds {fds}  device {mb(s['device_used']):>9} MB  "
              f"running {s['running']}  aborted {s['aborted']}", flush=True)

    deadline = t0 + a.timeout_s

    def worker():
        while True:
            with lock:
                if state["next"] >= a.requests or not server.alive() or time.time() > deadline:
                    return
                i = state["next"]
                state["next"] += 1
            q = make_request(i)
            if "raw" in q:
                res = send(server.port, "POST", q["path"], q["raw"])
            else:
                res = send(server.port, "POST", q["path"], q["body"], stream=q.get("stream", False),
                           drop_after_first_chunk=q.get("drop", False))
            err = check(q, res)
            with lock:
                if err:
                    failures.append({"i": i, "kind": q["kind"], "err": err})
                by_kind[q["kind"]] += 1
                state["done"] += 1
                take = state["done"] >= state["next_sample"]
                if take:
                    state["next_sample"] = state["done"] + a.sample_every
                    sample(state["done"])

    sample(0)
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(100):  # idle: the dropped streams' aborts land, nothing runs; then the last sample
        if not server.alive():
            break
        m = metrics(server.port)
        if not m("vllm:num_requests_running") and not m("vllm:num_requests_waiting"):
            break
        time.sleep(0.1)
    done = state["done"]
    if server.alive():
        sample(done)
    alive = server.alive()
    server.proc.send_signal(signal.SIGTERM)
    try:
        exit_code = server.proc.wait(60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        exit_code = "timeout"

    warm = next((s for s in samples if s["requests"] >= min(a.warmup, done)), samples[0])
    last = samples[-1]
    after = [s for s in samples if s["requests"] >= warm["requests"]]

    def slope_per_1000(key):  # least squares, bytes per 1,000 requests, over the samples after warm-up
        pts = [(s["requests"], s[key]) for s in after if s[key] is not None]
        if len(pts) < 3:
            return None
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in pts) / sxx * 1000

    def growth(key):
        return None if warm[key] is None or last[key] is None else last[key] - warm[key]

    limit = a.max_growth_mb * 1048576
    summary = {
        "requests": done, "asked": a.requests, "concurrency": a.concurrency, "device": a.device,
        "seconds": round(time.time() - t0, 1), "by_kind": by_kind, "failures": len(failures),
        "first_failures": failures[:10], "server_alive": alive, "exit_code": exit_code,
        "warmup_requests": warm["requests"],
        "rss_bytes": {"start": samples[0]["rss"], "warm": warm["rss"], "last": last["rss"],
                      "max": max(s["rss"] or 0 for s in samples), "growth_after_warmup": growth("rss"),
                      "slope_per_1000_requests": slope_per_1000("rss")},
        "fds": {"start": samples[0]["fds"], "warm": warm["fds"], "last": last["fds"]},
        "device_used_bytes": {"warm": warm["device_used"], "last": last["device_used"],
                              "growth_after_warmup": growth("device_used"),
                              "slope_per_1000_requests": slope_per_1000("device_used")},
    }
    ok = (not failures and alive and exit_code == 0 and done == a.requests
          and (summary["rss_bytes"]["growth_after_warmup"] or 0) <= limit
          and (summary["device_used_bytes"]["growth_after_warmup"] or 0) <= limit
          and (last["fds"] or 0) <= (warm["fds"] or 0) + 8)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({**summary, "samples": samples}, f, indent=1)
    print(json.dumps(summary, indent=1))
    if not ok:
        print("server log (tail):\n" + server.log_tail()[-4000:])
    print("SOAK PASSED" if ok else "SOAK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
