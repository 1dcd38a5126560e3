"""Serving Arena checkpoints: an OpenAI-compatible HTTP server and the clients of it.

models.py loads checkpoints (LoRA members on one base), engine.py batches concurrent requests
on the torch backend, protocol.py and app.py are the OpenAI wire format and routes, server.py
starts it safely (`arena deploy`, `arena.deploy`), client.py talks to it (or to the engine in
process, for `arena generate` without a server).
"""
