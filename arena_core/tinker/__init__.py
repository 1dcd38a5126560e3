"""`arena tinker serve`: the Tinker training API (SDK 0.38), served by Arena on this machine.

`app.py` holds the HTTP routes and futures, `wire.py` the SDK's protobuf, `engine.py` what
happens to the models (LoRA clients in an AdapterBank, Arena's logprob path, sampling),
`losses.py` the built-in losses on Arena's kernels, `store.py` the checkpoints on disk and
`server.py` the start. docs/tinker.md maps every SDK call to what happens here.
"""
