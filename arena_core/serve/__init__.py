"""Serving Arena checkpoints: an OpenAI-compatible HTTP server and the clients of it.

models.py loads checkpoints and models by name (LoRA members on one base), batching.py batches
concurrent requests on one generation backend (jobs.py: a request in flight and its text;
backends.py: the backend by name; running.py: continuous batching on the torch engine), protocol.py
is the OpenAI wire format (strict request schemas, errors), app.py the routes, answers.py turns a
request into an answer or a stream (answer_extras.py: logprobs, token ids, tool calls; chunks.py:
the streamed chunks; echo.py: a completion's echoed prompt and its scores), responses_api.py
answers OpenAI's Responses API through the chat path (and keeps its stored responses), tokens.py
the token-in-token-out routes (`/tokenize`, `/v1/chat/completions/tokens`, `/tokenizer_info`),
chat.py renders tools and reads tool calls, grammar.py constrains decoding (JSON schemas, forced
calls), act.py serves classic-RL policies (`/v1/act`), server.py starts it safely (`arena deploy`,
`arena.deploy`, `serve_policy` inside a run), client.py talks to it (or to the request batcher in
process, for `arena generate` without a server). dashboard/ is `arena dashboard`.
"""
