"""`arena tinker serve`: the Tinker training API (SDK 0.38), served by Arena on this machine.

`app.py` holds the HTTP routes and futures, `wire.py` the SDK's protobuf, `service.py` what
happens to the models (LoRA clients in an AdapterBank, sampling, checkpoints), `sampling.py`
Tinker's stop rules and prompt logprobs, `learner.py` Arena's logprob path for forward/backward,
`losses.py` the built-in losses on Arena's kernels, `batching.py` twin sampling requests merged,
`capacity.py` how many clients fit (the planner's memory model), `store.py` the checkpoints on
disk as Arena runs, `runs.py` the RestClient's listing and `server.py` the start.
docs/tinker.md maps every SDK call to what happens here.
"""
