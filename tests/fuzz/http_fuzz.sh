#!/usr/bin/env bash
# Builds and runs the HTTP request parser + request-JSON fuzzer (libFuzzer + ASan + UBSan; clang only, not part of
# CI). Findings (crash-*, leak-*) and the grown corpus are in build/fuzz/http/.
# Usage: [JOBS=N] tests/fuzz/http_fuzz.sh [TOTAL_RUNS] [extra libFuzzer flags]   (default 1,000,000 runs)
# Seeds: real requests as the openai clients, curl and browsers send them (chunked, pipelined, HTTP/1.0,
# absolute-form, with the bodies of the e2e tests), written by this script into build/fuzz/http/seeds/.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build/fuzz/http"
mkdir -p "$out/corpus" "$out/seeds" "$out/obj"
runs="${1:-1000000}"
shift || true
jobs="${JOBS:-1}"
command -v clang++ >/dev/null || { echo "http_fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }

flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -I"$root/include")
sources=("$root/src/server/http_parser.cpp" "$root/src/server/request_parsing.cpp" "$root/src/server/errors.cpp"
         "$root/src/engine/sampling_params.cpp" "$root/src/core/status.cpp" "$root/tests/fuzz/http_fuzz.cpp")
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'clang++ "$@" -c "{}" -o "'"$out"'/obj/$(basename "{}" .cpp).o"' _ "${flags[@]}"
clang++ -fsanitize=fuzzer,address,undefined "$out"/obj/*.o -o "$out/http_fuzz"

python3 - "$out/seeds" <<'PY'
import json, os, sys
d = sys.argv[1]
chat = {"model": "pycoder-tiny", "messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Add one."}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"}],
        "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
          "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
        "tool_choice": "auto", "temperature": 0.7, "top_p": 0.9, "max_completion_tokens": 40, "stream": True,
        "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2, "stop": ["</tool_call>"],
        "include_stop_str_in_output": True, "continue_final_message": False, "seed": 5}
completion = {"model": "pycoder-tiny", "prompt": ["def f():", [1, 2, 3]], "max_tokens": 16, "n": 2, "best_of": 2,
              "temperature": 0, "top_k": 40, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
              "repetition_penalty": 1.1, "logit_bias": {"17": -100}, "stop": "\n\n", "stop_token_ids": [2],
              "ignore_eos": False, "min_tokens": 1, "logprobs": 2, "echo": True, "prompt_logprobs": 1,
              "skip_special_tokens": True, "spaces_between_special_tokens": True}
bodies = [json.dumps(chat), json.dumps(completion), json.dumps({"prompt": "x", "max_tokens": 1}),
          json.dumps({"tokens": [1, 2, 3]}), json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
          '{"prompt": "' + "x" * 50 + '", "stop": ["a", "b"], "n": 8}']
head = ("Host: 127.0.0.1:8000\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
        "User-Agent: OpenAI/JS 4.104.0\r\nX-Stainless-Lang: js\r\nAuthorization: Bearer sk-test\r\n"
        "Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n")
reqs = []
for b in bodies:
    reqs.append(f"POST /v1/chat/completions HTTP/1.1\r\n{head}Content-Length: {len(b)}\r\n\r\n{b}")
    chunks = "".join(f"{len(b[i:i+7]):x}\r\n{b[i:i+7]}\r\n" for i in range(0, len(b), 7))
    reqs.append(f"POST /v1/completions HTTP/1.1\r\n{head}Transfer-Encoding: chunked\r\n\r\n{chunks}0\r\nX-T: 1\r\n\r\n")
    reqs.append(f"POST http://localhost:8000/tokenize HTTP/1.0\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(b)}\r\n\r\n{b}")
reqs += ["GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
         "HEAD /v1/models HTTP/1.1\r\nHost: [::1]:8000\r\nConnection: close\r\n\r\n",
         "OPTIONS /v1/completions HTTP/1.1\r\nHost: localhost\r\nOrigin: http://app.example\r\n"
         "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n\r\n",
         "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
         "POST /v1/completions HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
         "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
         "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc",
         "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0005;a=b;c=\"d\"\r\nhello\r\n0\r\n\r\n"]
for i, r in enumerate(reqs):
    open(os.path.join(d, f"http_{i}"), "wb").write(b"\x00" + r.encode())
for i, b in enumerate(bodies):
    open(os.path.join(d, f"json_{i}"), "wb").write(b"\x01" + b.encode())
PY
cat > "$out/http.dict" <<'DICT'
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
"HTTP/1.1"
"HTTP/1.0"
"GET "
"POST "
"HEAD "
"OPTIONS "
"Host: "
"Content-Length: "
"Transfer-Encoding: "
"chunked"
"Connection: "
"close"
"keep-alive"
"Expect: 100-continue"
"http://"
";ext=1"
"\"messages\""
"\"tools\""
"\"function\""
"\"stop\""
"\"prompt\""
"\"tool_calls\""
"\"content\""
"\"type\""
"\"text\""
"\"logit_bias\""
"\"stream_options\""
DICT

cd "$out"
common=(-max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -dict=http.dict)
if [ "$jobs" -gt 1 ]; then
  ./http_fuzz -jobs="$jobs" -workers="$jobs" -runs=$((runs / jobs)) "${common[@]}" "$@" corpus seeds
  grep -h "^Done\|ERROR\|SUMMARY\|stat::number_of_executed_units" fuzz-*.log || true
else
  UBSAN_OPTIONS=halt_on_error=1 ./http_fuzz -runs="$runs" "${common[@]}" "$@" corpus seeds
fi
