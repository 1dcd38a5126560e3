"""A verifiers environment whose import fails (test fixture)."""

raise RuntimeError("vf-broken-fixture needs a GPU cluster")
