"""A plugin whose import fails: the loader must report it and carry on."""

raise RuntimeError("boom at import: the plugin's author broke something")
