"""The fixture's MCP tool server (verifiers runs it as `python -m vf_v1_tools_fixture.tools`)."""

import verifiers.v1 as vf


class FlipTools(vf.Toolset[vf.ToolsetConfig, vf.State]):
    @vf.tool
    async def flip(self, up: bool) -> str:
        """Flip the switch; says where it ended."""
        return "switch is down" if up else "switch is up"


if __name__ == "__main__":
    FlipTools.run()
